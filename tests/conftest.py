"""Shared fixtures: build small logs in our own format and warehouses from them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from pipeline.schema.record import EXAMPLE_RECORD

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def record(i: int = 0, **overrides: object) -> dict:
    """A valid record (EXAMPLE_RECORD with a new id and arrival), with overrides applied."""
    r = dict(EXAMPLE_RECORD)
    shift = float(i)
    r["request_id"] = f"req-{i:06d}"
    for k in ("arrival_ts", "scheduled_ts", "first_token_ts", "finish_ts"):
        r[k] = EXAMPLE_RECORD[k] + shift  # type: ignore[operator]
    r.update(overrides)
    return r


def write_jsonl(path: Path, records: Iterable[dict | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"../shared is absent ({SHARED}); it holds the real traces CI tests with")
    return SHARED


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """Environment for running the real `pipeline` entry point in a subprocess."""
    env = dict(os.environ)
    env["PIPELINE_WAREHOUSE"] = str(tmp_path / "warehouse")
    env["PYTHONUNBUFFERED"] = "1"
    return env

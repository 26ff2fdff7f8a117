"""Shared fixtures: build small logs in our own format and warehouses from them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import polars as pl
import pytest

from pipeline.schema.record import EXAMPLE_RECORD
from pipeline.warehouse.arrow import polars_schema

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


def derived_frame(table: str, columns: dict[str, list]) -> pl.DataFrame:
    """A frame of a derived table's declared schema: ``columns`` given, every other one null."""
    schema = polars_schema(table)
    n = len(next(iter(columns.values())))
    return pl.DataFrame(
        {c: columns.get(c, [None] * n) for c in schema}, schema=schema, strict=False
    )


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


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every Spark test (starting the JVM costs ~10 s)."""
    from pipeline.engines.spark_engine import missing_requirements

    reason = missing_requirements()
    if reason:
        pytest.skip(f"Spark tests need Java 17 and pyspark: {reason}")
    from pipeline.engines.spark_engine import start_session

    session = start_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            "spark.sql.codegen.wholeStage": "false",  # tiny data: compiling costs more than runs
        },
    )
    yield session
    session.stop()

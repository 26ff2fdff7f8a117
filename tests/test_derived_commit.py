"""Derived tables go through the warehouse's commit protocol: stage, wait for the table's lock,
publish by rename. A writer killed before it publishes leaves the old table whole and only a
staging folder, which the next writer removes; a writer waits for the lock, never says busy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import polars as pl

from pipeline.warehouse.derived import write_derived
from pipeline.warehouse.layout import Layout
from tests.conftest import REPO

WRITE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import polars as pl
    from pipeline.warehouse.derived import write_derived
    from pipeline.warehouse.layout import Layout
    write_derived(Layout(Path(sys.argv[1])), "mine", pl.DataFrame({"v": [int(sys.argv[2])] * 3}))
    """
)


def _start(root, value: int, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITE, str(root), str(value)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def _value(layout: Layout) -> int:
    (v,) = pl.read_parquet(layout.root / "mine" / "data.parquet")["v"].unique().to_list()
    return v


def _staged(layout: Layout) -> list[str]:
    return sorted(p.name for p in layout.staging_dir.glob("derived-mine-*"))


def test_a_killed_writer_leaves_the_old_table_and_is_cleaned_up(tmp_path):
    layout = Layout(tmp_path / "wh")
    write_derived(layout, "mine", pl.DataFrame({"v": [1, 1, 1]}))
    proc = _start(layout.root, 2, {"PIPELINE_TEST_CRASH_AT": "derived_before_publish"})
    assert proc.wait(timeout=120) == -signal.SIGKILL
    assert _value(layout) == 1  # the old table, whole
    assert len(_staged(layout)) == 1  # what the killed writer staged, never published
    write_derived(layout, "mine", pl.DataFrame({"v": [3, 3, 3]}))
    assert _value(layout) == 3 and _staged(layout) == []
    assert not list(layout.locks_dir.glob("derived-mine-*.lock"))  # per-writer locks removed


def test_a_writer_waits_for_the_tables_lock(tmp_path):
    layout = Layout(tmp_path / "wh")
    write_derived(layout, "mine", pl.DataFrame({"v": [1, 1, 1]}))
    with layout.lock("derived-mine", blocking=True):
        proc = _start(layout.root, 2)
        deadline = time.monotonic() + 120
        while not list(layout.staging_dir.glob("derived-mine-*/data.parquet")):
            assert proc.poll() is None, "the writer ended instead of waiting for the lock"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        assert proc.poll() is None and _value(layout) == 1  # staged, waiting, not published
    assert proc.wait(timeout=120) == 0
    assert _value(layout) == 2 and _staged(layout) == []


def test_a_declared_table_written_in_batches_is_the_same_table(tmp_path):
    """Frames given one at a time (a replay's millions of steps) make the same file content as
    the whole frame, each batch is held to the contract, and a bad batch publishes nothing."""
    import pytest

    from pipeline.replay.result import STEPS_SCHEMA
    from pipeline.warehouse.derived import ContractError

    layout = Layout(tmp_path / "wh")
    n = 10

    def column(name: str, dtype: pl.DataType) -> pl.Series:
        if dtype == pl.String:
            return pl.Series([f"{name}{i % 3}" for i in range(n)])
        return pl.Series(range(n), dtype=dtype)

    whole = pl.DataFrame({c: column(c, t) for c, t in STEPS_SCHEMA.items()})
    write_derived(layout, "replay_steps", whole, part="one")
    write_derived(layout, "replay_steps", (whole[i : i + 3] for i in range(0, n, 3)), part="b")
    write_derived(layout, "replay_steps", iter(()), part="empty")
    one = pl.read_parquet(layout.root / "replay_steps" / "one.parquet")
    batched = pl.read_parquet(layout.root / "replay_steps" / "b.parquet")
    assert batched.equals(one) and batched.height == n
    assert pl.read_parquet(layout.root / "replay_steps" / "empty.parquet").schema == one.schema
    bad = [whole[:3], whole[3:].drop("kv_blocks")]
    with pytest.raises(ContractError, match="missing \\['kv_blocks'\\]"):
        write_derived(layout, "replay_steps", iter(bad), part="bad")
    assert not (layout.root / "replay_steps" / "bad.parquet").exists()
    assert not list(layout.staging_dir.glob("derived-replay_steps-*"))
    with pytest.raises(ContractError, match="only a declared table"):
        write_derived(layout, "mine", iter([whole]))

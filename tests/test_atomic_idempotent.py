"""A killed ingest leaves the warehouse consistent; a re-run finishes with exact counts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.ingest.run import ingest_paths, totals
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.conftest import record, write_jsonl

N_FILES, PER_FILE = 3, 400


def _logs(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    for f in range(N_FILES):
        recs = [record(f * PER_FILE + i) for i in range(PER_FILE)]
        recs.append("{broken")  # one quarantined line per file
        write_jsonl(d / f"part{f}.jsonl", recs)
    return d


def _ingest_cmd(logs: Path, wh: Path) -> list[str]:
    return [sys.executable, "-m", "pipeline", "ingest", str(logs), "-w", str(wh), "--quiet"]


def _counts(wh: Path) -> tuple[int, int, int]:
    con = connect(Layout(wh))
    return (
        con.execute("SELECT count(*) FROM requests").fetchone()[0],
        con.execute("SELECT count(*) FROM tokens").fetchone()[0],
        con.execute("SELECT count(*) FROM quarantine").fetchone()[0],
    )


def _assert_consistent(wh: Path) -> None:
    """Whatever is visible is whole files: per committed file exactly PER_FILE requests."""
    req, tok, q = _counts(wh)
    committed = len(Layout(wh).manifests())
    assert req == committed * PER_FILE
    assert tok == committed * PER_FILE * 4
    assert q == committed


def test_reingest_adds_nothing(tmp_path):
    logs, layout = _logs(tmp_path), Layout(tmp_path / "wh")
    first = totals(ingest_paths([logs], layout))
    assert (first["ingested"], first["quarantined"]) == (N_FILES * PER_FILE, N_FILES)
    again = totals(ingest_paths([logs], layout))
    assert (again["read"], again["ingested"], again["already"]) == (0, 0, N_FILES)
    # A renamed copy has the same content hash: skipped too.
    (logs / "part0.jsonl").rename(logs / "renamed.jsonl")
    assert totals(ingest_paths([logs], layout))["ingested"] == 0
    assert _counts(layout.root) == (N_FILES * PER_FILE, N_FILES * PER_FILE * 4, N_FILES)


@pytest.mark.parametrize(
    "point", ["before_commit", "mid_rename", "before_manifest", "after_manifest"]
)
def test_sigkill_at_each_commit_step_then_rerun(tmp_path, point):
    logs, wh = _logs(tmp_path), tmp_path / "wh"
    env = {**os.environ, "PIPELINE_TEST_CRASH_AT": point}
    proc = subprocess.run(_ingest_cmd(logs, wh), env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    _assert_consistent(wh)
    committed = len(Layout(wh).manifests())
    assert committed == (1 if point == "after_manifest" else 0)
    done = subprocess.run(_ingest_cmd(logs, wh), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert _counts(wh) == (N_FILES * PER_FILE, N_FILES * PER_FILE * 4, N_FILES)
    assert not Layout(wh).orphans()


def test_sigkill_at_random_times_then_rerun(tmp_path):
    """Kill a bigger ingest at several moments; every intermediate state is consistent."""
    d = tmp_path / "logs"
    for f in range(4):
        write_jsonl(d / f"p{f}.jsonl", [record(f * 5000 + i) for i in range(5000)])
    wh = tmp_path / "wh"
    for delay in (0.3, 0.8, 1.5, 2.5):
        proc = subprocess.Popen(
            _ingest_cmd(d, wh), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        con = connect(Layout(wh))
        n = con.execute("SELECT count(*) FROM requests").fetchone()[0]
        assert n == len(Layout(wh).manifests()) * 5000
    done = subprocess.run(_ingest_cmd(d, wh), capture_output=True, timeout=180)
    assert done.returncode == 0
    con = connect(Layout(wh))
    assert con.execute("SELECT count(*), count(DISTINCT request_id) FROM requests").fetchone() == (
        20000,
        20000,
    )


def test_manifest_records_counts(tmp_path):
    logs, layout = _logs(tmp_path), Layout(tmp_path / "wh")
    ingest_paths([logs], layout)
    m = json.loads(next(layout.manifest_dir.glob("*.json")).read_text())
    assert m["counts"]["read"] == PER_FILE + 1
    assert m["counts"]["ingested"] == PER_FILE
    assert m["counts"]["quarantined"] == 1
    assert all((layout.root / f).is_file() for f in m["files"])


def test_reingest_replaces_a_files_rows_with_corrected_metadata(tmp_path):
    """`ingest --reingest --set ...`: the same file's rows, relabelled, never twice, and the
    previous generation's data files gone; a plain re-run still reads nothing."""
    from pipeline.ingest.run import IngestOptions, ingest_paths, recover

    logs = write_jsonl(tmp_path / "a.jsonl", [record(i, gpu=None) for i in range(20)])
    layout = Layout(tmp_path / "wh")
    ingest_paths([logs], layout, IngestOptions(sets={"gpu": "H100-PCIe"}))
    first = sorted(p.name for p in layout.root.rglob("part-*.parquet"))
    (r,) = ingest_paths([logs], layout, IngestOptions(sets={"gpu": "H100-SXM"}, reingest=True))
    assert (r.status, r.counts["ingested"], r.counts["duplicates"]) == ("ingested", 20, 0)
    con = connect(layout)
    assert con.execute("SELECT gpu, count(*) FROM requests GROUP BY 1").fetchall() == [
        ("H100-SXM", 20)
    ]
    second = sorted(p.name for p in layout.root.rglob("part-*.parquet"))
    assert first and second and not set(first) & set(second)  # a new generation, old removed
    assert recover(layout) == 0  # nothing left over
    (again,) = ingest_paths([logs], layout)
    assert again.status == "already"

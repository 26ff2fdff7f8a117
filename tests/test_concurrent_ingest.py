"""Several `pipeline ingest` processes write into one warehouse at once: each record exactly once.

Workers are real subprocesses of the installed entry point, given different and overlapping
shards of one log folder, as a fleet would run them (one worker per shard of a log bucket).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pipeline.ingest.run import ingest_paths, recover, totals
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.conftest import record, write_jsonl

N_FILES, PER_FILE = 8, 800
DAY = 86400.0


def _entry() -> list[str]:
    exe = Path(sys.executable).with_name("pipeline")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "pipeline"]


def _logs(root: Path, n_files: int = N_FILES, per_file: int = PER_FILE) -> list[Path]:
    """Files with their own run ids, spread over two days, one bad line each."""
    files = []
    for f in range(n_files):
        recs: list[dict | str] = [
            record(i, run_id=f"run-{f}", **_shift(i * 97.0 + (DAY if f % 2 else 0.0)))
            for i in range(per_file)
        ]
        recs.insert(per_file // 2, "{not json")
        files.append(write_jsonl(root / f"shard{f % 3}" / f"log{f}.jsonl", recs))
    return files


def _shift(s: float) -> dict:
    from pipeline.schema.record import EXAMPLE_RECORD

    return {
        k: EXAMPLE_RECORD[k] + s  # type: ignore[operator]
        for k in ("arrival_ts", "scheduled_ts", "first_token_ts", "finish_ts")
    }


def _start(paths: list[Path], wh: Path, env: dict | None = None) -> subprocess.Popen:
    cmd = [*_entry(), "ingest", *map(str, paths), "-w", str(wh), "--quiet", "--format", "json"]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _finish(procs: list[subprocess.Popen], timeout: float = 180) -> list[dict]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        assert p.returncode == 0, f"worker failed ({p.returncode}): {stderr[-2000:]}"
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def _check_exactly_once(wh: Path, n_files: int, per_file: int) -> None:
    layout = Layout(wh)
    con = connect(layout)
    n, distinct = con.execute(
        "SELECT count(*), count(DISTINCT (run_id, request_id)) FROM requests"
    ).fetchone()
    assert (n, distinct) == (n_files * per_file, n_files * per_file)
    per_run = con.execute("SELECT run_id, count(*) FROM requests GROUP BY 1 ORDER BY 1").fetchall()
    assert per_run == sorted((f"run-{f}", per_file) for f in range(n_files))
    assert con.execute("SELECT count(*) FROM tokens").fetchone()[0] == 4 * n_files * per_file
    assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == n_files
    days = con.execute("SELECT day, count(*) FROM requests GROUP BY 1 ORDER BY 1").fetchall()
    assert len(days) >= 2 and sum(c for _, c in days) == n_files * per_file
    manifests = layout.manifests()
    assert len(manifests) == n_files
    for m in manifests:  # every committed file exists and is listed once
        for rel in m["files"]:
            assert (wh / rel).is_file(), rel
    listed = [rel for m in manifests for rel in m["files"]]
    assert len(listed) == len(set(listed))
    assert layout.orphans() == {}
    assert not any(layout.staging_dir.iterdir())


def test_workers_on_disjoint_and_overlapping_shards(tmp_path):
    files = _logs(tmp_path / "logs")
    wh = tmp_path / "warehouse"
    shards = [
        files[0:4],  # disjoint halves ...
        files[4:8],
        files[2:6],  # ... a shard overlapping both ...
        [tmp_path / "logs"],  # ... and a worker given the whole folder
        files[::-1],  # the same files in the opposite order
    ]
    results = _finish([_start(s, wh) for s in shards])
    _check_exactly_once(wh, N_FILES, PER_FILE)
    # Each file was ingested by exactly one worker; the others found it committed or busy.
    assert sum(r["ingested"] for r in results) == N_FILES * PER_FILE
    assert sum(r["quarantined"] for r in results) == N_FILES
    # Re-running every worker changes nothing.
    again = _finish([_start(s, wh) for s in shards])
    assert [r["ingested"] for r in again] == [0] * len(shards)
    assert [r["already"] for r in again] == [r["files"] for r in again]
    _check_exactly_once(wh, N_FILES, PER_FILE)


def _kill_before_commit(files: list[Path], wh: Path) -> None:
    killed = _start(files, wh, {"PIPELINE_TEST_CRASH_AT": "before_manifest"})
    killed.communicate(timeout=180)
    assert killed.returncode == -9
    assert Layout(wh).orphans(), "the killed worker should have left uncommitted files"


def test_killed_worker_then_recovery_pass_then_workers(tmp_path):
    """The safe procedure: after a crash, one worker runs (and recovers) before the others."""
    files = _logs(tmp_path / "logs")
    wh = tmp_path / "warehouse"
    _kill_before_commit(files[0:2], wh)
    (first,) = _finish([_start(files[0:2], wh)])
    assert first["ingested"] == 2 * PER_FILE
    assert Layout(wh).orphans() == {}
    live = _finish([_start(s, wh) for s in (files[0:5], files[3:8], files[1:3])])
    _check_exactly_once(wh, N_FILES, PER_FILE)
    assert sum(r["ingested"] for r in live) == (N_FILES - 2) * PER_FILE


def test_a_killed_worker_among_live_ones(tmp_path):
    """One worker died by SIGKILL before its commit; three start together."""
    files = _logs(tmp_path / "logs")
    wh = tmp_path / "warehouse"
    _kill_before_commit(files[0:2], wh)
    _finish([_start(s, wh) for s in (files[0:5], files[3:8], files[1:3])])
    _check_exactly_once(wh, N_FILES, PER_FILE)


def test_recovery_lock_never_makes_a_worker_skip_a_file(tmp_path):
    """A real worker reaches the file while another's recover() holds its lock: it waits for
    the lock (instead of skipping the file), then ingests it."""
    files = _logs(tmp_path / "logs", n_files=1, per_file=50)
    wh = tmp_path / "warehouse"
    _kill_before_commit(files, wh)
    layout = Layout(wh)
    (sha16,) = layout.orphans()
    with layout.lock(sha16) as got:  # what recover() does while it unlinks
        assert got
        proc = _start(files, wh)
        time.sleep(1.0)
        assert proc.poll() is None  # still waiting for the lock
    (worker,) = _finish([proc])
    assert worker["ingested"] == 50, f"the worker skipped the file: {worker}"


def test_many_workers_one_file_each(tmp_path):
    """The fleet pattern: one process per file, all started at once."""
    files = _logs(tmp_path / "logs", n_files=12, per_file=300)
    wh = tmp_path / "warehouse"
    results = _finish([_start([f], wh) for f in files])
    assert sum(r["ingested"] for r in results) == 12 * 300
    _check_exactly_once(wh, 12, 300)


def test_recovery_never_deletes_files_committed_meanwhile(tmp_path):
    """Replays, step by step, one interleaving of two real workers A and B.

    A has moved its data files into the table folders and is about to write its manifest; B
    starts and runs recover(), whose orphan scan sees A's files without a manifest. A then
    writes its manifest and releases its lock; B takes the lock. The interleaving is forced by
    delaying the manifest until B's scan is done, the way the scheduler can.
    """
    files = _logs(tmp_path / "logs", n_files=1, per_file=50)
    wh = tmp_path / "warehouse"
    layout = Layout(wh)
    ingest_paths(files, layout)
    (manifest,) = layout.manifest_dir.glob("*.json")
    held = manifest.read_bytes()
    manifest.unlink()  # A: files in place, manifest not yet written

    class Interleaved(Layout):
        def orphans(self):
            found = super().orphans()  # B scans while A is mid-commit
            manifest.write_bytes(held)  # A commits and releases its lock
            return found

    recover(Interleaved(wh))
    missing = [
        p for t in ("requests", "tokens") for p in layout.committed_files(t) if not p.exists()
    ]
    assert missing == [], "recover() deleted committed files"
    con = connect(layout)
    assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 50


def test_overlapping_records_in_different_files_are_deduplicated(tmp_path):
    """A rotated log and its copy with one more line share keys; ingested at once by 4 workers."""
    n = 4000
    base = [record(i, run_id="shared-run") for i in range(n)]
    files = [
        write_jsonl(
            tmp_path / "logs" / f"copy{k}.jsonl", [*base, record(n + k, run_id="shared-run")]
        )
        for k in range(4)
    ]
    wh = tmp_path / "warehouse"
    ordered = Layout(tmp_path / "sequential")
    t = totals(ingest_paths(files, ordered))
    assert (t["ingested"], t["duplicates"]) == (n + 4, 3 * n)  # sequentially: exact
    _finish([_start([f], wh) for f in files])
    con = connect(Layout(wh))
    assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == n + 4

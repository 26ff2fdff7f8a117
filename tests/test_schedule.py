"""pipeline run / schedule: cron next-fire times, the loop, locking, incremental idempotent runs."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.commands.schedule import loop
from pipeline.schedule.cron import CronError, parse_cron
from pipeline.schedule.runner import run_once
from pipeline.warehouse.layout import Layout
from tests.fixtures.report_data import EPOCH, Spec, write_jsonl

T = dt.datetime(2026, 11, 2, 10, 17, 30)  # a Monday


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("0 * * * *", T, dt.datetime(2026, 11, 2, 11, 0)),
        ("* * * * *", T, dt.datetime(2026, 11, 2, 10, 18)),
        ("*/15 * * * *", T, dt.datetime(2026, 11, 2, 10, 30)),
        ("*/15 * * * *", dt.datetime(2026, 11, 2, 10, 30), dt.datetime(2026, 11, 2, 10, 45)),
        ("5/20 * * * *", T, dt.datetime(2026, 11, 2, 10, 25)),
        ("10-50/20 8-9 * * *", T, dt.datetime(2026, 11, 3, 8, 10)),
        ("30 9 * * mon-fri", T, dt.datetime(2026, 11, 3, 9, 30)),
        ("30 9 * * MON-FRI", dt.datetime(2026, 11, 6, 9, 30), dt.datetime(2026, 11, 9, 9, 30)),
        ("0 0 * * 0", T, dt.datetime(2026, 11, 8, 0, 0)),
        ("0 0 * * 7", T, dt.datetime(2026, 11, 8, 0, 0)),
        ("0 0 1 * *", T, dt.datetime(2026, 12, 1, 0, 0)),
        ("0 0 1 jan *", T, dt.datetime(2027, 1, 1, 0, 0)),
        ("0 12 31 * *", T, dt.datetime(2026, 12, 31, 12, 0)),  # November has no 31st
        ("0 0 13 * fri", T, dt.datetime(2026, 11, 6, 0, 0)),  # day-of-month OR day-of-week
        ("0 0 29 2 *", T, dt.datetime(2028, 2, 29, 0, 0)),
        ("@hourly", T, dt.datetime(2026, 11, 2, 11, 0)),
        ("@daily", T, dt.datetime(2026, 11, 3, 0, 0)),
        ("@weekly", T, dt.datetime(2026, 11, 8, 0, 0)),
        ("@monthly", T, dt.datetime(2026, 12, 1, 0, 0)),
        ("@yearly", T, dt.datetime(2027, 1, 1, 0, 0)),
        ("59 23 31 12 *", dt.datetime(2026, 12, 31, 23, 59), dt.datetime(2027, 12, 31, 23, 59)),
        ("0,30 * * * *", dt.datetime(2026, 11, 2, 10, 0), dt.datetime(2026, 11, 2, 10, 30)),
    ],
)
def test_next_fire(expr, after, expected):
    assert parse_cron(expr).next_after(after) == expected


def test_next_fire_keeps_the_timezone():
    after = dt.datetime(2026, 11, 2, 23, 59, 59, tzinfo=dt.UTC)
    assert parse_cron("0 0 * * *").next_after(after) == dt.datetime(2026, 11, 3, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * *", "five fields"),
        ("60 * * * *", "minute: 60 is outside 0-59"),
        ("* 24 * * *", "hour: 24 is outside 0-23"),
        ("* * 0 * *", "day of month: 0 is outside 1-31"),
        ("* * * foo *", "month: 'foo' is not a number or a name"),
        ("*/0 * * * *", "step '0' must be a positive number"),
        ("5-1 * * * *", "runs backwards"),
        ("0 0 31 2 *", "never fires"),
    ],
)
def test_bad_cron(expr, message):
    with pytest.raises(CronError, match=message):
        parse_cron(expr).next_after(T)


def test_loop_waits_for_each_fire_and_runs():
    clock = [dt.datetime(2026, 11, 2, 10, 59, 0)]
    slept, ran = [], []

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += dt.timedelta(seconds=s)

    def job() -> int:
        ran.append(clock[0])
        clock[0] += dt.timedelta(seconds=5)  # the run takes 5 s
        return 0

    n = loop(parse_cron("0 * * * *"), job, lambda: clock[0], sleep, max_runs=3, say=lambda s: None)
    assert n == 3
    assert ran == [dt.datetime(2026, 11, 2, h, 0) for h in (11, 12, 13)]
    assert max(slept) <= 30.0  # short naps


def test_schedule_rejects_bad_cron(tmp_path):
    res = CliRunner().invoke(main, ["schedule", "--cron", "61 * * * *", "--logs", str(tmp_path)])
    assert res.exit_code == 2 and "minute: 61 is outside 0-59" in res.output


def test_max_runs_counts_the_run_now(tmp_path, monkeypatch):
    """`--max-runs 1 --now` runs once, right away, and returns (it ran twice before)."""
    import pipeline.commands.schedule as sched

    calls = []
    monkeypatch.setattr(sched.subprocess, "run", lambda argv, check: calls.append(argv) or
                        subprocess.CompletedProcess(argv, 0))  # fmt: skip
    monkeypatch.setattr(sched, "loop", lambda *a, **k: calls.append("loop"))
    args = ["schedule", "--cron", "0 0 1 1 *", "--max-runs", "1", "--now", "--logs", str(tmp_path)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert len(calls) == 1 and calls[0][1:4] == ["-m", "pipeline", "run"]
    calls.clear()
    res = CliRunner().invoke(main, [*args[:4], "2", *args[5:]])  # --max-runs 2: one left to wait
    assert res.exit_code == 0 and calls[1] == "loop" and len(calls) == 2


# -- pipeline run ------------------------------------------------------------------------------
def _runner(logs: Path, wh: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--logs", str(logs), "-w", str(wh), "--out-dir", str(out), *extra]


def test_run_is_incremental_and_idempotent(tmp_path):
    logs, wh, out = tmp_path / "logs", tmp_path / "wh", tmp_path / "reports"
    write_jsonl(logs / "day1.jsonl", Spec(n=600, seed=1))
    cli = CliRunner()
    first = cli.invoke(main, _runner(logs, wh, out))
    assert first.exit_code == 0, first.output
    assert first.stdout.strip() == str(out / "report-20261102T0000Z-20261103T0000Z.html")
    # nothing new: no report rewritten
    mtime = (out / "report-20261102T0000Z-20261103T0000Z.html").stat().st_mtime_ns
    again = cli.invoke(main, _runner(logs, wh, out))
    assert again.exit_code == 0 and again.stdout.strip() == ""
    assert "1 report(s) already up to date" in again.stderr
    assert (out / "report-20261102T0000Z-20261103T0000Z.html").stat().st_mtime_ns == mtime
    # a new day's file: ingested once, its day reported and compared with the day before
    write_jsonl(logs / "day2.jsonl", Spec(n=600, seed=2, start=EPOCH + 86400, slowdown=1.6))
    third = cli.invoke(main, _runner(logs, wh, out))
    assert third.stdout.strip() == str(out / "report-20261103T0000Z-20261104T0000Z.html")
    meta = json.loads((out / "report-20261103T0000Z-20261104T0000Z.json").read_text())
    assert meta["sections"]["headline"]["requests"] == 600
    assert meta["compare_with"]["start"] == "2026-11-02T00:00:00+00:00"
    assert meta["sections"]["changes"]["regressions"] > 0
    index = (out / "index.html").read_text()
    assert index.count('<a href="report-') == 2
    # the manifest has exactly two entries: day1 was not ingested twice
    assert len(list((wh / "_manifest").glob("*.json"))) == 2


def test_late_data_rewrites_its_own_window(tmp_path):
    logs, wh, out = tmp_path / "logs", tmp_path / "wh", tmp_path / "reports"
    write_jsonl(logs / "day2.jsonl", Spec(n=300, seed=2, start=EPOCH + 86400))
    r1 = run_once([logs], Layout(wh), out)
    assert [p.name for p in r1.reports] == ["report-20261103T0000Z-20261104T0000Z.html"]
    write_jsonl(logs / "day1.jsonl", Spec(n=300, seed=1))  # arrives late
    r2 = run_once([logs], Layout(wh), out)
    assert [p.name for p in r2.reports] == [
        "report-20261102T0000Z-20261103T0000Z.html",
        "report-20261103T0000Z-20261104T0000Z.html",  # its comparison period changed
    ]


def test_a_second_run_while_one_holds_the_lock_does_nothing(tmp_path):
    logs, wh, out = tmp_path / "logs", tmp_path / "wh", tmp_path / "reports"
    write_jsonl(logs / "a.jsonl", Spec(n=200, seed=1))
    layout = Layout(wh)
    with layout.lock("run") as got:
        assert got
        res = CliRunner().invoke(main, _runner(logs, wh, out))
    assert res.exit_code == 0
    assert "another run is in progress" in res.stderr
    assert not (wh / "_manifest").exists() or not list((wh / "_manifest").glob("*.json"))
    assert not out.exists()


def test_two_concurrent_run_processes(tmp_path):
    """Process A pauses inside its run (after ingest); process B, started meanwhile, backs off."""
    logs, wh, out = tmp_path / "logs", tmp_path / "wh", tmp_path / "reports"
    write_jsonl(logs / "a.jsonl", Spec(n=400, seed=1))
    flag = tmp_path / "a-is-inside"
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from pipeline.schedule.runner import run_once
        from pipeline.warehouse.layout import Layout

        def say(msg):
            if msg.startswith("ingest"):
                Path({str(flag)!r}).write_text("1")
                time.sleep(4)

        r = run_once([Path({str(logs)!r})], Layout(Path({str(wh)!r})), Path({str(out)!r}), say=say)
        print(r.status, len(r.reports))
        """
    )
    a = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not flag.exists():
        assert time.time() < deadline and a.poll() is None, "process A never got going"
        time.sleep(0.05)
    b = subprocess.run(
        [sys.executable, "-c", "from pipeline.cli import main; main()", *_runner(logs, wh, out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    a_out, _ = a.communicate(timeout=120)
    assert b.returncode == 0
    assert "another run is in progress" in b.stderr
    assert b.stdout == ""
    assert a.returncode == 0 and a_out.split() == ["done", "1"]
    # after A finished, a run goes through (and finds everything up to date)
    c = subprocess.run(
        [sys.executable, "-c", "from pipeline.cli import main; main()", *_runner(logs, wh, out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert c.returncode == 0 and "already up to date" in c.stderr


def test_run_rejects_since(tmp_path):
    res = CliRunner().invoke(
        main, [*_runner(tmp_path, tmp_path / "w", tmp_path / "o"), "--since", "1d"]
    )
    assert res.exit_code == 2 and "--window" in res.output

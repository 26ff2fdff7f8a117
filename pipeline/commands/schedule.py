"""``pipeline schedule``: run ``pipeline run`` in the foreground on a cron schedule."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from collections.abc import Callable

import click

from pipeline.commands._common import console
from pipeline.commands.run import run_options
from pipeline.errors import UserError
from pipeline.schedule.cron import Cron, CronError, parse_cron


def loop(
    cron: Cron,
    job: Callable[[], int],
    now: Callable[[], dt.datetime],
    sleep: Callable[[float], None] = time.sleep,
    max_runs: int | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Wait for each fire time and run ``job``; returns how many runs were made."""
    runs = 0
    while max_runs is None or runs < max_runs:
        due = cron.next_after(now())
        say(f"next run at {due:%Y-%m-%d %H:%M}")
        while (left := (due - now()).total_seconds()) > 0:
            sleep(min(left, 30.0))  # short naps notice clock jumps and suspends
        rc = job()
        runs += 1
        say(f"run {runs} finished with exit code {rc}")
    return runs


def _forward(ctx: click.Context) -> list[str]:
    """The `pipeline run` arguments this invocation was given."""
    args: list[str] = []
    p = dict(ctx.params)
    # Old spellings (deprecated, still accepted) are forwarded in the new words.
    p["out_dir"] = p.get("out_dir") or p.get("old_out_dir")
    p["reader"] = p.get("reader") or p.get("old_reader")
    for path in p["logs"]:
        args += ["--logs", str(path)]
    for name in ("warehouse", "out_dir", "window", "reader", "engine", "compare_with", "slo_ttft",
                 "slo_tpot"):  # fmt: skip
        if p.get(name) is not None:
            args += ["--" + name.replace("_", "-"), str(p[name])]
    for s in p["sets"]:
        args += ["--set", s]
    args += ["--regression", str(p["regression"])]
    return args


@click.command("schedule")
@click.option(
    "--cron",
    "cron_text",
    required=True,
    metavar="EXPR",
    help="Five-field cron expression, e.g. '0 * * * *' (hourly) or '@daily'.",
)
@click.option("--utc", is_flag=True, help="Read the cron expression in UTC, not local time.")
@click.option("--max-runs", type=int, default=None, help="Stop after this many runs.")
@click.option("--now", "run_now", is_flag=True, help="Also run once right away.")
@run_options
@click.pass_context
def command(ctx, cron_text, utc, max_runs, run_now, since, until, **_):  # fmt: skip
    """Run `pipeline run` in the foreground at every time the cron expression names.

    Each run is a separate process (a crash cannot stop the schedule) and takes the same
    lock as `pipeline run`, so a run that outlasts its slot is never doubled. Stop with Ctrl-C.
    For a service, prefer cron or a systemd timer calling `pipeline run` (docs/scheduling.md).

    \b
    Example:
      pipeline schedule --cron "0 * * * *" --logs /var/log/vllm --warehouse wh --out-dir reports/
    """
    if since or until:  # refused here, not by every scheduled run
        raise UserError("`pipeline schedule` runs `pipeline run`, which picks its periods from "
                        "--window; use `pipeline report` for --since/--until")  # fmt: skip
    try:
        cron = parse_cron(cron_text)
    except CronError as exc:
        raise UserError(f"--cron: {exc}") from None
    # The same entry point as the shell's `pipeline` (python -m pipeline), not a code string.
    argv = [sys.executable, "-m", "pipeline", "run", *_forward(ctx)]
    out = console()

    def job() -> int:
        return subprocess.run(argv, check=False).returncode

    def now() -> dt.datetime:
        return dt.datetime.now(dt.UTC).replace(tzinfo=None) if utc else dt.datetime.now()

    left = max_runs
    if run_now:  # counts as one of --max-runs: `--max-runs 1 --now` runs once, now
        out.print(f"run 0 finished with exit code {job()}")
        if left is not None:
            left -= 1
            if left <= 0:
                return
    try:
        loop(cron, job, now, max_runs=left, say=out.print)
    except KeyboardInterrupt:
        out.print("schedule stopped")

"""``pipeline validate``: replay every run with a model fitted without it; print the errors."""

from __future__ import annotations

import math
from pathlib import Path

import click
from rich.table import Table

from pipeline.commands._common import (
    console,
    existing_layout,
    model_config_option,
    profile_option,
    warehouse_option,
)
from pipeline.commands.options import duckdb_only, output_options
from pipeline.errors import DataError, UserError


@click.command("validate")
@model_config_option
@warehouse_option
@click.option("--run", "runs", multiple=True, help="Validate only the deployments of these runs.")
@output_options()
@duckdb_only("calibration replays the runs on this machine")
@profile_option("also replay each run with its step times, beside the log-fitted model")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def command(
    warehouse: str | None,
    runs: tuple[str, ...],
    fmt: str,
    out: Path | None,
    profile_dir: str | None,
    quiet: bool,
) -> None:
    """Replay each run with a model calibrated WITHOUT it and show observed vs replayed.

    Leave one run out for deployments with several runs; with one run, fit on its first half
    and score the second half. Prints p50/p90 TTFT, TPOT and E2E and output throughput per
    run, the median |error| per deployment, and writes the `validation` table (the in-sample
    replay is stored too, labelled `in-sample`). Needs arrival times and a model and GPU the
    catalog knows (`pipeline ingest --set model=... gpu=...`).

    \b
    Example:
      pipeline validate --warehouse warehouse/
      pipeline validate --profile profile-RTX4090-Llama-3.1-8B/
      pipeline query --sql "SELECT * FROM validation WHERE split <> 'in-sample'"
    """
    from pipeline.catalog.names import UnknownName
    from pipeline.fit.calibration_store import load_deployments, write_validation
    from pipeline.fit.validate import validate_deployment
    from pipeline.warehouse.views import connect

    layout = existing_layout(warehouse)
    say = console(quiet)
    deps = load_deployments(connect(layout))
    selected = {
        d: rs for d, rs in deps.runs.items() if not runs or any(r.run_id in runs for r in rs)
    }
    if runs and not selected:
        raise UserError(f"no replayable run among {', '.join(runs)}")
    for run_id, why in deps.left_out:
        say.print(f"left out {run_id}: {why}")
    if not selected:
        raise DataError("no run with arrival times, a model and a GPU to validate")
    rows: list[dict] = []
    for dep, rs in selected.items():
        try:
            got, cals = validate_deployment(dep, rs, progress=lambda s: say.print(s, style="dim"))
        except UnknownName as exc:
            say.print(f"left out {dep.label()}: {exc}")
            continue
        rows += got
        if profile_dir is not None:
            from pipeline.fit.profile import load_profile
            from pipeline.fit.validate import profile_rows

            try:
                prof = load_profile(profile_dir, dep.model, tp=dep.gpu_count)
            except ValueError as exc:
                raise UserError(f"--profile {profile_dir}: {exc}") from None
            rows += profile_rows(dep, rs, prof, cals[0].scheduler, cals[0].kv_tokens)
    write_validation(layout, rows)
    if fmt != "table":
        from pipeline.query.output import write_json, write_rows

        if fmt == "json":
            write_json(rows, out, default=_nan_none)
        else:
            write_rows(rows, fmt, out)
        return
    _print(say, rows)


def _nan_none(v: object) -> object:
    return None


def _pct(v: float | None) -> str:
    return "" if v is None or not math.isfinite(v) else f"{v:+.1%}"


def _print(out, rows: list[dict]) -> None:
    from pipeline.fit.validate import summary

    held = [r for r in rows if r["split"] not in ("in-sample",)]
    t = Table(title="validation: replay with a model fitted without the scored requests")
    for c in ("run", "split", "metric", "observed", "replayed", "error"):
        t.add_column(c, justify="right" if c in ("observed", "replayed", "error") else "left")
    for r in held:
        unit = 1.0 if r["metric"] == "throughput_tok_s" else 1e3
        suffix = " tok/s" if unit == 1.0 else " ms"
        t.add_row(
            r["run_id"],
            r["split"],
            r["metric"],
            f"{r['observed'] * unit:,.1f}{suffix}",
            f"{r['replayed'] * unit:,.1f}{suffix}",
            _pct(r["error"]),
        )
    out.print(t)
    for split in ("leave-one-run-out", "second-half", "profile", "in-sample"):
        if any(r["split"] == split for r in rows):
            s = summary(rows, split)
            out.print(
                f"{split}: median |error| TTFT {s['ttft_median_abs_error']:.1%} "
                f"(worst {s['ttft_worst_abs_error']:.1%}), TPOT {s['tpot_median_abs_error']:.1%} "
                f"(worst {s['tpot_worst_abs_error']:.1%}) over runs x {{p50, p90}}"
            )

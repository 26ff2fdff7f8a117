"""``pipeline fit``: prefill and decode cost models (MFU, MBU, overheads) from the warehouse."""

from __future__ import annotations

import click
from rich.markup import escape

from pipeline.commands._common import (
    console,
    engine_option,
    existing_layout,
    model_config_option,
    profile_option,
    warehouse_option,
)
from pipeline.commands.options import output_options
from pipeline.engines import EngineError
from pipeline.errors import DataError, UserError


@click.command("fit")
@model_config_option
@warehouse_option
@click.option(
    "--max-requests",
    type=click.IntRange(min=100),
    default=None,
    help="Requests read per group (earliest whole time windows) [default: 40000].",
)
@click.option("--no-claims", is_flag=True, help="Do not write the claims table.")
@click.option(
    "--calibrate/--no-calibrate",
    default=True,
    show_default=True,
    help="Also calibrate each deployment by replaying its runs (writes `calibration`).",
)
@profile_option(
    "read and summarised; `pipeline validate --profile` replays with it beside the log-fitted model"
)
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@output_options()
@engine_option("Engine for the fit's SQL (spark: only each group's selection comes back)")
def command(
    warehouse: str | None,
    max_requests: int | None,
    no_claims: bool,
    calibrate: bool,
    profile_dir: str | None,
    quiet: bool,
    fmt: str,
    out,
    engine: str,
) -> None:
    """Fit MFU, MBU and overheads per GPU x model x GPU count x engine configuration.

    Rebuilds the batch of every engine step from per-token times (or from the requests in
    flight when there are none), fits a prefill and a decode step-time model with a robust
    (Huber) estimator, and writes the `cost_models` table (and `claims`). Other stages read it
    with `pipeline.fit.load_fits(layout)`. With --format csv, json or parquet the `cost_models`
    rows just written are printed (or written to --out) as well.

    \b
    Example:
      pipeline fit --warehouse warehouse/
      pipeline fit --warehouse warehouse/ --engine spark
      pipeline fit -q --format csv --out cost_models.csv
      pipeline query cost_mfu_mbu
    """
    from pipeline.fit import fit_warehouse

    if warehouse and "://" in warehouse:
        if engine != "spark":
            raise UserError(f"{warehouse}: a URI warehouse is read with --engine spark")
        where = warehouse
    else:
        where = existing_layout(warehouse)
    say = console(quiet)

    def skipped(key, why: str) -> None:  # never silently: say which group and why
        say.print(escape(f"fit: left out {key.model} on {key.gpu_count} x {key.gpu}: {why}"))

    try:
        fits = fit_warehouse(
            where, limit=max_requests, claims=not no_claims, engine=engine, on_skip=skipped
        )
    except EngineError as exc:
        raise DataError(str(exc)) from None
    if profile_dir is not None:
        _profile(profile_dir, where, say)
    calibrated = 0
    if calibrate and not isinstance(where, str):
        calibrated = _calibrate(where, say)
    if not fits and not calibrated:
        # Exit 3 like every command with nothing to work on; the empty tables are still
        # written, so that queries reading them run.
        raise DataError(
            "fit: nothing fitted (every deployment was left out, see above); wrote an empty "
            "cost_models table"
        )
    if fmt != "table":
        _emit(fits, fmt, out)
    if not fits:
        say.print("fit: no group had enough data for the step fit; wrote an empty cost_models")
    for fm in fits:
        k = fm.key
        parts = [f"{k.model} on {k.gpu_count} x {k.gpu}"]
        for p in (fm.prefill, fm.decode):
            if p is not None:
                parts.append(
                    f"{p.phase}: MFU {_eff(p.mfu)} MBU {_eff(p.mbu)} "
                    f"step {p.step_overhead * 1e3:.2f} ms, n {p.n}, MAPE {p.mape_test:.1%}"
                )
        say.print(" | ".join(parts))


def _emit(fits, fmt: str, out) -> None:  # type: ignore[no-untyped-def]
    """The cost_models rows of this fit, as the table holds them."""
    from pipeline.fit.store import to_frame
    from pipeline.query.output import write_json, write_result

    frame = to_frame(fits)
    if fmt == "json":
        write_json(frame.to_dicts(), out)
    else:
        write_result(frame.to_arrow(), fmt, out)


def _calibrate(layout, out) -> int:
    """Calibration by replay for every deployment with arrival times (docs/calibration.md)."""
    from pipeline.catalog.names import UnknownName
    from pipeline.fit.calibrate import calibrate
    from pipeline.fit.calibration_store import load_deployments, write_calibrations
    from pipeline.warehouse.views import connect

    deps = load_deployments(connect(layout))
    cals = []
    for run_id, why in deps.left_out:
        out.print(escape(f"calibration: left out {run_id}: {why}"))
    for dep, runs in deps.runs.items():
        try:
            cal = calibrate(runs, dep)
        except UnknownName as exc:
            out.print(escape(f"calibration: left out {dep.label()}: {exc}"))
            continue
        except (ValueError, RuntimeError) as exc:  # a log the model cannot replay at all
            out.print(escape(f"calibration: failed for {dep.label()}: {exc}"))
            continue
        cals.append(cal)
        out.print(describe_calibration(cal))
    write_calibrations(layout, cals)
    return len(cals)


def describe_calibration(cal) -> str:
    """One line per deployment: each parameter with its interval or its status."""
    parts = []
    for name, unit, scale in (
        ("mfu", "", 1.0),
        ("mbu", "", 1.0),
        ("overlap", "", 1.0),
        ("step_overhead_s", " ms", 1e3),
        ("seq_overhead_s", " ms", 1e3),
    ):
        v, ci, st = cal.values[name], cal.ci[name], cal.status[name]
        label = name.removesuffix("_s")
        if st == "fitted" and ci:
            parts.append(
                f"{label} {v * scale:.3g}{unit} [{ci[0] * scale:.3g}, {ci[1] * scale:.3g}]"
            )
        else:
            parts.append(f"{label} {st} ({v * scale:.3g}{unit})")
    parts.append(f"KV {cal.kv_tokens:,} tokens ({cal.kv_status})")
    st = cal.status.get("kv_link_share", "not used")
    if st != "not used":  # disaggregated: the share of the manifest's KV link achieved
        v, ci = cal.values["kv_link_share"], cal.ci["kv_link_share"]
        bw = float(cal.deployment.disagg().get("kv_bandwidth_gbps", 25.0))
        rate = f"{v * bw:.3g} GB/s of {bw:.3g}"
        if st == "fitted" and ci:
            parts.append(f"KV link {v:.3g} [{ci[0]:.3g}, {ci[1]:.3g}] ({rate})")
        else:
            parts.append(f"KV link {st} ({v:.3g}: {rate})")
    return (
        f"calibrated {cal.deployment.label()}: scheduler {cal.scheduler} ({cal.scheduler_source}), "
        f"{cal.runs} run(s), {cal.requests:,} requests, {cal.seconds:.1f} s | " + ", ".join(parts)
    )


def _eff(v: float) -> str:
    """An efficiency as fitted, or marked when the fit pinned it at its bound."""
    from pipeline.fit.model import MAX_EFFICIENCY

    return f"at bound ({v:.0%})" if v >= MAX_EFFICIENCY - 1e-6 else f"{v:.1%}"


def _profile(profile_dir: str, where, out) -> None:
    """Read a layer profile for every model the warehouse has; print its step times."""
    from pipeline.fit.profile import load_profile
    from pipeline.warehouse.views import connect

    models = []
    if not isinstance(where, str):
        models = [
            r[0]
            for r in connect(where)
            .execute("SELECT DISTINCT model FROM requests WHERE model IS NOT NULL")
            .fetchall()
        ]
    read = 0
    for m in models:
        try:
            prof = load_profile(profile_dir, m)
        except ValueError:
            continue
        read += 1
        out.print(
            f"profile {profile_dir} for {m}: decode step (1 seq, ctx 1024) "
            f"{prof.step_time_us(0, 0, 1, 1024) / 1e3:.2f} ms, 2048-token prefill "
            f"{prof.step_time_us(2048, 0, 0, 0) / 1e3:.1f} ms (as measured, no host overheads)"
        )
    if not read:
        raise UserError(
            f"--profile {profile_dir}: not a layer profile of any model in the warehouse"
        )

"""``pipeline replay``: a recorded or public workload served again under a what-if config."""

from __future__ import annotations

import math

import click

from pipeline.catalog import UnknownName
from pipeline.commands._common import (
    DURATION,
    console,
    layout_for,
    model_config_option,
    warehouse_option,
)
from pipeline.commands.options import duckdb_only, output_options
from pipeline.errors import DataError, UserError


def _fmt(v: object) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def _table(title: str, rows: list[dict], columns: list[str]) -> str:
    widths = [max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns]
    lines = [title, "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    for r in rows:
        lines.append(
            "  ".join(_fmt(r.get(c)).ljust(w) for c, w in zip(columns, widths, strict=True))
        )
    return "\n".join(lines)


SUMMARY = ["requests", "refused", "preemptions", "gpus", "ttft_p50", "ttft_p90", "ttft_p99",
           "tpot_p50", "tpot_p90", "tpot_p99", "e2e_p50", "e2e_p90", "e2e_p99",
           "throughput_rps", "output_tok_s", "goodput_rps", "slo_attainment", "gpu_hours",
           "cost_usd"]  # fmt: skip


@click.command("replay")
@model_config_option
@click.option(
    "--workload",
    "source",
    required=True,
    metavar="SOURCE",
    help="A run_id in the warehouse (requests or arrivals) or a trace file.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="whatif.toml [default: replay as recorded].",
)
@warehouse_option
@click.option(
    "--fits",
    "fits_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Warehouse whose cost_models to use [default: --warehouse].",
)
@click.option("--compare", is_flag=True, help="Print observed vs replayed percentiles.")
@click.option(
    "--sweep",
    "sweep_spec",
    default=None,
    metavar="KEY=v1,v2,...",
    help="Replay once per value of one what-if key and tabulate (nothing is written).",
)
@click.option(
    "--slo-ttft",
    type=DURATION,
    default=None,
    help="TTFT SLO (500ms, 2s; a bare number is seconds) for goodput and the cheapest "
    "configuration [default: the what-if file's].",
)
@click.option(
    "--slo-tpot",
    type=DURATION,
    default=None,
    help="TPOT SLO (50ms, 0.05).",
)
@click.option(
    "--slo-attainment",
    type=click.FloatRange(0, 1),
    default=0.9,
    show_default=True,
    help="Share of requests that must meet the SLO.",
)
@click.option(
    "--rate-scale",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Multiply the arrival rate (2 = arrivals twice as dense).",
)
@click.option(
    "--max-requests",
    type=click.IntRange(min=1),
    default=None,
    help="Replay only the first N requests.",
)
@click.option("--no-write", is_flag=True, help="Simulate and print; write nothing.")
@output_options(json_flag=True)
@duckdb_only("the simulator reads the workload and fits locally")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors and the tables.")
def command(
    source,
    config_path,
    warehouse,
    fits_dir,
    compare,
    sweep_spec,
    slo_ttft,
    slo_tpot,
    slo_attainment,
    rate_scale,
    max_requests,
    no_write,
    fmt,
    out,
    quiet,
) -> None:  # type: ignore[no-untyped-def]
    """Serve a workload again under a what-if configuration (GPU, TP, replicas, scheduler...).

    Step times come from `pipeline fit` (cost_models) for the same deployment, or from the
    catalog roofline with the efficiencies fitted on the nearest observed hardware; the output
    says which. The replayed requests are written to the warehouse's replay tables
    (replay_requests, replay_runs, replay_steps; run_id 'replay-<name>-<hash>'), never among the
    observed requests; the same replay twice writes once.

    \b
    With --format csv or parquet one table is written: the sweep with --sweep, observed vs
    replayed with --compare, else the replay's summary row; json holds all of them.

    \b
    Examples:
      pipeline replay --workload run-a --compare
      pipeline replay --workload run-a --compare --no-write --format csv --out compare.csv
      pipeline replay --workload run-a --config examples/whatif/h200-tp1.toml
      pipeline replay --workload azure-conv --config examples/whatif/disaggregated.toml \\
          --sweep pd_ratio=1:1,1:2,2:3 --slo-ttft 500ms --slo-tpot 50ms
    """
    from pipeline.fit import load_fits
    from pipeline.replay import (
        compare_with_observed,
        load_whatif,
        load_workload,
        replay_run_id,
        resolve_scenario,
        run_key,
        simulate_scenario,
        write_replay,
    )
    from pipeline.replay import sweep as sweep_mod

    say = console(quiet)
    layout = layout_for(warehouse)
    try:
        whatif = load_whatif(config_path)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if rate_scale is not None:
        whatif = whatif.with_value("workload.rate_scale", rate_scale)
    if max_requests is not None:
        whatif = whatif.with_value("workload.max_requests", max_requests)
    slo_ttft = slo_ttft if slo_ttft is not None else whatif.slo.ttft_s
    slo_tpot = slo_tpot if slo_tpot is not None else whatif.slo.tpot_s
    try:
        workload = load_workload(source, layout)
    except FileNotFoundError as exc:
        raise UserError(str(exc)) from None
    except ValueError as exc:
        raise DataError(str(exc)) from None
    workload = workload.scaled(whatif.workload.rate_scale, whatif.workload.max_requests)
    fits_layout = layout_for(fits_dir) if fits_dir else layout
    fits = load_fits(fits_layout) if fits_layout.root.exists() else {}
    cals = _calibrations(fits_layout)
    try:
        if sweep_spec:
            key, values = sweep_mod.parse_sweep(sweep_spec)
            table, best = sweep_mod.run_sweep(
                whatif, workload, fits, key, values, slo_ttft, slo_tpot, slo_attainment, cals
            )
            rows = table.to_dicts()
            if fmt != "table":
                _emit({"sweep": rows, "cheapest": best}, rows, fmt, out)
                return
            cols = [key, "gpus", "ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90",
                    "tpot_p99", "throughput_rps", "goodput_rps", "slo_attainment", "gpu_hours",
                    "cost_usd", "meets_slo"]  # fmt: skip
            slo = f"TTFT <= {slo_ttft} s, TPOT <= {slo_tpot} s for {slo_attainment:.0%}"
            click.echo(_table(f"sweep {key} on {workload.run_id} (SLO: {slo})", rows, cols))
            if best is None:
                click.echo("no configuration meets the SLO")
            else:
                click.echo(f"cheapest configuration meeting the SLO: {key}={best[key]} "
                           f"({best['gpus']} GPUs, {best['gpu_hours']:.4g} GPU-hours"
                           + (f", ${best['cost_usd']:.4g}" if best["cost_usd"] is not None
                              else "") + ")")  # fmt: skip
            return
        scenario = resolve_scenario(whatif, workload, fits, cals)
        result = simulate_scenario(scenario, workload)
    except UnknownName as exc:
        raise UserError(str(exc)) from None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    key = run_key(workload, scenario, whatif.workload.rate_scale)
    run_id = replay_run_id(scenario, key)
    say.print(f"replay {run_id}: {workload.n} requests of {workload.run_id} "
              f"({workload.kind}) on {scenario.gpus} x {scenario.gpu.name}, "
              f"{result.wall_s:.2f} s")  # fmt: skip
    say.print(f"step times: {scenario.cost_text}")
    for note in scenario.notes:
        say.print(f"note: {note}")
    written = None
    if not no_write:
        written = write_replay(layout, result, run_id, key)
        if written["status"] == "already":
            say.print(f"already in {layout.root} (same workload and configuration)")
        else:
            say.print(f"wrote {written.get('requests', 0)} requests and {written.get('steps', 0)} "
                      f"steps to {layout.root}")  # fmt: skip
    summary = result.summary(slo_ttft, slo_tpot)
    cmp = compare_with_observed(result) if compare else None
    if fmt != "table":
        doc = {"run_id": run_id, "cost": scenario.cost_text, "summary": summary,
               "write": written, "scenario": scenario.describe()}  # fmt: skip
        if cmp is not None:
            doc["compare"] = cmp.to_dicts()
        rows = cmp.to_dicts() if cmp is not None else [{"run_id": run_id, **summary}]
        _emit(doc, rows, fmt, out)
        return
    click.echo(_table(f"replayed {run_id}", [summary], SUMMARY[:13]))
    click.echo(_table("", [summary], SUMMARY[13:]))
    if compare:
        if cmp is None:
            click.echo("compare: the workload has no observed latencies (arrivals trace, or "
                       "rate-scaled / truncated)")  # fmt: skip
        else:
            click.echo(
                _table(
                    f"observed ({workload.run_id}) vs replayed",
                    cmp.to_dicts(),
                    ["metric", "percentile", "observed_s", "replayed_s", "error"],
                )
            )


def _emit(doc: dict, rows: list[dict], fmt: str, out) -> None:  # type: ignore[no-untyped-def]
    """json: the whole ``doc``; csv / parquet: the one table ``rows`` (``--out`` or stdout)."""
    from pipeline.query.output import write_json, write_rows

    if fmt == "json":
        write_json(doc, out)
    else:
        write_rows(rows, fmt, out)


def _calibrations(layout) -> list:
    """The warehouse's calibrations (`pipeline fit`), [] without one."""
    if not layout.root.exists():
        return []
    from pipeline.fit.calibration_store import load_calibrations
    from pipeline.warehouse.views import connect

    return load_calibrations(connect(layout))

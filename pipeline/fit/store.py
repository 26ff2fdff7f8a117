"""The ``cost_models`` derived table: one row per group and phase, and reading it back.

Columns (docs/cost-models.md "The cost_models table"): the group key, ``phase``, the StepCost
fields (``tp``, ``mfu``, ``mbu``, ``step_overhead``, ``seq_overhead``, ``flash_attention``), 95 %
intervals, where each value came from, fit quality (``n``, ``r2_test``, ``mape_test``,
``mape_all``) and derived terms (attention seconds per query-key pair, KV seconds per context
token, compute seconds per sequence, roofline and fitted critical batch).
"""

from __future__ import annotations

import math
from typing import Any

import duckdb
import polars as pl

from pipeline import catalog
from pipeline.fit.core import FittedModel, GroupKey, PhaseFit, critical_batches
from pipeline.physics import compute_dtype_for, dtype_bytes, kv_bytes_per_token
from pipeline.schema import deployment
from pipeline.warehouse.arrow import polars_schema
from pipeline.warehouse.derived import write_derived
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect

TABLE = "cost_models"

SCHEMA: dict[str, pl.DataType] = polars_schema(TABLE)  # pipeline/schema/derived.py


def _nan(v: Any) -> Any:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _row(fm: FittedModel, p: PhaseFit) -> dict[str, Any]:
    k, m, g = fm.key, fm.model, fm.gpu
    tp = k.gpu_count
    peak = g.peak_flops(compute_dtype_for(g, k.weight_dtype)) * tp * p.mfu
    bw = g.bandwidth * tp * p.mbu
    roof, fitted = critical_batches(fm)
    row: dict[str, Any] = {**deployment.row(k), "tp": tp, "phase": p.phase}
    row["method"] = fm.extra.get("method", "frame")
    for name in ("mfu", "mbu", "step_overhead", "seq_overhead"):
        row[name] = getattr(p, name)
        lo, hi = p.ci[name]
        row[f"{name}_ci_low"], row[f"{name}_ci_high"] = _nan(float(lo)), _nan(float(hi))
    row["mfu_source"], row["mbu_source"] = p.source["mfu"], p.source["mbu"]
    row["flash_attention"] = (k.attention or "flash") != "eager"
    row |= {
        "n": p.n,
        "n_train": p.n_train,
        "n_test": p.n_test,
        "r2_test": _nan(p.r2_test),
        "mape_test": _nan(p.mape_test),
        "mape_all": _nan(p.mape_all),
        "residual_scale": p.scale,
        "frac_compute_bound": p.frac_compute,
        "attn_s_per_pair": 4.0 * m.layers * m.attn_dim / peak,
        "kv_s_per_token": kv_bytes_per_token(m, k.kv_dtype) / bw,
        "compute_s_per_seq": 2.0 * m.active_params / peak,
        "weights_s": m.params * dtype_bytes(k.weight_dtype) / bw,
        "roof_s_per_token": 2.0 * m.active_params / (peak / p.mfu),
        "roof_s_per_pair": 4.0 * m.layers * m.attn_dim / (peak / p.mfu),
        "roof_weights_s": m.params * dtype_bytes(k.weight_dtype) / (bw / p.mbu),
        "roof_kv_s_per_token": kv_bytes_per_token(m, k.kv_dtype) / (bw / p.mbu),
        "critical_batch_roofline": roof,
        "critical_batch_fitted": _nan(fitted),
        "max_batch_seen": fm.extra.get("max_batch_seen"),
        "requests_used": fm.extra.get("requests_used"),
    }
    return row


def to_frame(fits: list[FittedModel]) -> pl.DataFrame:
    """The cost_models rows of fitted groups (an empty frame with the schema when none)."""
    rows = [_row(fm, p) for fm in fits for p in (fm.prefill, fm.decode) if p is not None]
    if not rows:
        return pl.DataFrame(schema=SCHEMA)
    return pl.DataFrame(rows, schema=SCHEMA, strict=False)


def write_fits(layout: Layout, fits: list[FittedModel]) -> str:
    """Replace the cost_models table (always written, empty when nothing could be fitted)."""
    return write_derived(layout, TABLE, to_frame(fits))


def _phase_from_row(row: dict[str, Any]) -> PhaseFit:
    names = ("mfu", "mbu", "step_overhead", "seq_overhead")
    ci = {
        n: (
            math.nan if row[f"{n}_ci_low"] is None else row[f"{n}_ci_low"],
            math.nan if row[f"{n}_ci_high"] is None else row[f"{n}_ci_high"],
        )
        for n in names
    }
    src = {n: "fit" for n in names} | {"mfu": row["mfu_source"], "mbu": row["mbu_source"]}
    f = {k: (math.nan if row[k] is None else row[k]) for k in ("r2_test", "mape_test", "mape_all")}
    return PhaseFit(
        phase=row["phase"],
        mfu=row["mfu"],
        mbu=row["mbu"],
        step_overhead=row["step_overhead"],
        seq_overhead=row["seq_overhead"],
        ci=ci,
        source=src,
        n=row["n"],
        n_train=row["n_train"],
        n_test=row["n_test"],
        scale=row["residual_scale"],
        frac_compute=row["frac_compute_bound"],
        **f,
    )


def from_frame(df: pl.DataFrame) -> dict[GroupKey, FittedModel]:
    """FittedModel per group from cost_models rows; rows naming unknown models/GPUs are skipped."""
    out: dict[GroupKey, FittedModel] = {}
    phases: dict[GroupKey, dict[str, PhaseFit]] = {}
    extra: dict[GroupKey, dict[str, Any]] = {}
    for row in df.iter_rows(named=True):
        key = deployment.from_row(row)
        phases.setdefault(key, {})[row["phase"]] = _phase_from_row(row)
        extra[key] = {"method": row["method"], "max_batch_seen": row["max_batch_seen"],
                      "requests_used": row["requests_used"]}  # fmt: skip
    for key, ph in phases.items():
        try:
            model, gpu = catalog.model(key.model), catalog.gpu(key.gpu)
        except catalog.UnknownName:
            continue
        out[key] = FittedModel(key, model, gpu, ph.get("prefill"), ph.get("decode"), extra[key])
    return out


def load_fits(
    layout: Layout, con: duckdb.DuckDBPyConnection | None = None
) -> dict[GroupKey, FittedModel]:
    """The fitted models in the warehouse (empty when ``pipeline fit`` has not run)."""
    con = con or connect(layout)
    names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    if TABLE not in names:
        return {}
    return from_frame(pl.from_arrow(con.sql(f"SELECT * FROM {TABLE}").to_arrow_table()))  # type: ignore[arg-type]

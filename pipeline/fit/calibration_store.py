"""Runs of each deployment read from the warehouse for calibration; the calibration table.

A run enters calibration when its requests carry arrival times (a log whose arrivals are all the
same instant, such as llmperf's, has no clock to replay and is listed as left out), a model and
a GPU, and at least :data:`MIN_REQUESTS` successful requests. Its KV capacity is taken from the
run's own metadata when the reader recorded one (``runs.metadata_json.kv_capacity_tokens``).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.fit.calibrate import Calibration, Deployment, Run
from pipeline.schema import deployment as deployment_key
from pipeline.schema.tables import arrow_schema
from pipeline.warehouse.derived import write_derived
from pipeline.warehouse.layout import Layout

MIN_REQUESTS = 20
TABLE = "calibration"


@dataclass
class Deployments:
    runs: dict[Deployment, list[Run]] = field(default_factory=dict)
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (run_id, why)


def load_deployments(con: Any) -> Deployments:
    """Every run with a replayable clock, grouped by deployment (``con``: DuckDB connection)."""
    cols = deployment_key.sql_select()
    df = pl.from_arrow(
        con.sql(
            f"""SELECT run_id, {cols}, t_arrival, ttft_s, e2e_s, prompt_tokens, output_tokens
            FROM requests
            WHERE status = 'ok' AND ttft_s IS NOT NULL AND e2e_s IS NOT NULL
              AND prompt_tokens > 0 AND output_tokens IS NOT NULL
            ORDER BY run_id, t_arrival, request_id"""
        ).to_arrow_table()
    )
    kv, disagg = _run_metadata(con)
    out = Deployments()
    assert isinstance(df, pl.DataFrame)
    for (run_id,), g in df.group_by(["run_id"], maintain_order=True):
        first = g.row(0, named=True)
        if first["model"] is None or first["gpu"] is None:
            out.left_out.append((str(run_id), "no model or GPU (use --set model=... gpu=...)"))
            continue
        if g["t_arrival"].null_count():
            out.left_out.append((str(run_id), "no arrival times in this log"))
            continue
        arr = g["t_arrival"].to_numpy()
        if g.height < MIN_REQUESTS:
            out.left_out.append((str(run_id), f"fewer than {MIN_REQUESTS} successful requests"))
            continue
        if float(arr.max() - arr.min()) <= 0.0:
            out.left_out.append((str(run_id), "no arrival times in this log"))
            continue
        # One deployment per run: its most common configuration (a run is one server set-up).
        key = {n: first[n] for n in deployment_key.NAMES}
        dep = Deployment(**key, disaggregation=disagg.get(str(run_id)))
        out.runs.setdefault(dep, []).append(
            Run(
                run_id=str(run_id),
                arrival=arr.astype(np.float64),
                prompt=g["prompt_tokens"].to_numpy().astype(np.int64),
                output=g["output_tokens"].to_numpy().astype(np.int64),
                ttft=g["ttft_s"].to_numpy().astype(np.float64),
                e2e=g["e2e_s"].to_numpy().astype(np.float64),
                kv_tokens=kv.get(str(run_id)),
            )
        )
    return out


def _run_metadata(con: Any) -> tuple[dict[str, int], dict[str, tuple]]:
    """Per run: the KV capacity its metadata records, and its [disaggregation] keys."""
    try:
        rows = con.sql("SELECT run_id, metadata_json FROM runs").fetchall()
    except Exception:  # no runs table yet
        return {}, {}
    kv, disagg = {}, {}
    for run_id, meta in rows:
        try:
            m = json.loads(meta or "{}")
        except ValueError:
            continue
        v = m.get("kv_capacity_tokens")
        if isinstance(v, int) and v > 0:
            kv[run_id] = v
        d = m.get("disaggregation")
        if isinstance(d, dict) and d.get("enabled", True):
            disagg[run_id] = tuple(sorted((k, v) for k, v in d.items() if k != "enabled"))
    return kv, disagg


# ---------------------------------------------------------------- the calibration table


def calibration_rows(cals: list[Calibration]) -> pa.Table:
    rows = []
    for c in cals:
        d = c.deployment
        base = {
            **deployment_key.row(d),
            "scheduler": c.scheduler,
            "scheduler_source": c.scheduler_source,
            "runs": c.runs,
            "requests": c.requests,
            "loss": c.loss,
            "fit_seconds": c.seconds,
        }
        names = ["mfu", "mbu", "overlap", "step_overhead_s", "seq_overhead_s"]
        if c.status.get("kv_link_share", "not used") != "not used":
            names.append("kv_link_share")  # disaggregated: the KV link's achieved share
        for name in names:
            ci = c.ci.get(name)
            rows.append(
                {
                    **base,
                    "parameter": name,
                    "value": c.values[name],
                    "ci_low": ci[0] if ci else None,
                    "ci_high": ci[1] if ci else None,
                    "status": c.status[name],
                }
            )
        rows.append(
            {
                **base,
                "parameter": "kv_tokens",
                "value": float(c.kv_tokens),
                "ci_low": None,
                "ci_high": None,
                "status": c.kv_status,
            }
        )
    return _typed(rows, TABLE)


def _typed(rows: list[dict[str, Any]], table: str) -> pa.Table:
    """Rows as an Arrow table of the table's declared schema (pipeline/schema/tables.py)."""
    schema = arrow_schema(table)
    return pa.Table.from_pydict({f.name: [r.get(f.name) for r in rows] for f in schema}, schema)


def write_calibrations(layout: Layout, cals: list[Calibration]) -> str:
    return write_derived(layout, TABLE, calibration_rows(cals))


def write_validation(layout: Layout, rows: list[dict[str, Any]]) -> str:
    return write_derived(layout, "validation", _typed(rows, "validation"))


def stamp() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class StoredCalibration:
    """One deployment's row group of the calibration table, for replay."""

    model: str
    gpu: str
    gpu_count: int
    weight_dtype: str
    kv_dtype: str
    scheduler: str
    values: dict[str, float]
    kv_tokens: int | None
    runs: int
    requests: int

    def describe(self) -> str:
        return (
            f"calibrated by replay on {self.runs} run(s) of {self.model} on {self.gpu_count} x "
            f"{self.gpu} ({self.scheduler})"
        )


def load_calibrations(con: Any) -> list[StoredCalibration]:
    """Every calibrated deployment of the warehouse ([] when `pipeline fit` wrote none)."""
    try:
        df = pl.from_arrow(con.sql(f"SELECT * FROM {TABLE}").to_arrow_table())
    except Exception:  # no calibration table yet
        return []
    assert isinstance(df, pl.DataFrame)
    keys = [n for n in deployment_key.NAMES if n in df.columns]  # older tables: fewer parts
    out = []
    for _, g in df.group_by(keys, maintain_order=True):
        first = g.row(0, named=True)
        values = {r["parameter"]: r["value"] for r in g.iter_rows(named=True)}
        kv = values.pop("kv_tokens", None)
        status = {r["parameter"]: r["status"] for r in g.iter_rows(named=True)}
        out.append(
            StoredCalibration(
                model=first["model"],
                gpu=first["gpu"],
                gpu_count=int(first["gpu_count"] or 1),
                weight_dtype=first["weight_dtype"] or "bf16",
                kv_dtype=first["kv_dtype"] or "bf16",
                scheduler=first["scheduler"],
                values=values,
                kv_tokens=int(kv) if kv and status.get("kv_tokens") != "lower bound" else None,
                runs=int(first["runs"] or 0),
                requests=int(first["requests"] or 0),
            )
        )
    return out

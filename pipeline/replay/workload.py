"""What to replay: arrivals and lengths of a recorded run, an arrivals trace, or a trace file.

``SOURCE`` is tried in order as a ``requests.run_id`` in the warehouse, an ``arrivals.run_id``
(Azure, Mooncake, BurstGPT, Splitwise traces), then a file path (ingested into a temporary
warehouse with the same readers as ``pipeline ingest``, so every supported format works).
Only successful requests with known prompt and output lengths are replayed: errors and
cancellations are not modelled.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl

from pipeline.schema import deployment
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect

# The recorded deployment of a run: the key's parts as logged (defaults are the scenario's job).
DEPLOYMENT_COLUMNS = deployment.NAMES


@dataclass
class RecordedWorkload:
    source: str  # what the user passed
    run_id: str  # the recorded run (or trace) it came from
    kind: str  # 'requests' | 'arrivals'
    request_id: list[str]
    arrival: np.ndarray  # seconds since the first arrival
    prompt: np.ndarray
    output: np.ndarray
    cached: np.ndarray
    clock: str = "relative"
    t0: float = 0.0  # clock value of arrival 0
    recorded: dict[str, Any] = field(default_factory=dict)  # deployment as recorded
    observed: pl.DataFrame | None = None  # request_id, ttft_s, tpot_s, e2e_s (recorded runs)
    skipped: int = 0  # rows without lengths, or not 'ok'

    @property
    def n(self) -> int:
        return len(self.arrival)

    def scaled(self, rate_scale: float, max_requests: int | None = None) -> RecordedWorkload:
        """Arrivals compressed (rate_scale > 1) or stretched; optionally the first N requests."""
        k = self.n if max_requests is None else min(self.n, max_requests)
        return RecordedWorkload(
            source=self.source,
            run_id=self.run_id,
            kind=self.kind,
            request_id=self.request_id[:k],
            arrival=self.arrival[:k] / rate_scale,
            prompt=self.prompt[:k],
            output=self.output[:k],
            cached=self.cached[:k],
            clock=self.clock,
            t0=self.t0,
            recorded=self.recorded,
            observed=self.observed if rate_scale == 1.0 and k == self.n else None,
            skipped=self.skipped,
        )


def _mode(df: pl.DataFrame, col: str) -> Any:
    s = df[col].drop_nulls()
    if s.len() == 0:
        return None
    return s.mode().sort()[0]


def _from_requests(
    con: duckdb.DuckDBPyConnection, run_id: str, source: str
) -> RecordedWorkload | None:
    cols = ", ".join(DEPLOYMENT_COLUMNS)
    df = con.sql(
        f"""SELECT request_id, server, clock, t_arrival, prompt_tokens, output_tokens,
                   coalesce(cached_tokens, 0) AS cached_tokens, status, ttft_s, tpot_s, e2e_s,
                   {cols}
            FROM requests WHERE run_id = $run ORDER BY t_arrival, request_id""",
        params={"run": run_id},
    ).pl()
    if df.height == 0:
        return None
    ok = df.filter(
        (pl.col("status") == "ok")
        & pl.col("prompt_tokens").is_not_null()
        & pl.col("output_tokens").is_not_null()
        & (pl.col("prompt_tokens") >= 1)
    )
    if ok.height == 0:
        raise ValueError(f"run {run_id!r} has no successful request with known lengths")
    recorded = {c: _mode(ok, c) for c in DEPLOYMENT_COLUMNS}
    servers = ok["server"].drop_nulls()
    recorded["replicas"] = max(int(servers.n_unique()), 1) if servers.len() else 1
    t = ok["t_arrival"].to_numpy()
    t0 = float(t.min())
    return RecordedWorkload(
        source=source,
        run_id=run_id,
        kind="requests",
        request_id=ok["request_id"].to_list(),
        arrival=t - t0,
        prompt=ok["prompt_tokens"].to_numpy().astype(np.int64),
        output=ok["output_tokens"].to_numpy().astype(np.int64),
        cached=np.minimum(ok["cached_tokens"].to_numpy(), ok["prompt_tokens"].to_numpy()).astype(
            np.int64
        ),
        clock=str(_mode(ok, "clock") or "relative"),
        t0=t0,
        recorded=recorded,
        observed=ok.select("request_id", "ttft_s", "tpot_s", "e2e_s"),
        skipped=df.height - ok.height,
    )


def _from_arrivals(
    con: duckdb.DuckDBPyConnection, run_id: str, source: str
) -> RecordedWorkload | None:
    df = con.sql(
        """SELECT request_id, t_arrival, epoch(arrival_at) AS unix_arrival,
                  prompt_tokens, output_tokens
           FROM arrivals WHERE run_id = $run ORDER BY t_arrival, request_id""",
        params={"run": run_id},
    ).pl()
    if df.height == 0:
        return None
    ok = df.filter(
        pl.col("prompt_tokens").is_not_null()
        & pl.col("output_tokens").is_not_null()
        & (pl.col("prompt_tokens") >= 1)
    )
    if ok.height == 0:
        raise ValueError(f"trace {run_id!r} has no arrival with prompt and output lengths")
    t = ok["t_arrival"].to_numpy()
    unix = ok["unix_arrival"]
    clock, t0 = "relative", float(t.min())
    if unix.null_count() == 0:
        clock, t0 = "unix", float(unix.to_numpy()[int(np.argmin(t))])
    return RecordedWorkload(
        source=source,
        run_id=run_id,
        kind="arrivals",
        request_id=ok["request_id"].cast(pl.Utf8).to_list(),
        arrival=t - float(t.min()),
        prompt=ok["prompt_tokens"].to_numpy().astype(np.int64),
        output=ok["output_tokens"].to_numpy().astype(np.int64),
        cached=np.zeros(ok.height, np.int64),
        clock=clock,
        t0=t0,
        recorded={"replicas": None},
        skipped=df.height - ok.height,
    )


def _runs(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, int]]:
    return [
        (r[0], int(r[1]))
        for r in con.sql(
            f"SELECT run_id, count(*) FROM {table} GROUP BY run_id ORDER BY 2 DESC, 1"
        ).fetchall()
    ]


def load_workload(source: str, layout: Layout | None) -> RecordedWorkload:
    """Resolve SOURCE (run id in the warehouse, arrivals trace id, or a file) to a workload."""
    if layout is not None and layout.root.exists():
        con = connect(layout)
        for fn in (_from_requests, _from_arrivals):
            w = fn(con, source, source)
            if w is not None:
                return w
    path = Path(source)
    if not path.exists():
        where = f"warehouse {layout.root}" if layout is not None else "the warehouse"
        raise FileNotFoundError(
            f"{source!r} is neither a run_id in {where} (requests or arrivals) nor a file"
        )
    from pipeline.ingest.run import ingest_paths

    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        tmp_layout = Layout(Path(tmp) / "wh")
        ingest_paths([path], tmp_layout)
        con = connect(tmp_layout)
        for table, fn in (("requests", _from_requests), ("arrivals", _from_arrivals)):
            runs = _runs(con, table)
            if runs:
                w = fn(con, runs[0][0], source)
                if w is not None:
                    return w
    raise ValueError(f"{source}: no requests or arrivals could be read from this file")

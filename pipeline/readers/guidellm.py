"""guidellm ``benchmarks.json``: one report with a list of benchmarks (one per load strategy).

Requests live in ``benchmarks[].requests.{successful, errored, incomplete}``. The ≈v0.3 schema
has flat epoch-second fields (``start_time``, ``first_token_time``, ``last_token_time``,
``end_time``); the v2 schema nests them in ``info.timings`` (``request_start``,
``first_token_iteration``, ``last_token_iteration``, ``request_end``). Both are read. Benchmark
level ``metrics.*`` distributions → ``run_summaries`` (``<metric>.<status>.<stat>``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.readers import _common as c
from pipeline.readers.base import Capabilities, InputError, ReadContext, ReaderOutput
from pipeline.readers.vllm_bench import run_ids

PRIORITY = 41
STATUS = {"successful": "ok", "errored": "error", "incomplete": "cancelled"}
_STATS = ("mean", "median", "mode", "variance", "std_dev", "min", "max", "count", "total_sum")


def _first(df: pl.DataFrame, *candidates: tuple[str, str | None]) -> pl.Expr:
    """First non-null of several (column, JSON path inside it) candidates, as text."""
    exprs = []
    for col, path in candidates:
        if col in df.columns:
            exprs.append(pl.col(col) if path is None else c.jpath(col, path))
    return pl.coalesce(exprs) if exprs else pl.lit(None, pl.Utf8)


def _get(d: object, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


class GuidellmReader:
    name = "guidellm"
    description = (
        "guidellm benchmarks.json (≈v0.3 flat and v2 nested schemas): one run per benchmark, one "
        "request per successful/errored/incomplete entry with epoch-second start, first and last "
        "token times (unix clock; no per-token times). metrics.* -> run_summaries. Model from "
        "the backend; no GPU: use --set gpu=..."
    )
    capabilities = Capabilities(
        per_request=True,
        per_token=False,
        arrivals_only=False,
        gpu_model_present=True,
        needs_set=("gpu", "gpu_count"),
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        text = c.head_text(head)
        return (
            text.startswith("{")
            and '"benchmarks"' in text
            and ('"generative_benchmark"' in text or '"guidellm_version"' in text)
        )

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        doc = c.load_json(ctx)
        benches = doc.get("benchmarks") if isinstance(doc, dict) else None
        if not isinstance(benches, list):
            raise InputError("guidellm report without a 'benchmarks' list")
        n = len(benches)
        ids = run_ids(ctx, n)
        offset = 0
        for bench, run_id in zip(benches, ids, strict=True):
            if not isinstance(bench, dict):
                yield ReaderOutput(
                    quarantine=c.quarantine_frame(
                        [0], ["benchmark entry is not an object"], [bench]
                    )
                )
                continue
            out = self._bench(ctx, bench, run_id, offset, doc)
            offset += out[1]
            yield out[0]

    def _bench(
        self, ctx: ReadContext, bench: dict, run_id: str, offset: int, doc: dict
    ) -> tuple[ReaderOutput, int]:
        reqs = bench.get("requests") if isinstance(bench.get("requests"), dict) else {}
        frames = []
        count = 0
        for key, status in STATUS.items():
            items = reqs.get(key)
            if not isinstance(items, list) or not items:
                continue
            df = c.records_frame(items).with_columns(
                pl.lit(status).alias("_status"),
                (pl.col("_line") + offset + count).alias("_line"),
            )
            count += len(items)
            frames.append(df)
        model = (
            _get(bench, "worker", "backend_model")
            or _get(bench, "config", "backend", "model")  # 0.8: benchmarks[].config.backend
            or _get(doc, "config", "spec", "backend", "model")
            or _get(doc, "config", "backend_kwargs", "model")
        )
        requests = quarantine = None
        if frames:
            df = pl.concat(frames, how="diagonal_relaxed")
            requests, quarantine = self._requests(df, run_id, model)
        metrics: dict[str, object] = {}
        for mname, dist in (bench.get("metrics") or {}).items():
            if not isinstance(dist, dict):
                continue
            for status, summ in dist.items():
                if not isinstance(summ, dict):
                    continue
                for stat in _STATS:
                    if stat in summ:
                        metrics[f"{mname}.{status}.{stat}"] = summ[stat]
                for p, v in (summ.get("percentiles") or {}).items():
                    metrics[f"{mname}.{status}.percentiles.{p}"] = v
        for k in ("duration", "start_time", "end_time"):
            if k in bench:
                metrics[k] = bench[k]
        started = c.as_float(bench.get("start_time"))
        strategy = _get(bench, "args", "strategy") or _get(bench, "config", "strategy") or {}
        meta = {
            k: bench.get(k)
            for k in ("id_", "run_id", "args", "run_stats", "worker", "request_loader", "config")
            if k in bench
        }
        meta["request_totals"] = bench.get("request_totals")
        run = {
            "run_id": run_id,
            "model": model,
            "backend": _get(bench, "worker", "backend_type")
            or _get(bench, "worker", "type_")
            or _get(bench, "config", "backend", "kind"),
            "request_rate": strategy.get("rate") if isinstance(strategy, dict) else None,
            # streams (<= 0.7); 0.8 writes max_concurrency in config.strategy.
            "max_concurrency": (strategy.get("streams") or strategy.get("max_concurrency"))
            if isinstance(strategy, dict)
            else None,
            "started_at": datetime.fromtimestamp(started, UTC) if started else None,
            "metadata": meta,
        }
        return (
            ReaderOutput(
                requests=requests,
                quarantine=quarantine,
                runs=c.runs_frame(self.name, ctx, [run]),
                run_summaries=c.summaries_frame(self.name, ctx, run_id, metrics),
            ),
            count,
        )

    def _requests(
        self, df: pl.DataFrame, run_id: str, model: object
    ) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        x = df.with_columns(
            _first(df, ("request_id", None), ("response_id", None)).alias("rid"),
            c.num(_first(df, ("prompt_tokens", None), ("input_metrics", "$.text_tokens"))).alias(
                "inp"
            ),
            c.num(_first(df, ("output_tokens", None), ("output_metrics", "$.text_tokens"))).alias(
                "outp"
            ),
            c.num(
                _first(
                    df,
                    ("start_time", None),
                    ("request_start_time", None),
                    ("info", "$.timings.request_start"),
                )
            ).alias("t0"),
            c.num(
                _first(
                    df,
                    ("first_token_time", None),
                    ("info", "$.timings.first_token_iteration"),
                )
            ).alias("t1"),
            c.num(
                _first(
                    df,
                    ("last_token_time", None),
                    ("info", "$.timings.last_token_iteration"),
                    ("end_time", None),
                    ("request_end_time", None),
                    ("info", "$.timings.request_end"),
                )
            ).alias("t2"),
            _first(df, ("error", None), ("info", "$.error")).alias("err"),
        )
        ok = pl.col("_status") == "ok"

        bad_int = c.bad_count

        checks = [
            (pl.col("_raw").str.starts_with('{"_not_an_object"'), "entry is not an object"),
            (pl.col("t0").is_null(), "request start time missing or not a number"),
            (ok & bad_int(pl.col("inp")), "prompt_tokens missing or not a whole number"),
            (ok & bad_int(pl.col("outp")), "output_tokens missing or not a whole number"),
            (ok & pl.col("t1").is_null(), "first token time missing or not a number"),
        ]
        good, q = c.split_valid(x, checks)
        out = good.select(
            pl.coalesce(pl.col("rid"), pl.col("_line").cast(pl.Utf8)).alias("request_id"),
            pl.col("_line").alias("source_line"),
            pl.lit(run_id).alias("run_id"),
            pl.lit(model if isinstance(model, str) else None, pl.Utf8).alias("model"),
            pl.col("inp").cast(pl.Int64, strict=False).alias("prompt_tokens"),
            pl.when(ok | pl.col("outp").is_not_null())
            .then(pl.col("outp"))
            .otherwise(0)
            .cast(pl.Int64, strict=False)
            .alias("output_tokens"),
            pl.lit("unix").alias("clock"),
            pl.col("t0").alias("arrival_ts"),
            pl.col("t1").alias("first_token_ts"),
            pl.col("t2").alias("finish_ts"),
            pl.col("_status").alias("status"),
            pl.when(ok).then(None).otherwise(pl.col("err")).alias("error"),
        )
        return c.requests_frame(out), (q if q.height else None)


READER = GuidellmReader()

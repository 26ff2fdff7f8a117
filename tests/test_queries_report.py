"""The report_* and attribution_* named queries on small input rows with expected output rows
(worked out by hand in the comments), and on an empty warehouse."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from pipeline.ingest.run import ingest_paths
from pipeline.query.named import QueryError, load_query, run_named
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.conftest import REPO, write_jsonl
from tests.test_queries import EPS, T0, _con, _rows, timed

START = datetime(2025, 11, 2, tzinfo=UTC)  # T0 as a wall-clock time
assert START.timestamp() == T0
STAMPS = ("arrival_ts", "scheduled_ts", "first_token_ts", "finish_ts")


def queued(rec: dict, queue: float | None) -> dict:
    """The record with scheduled_ts = arrival + queue (None: no scheduled time logged)."""
    return {**rec, "scheduled_ts": None if queue is None else rec["arrival_ts"] + queue}


def relative(rec: dict, run_id: str = "rel") -> dict:
    """The record on a relative clock: the same times, measured from T0 instead of the epoch."""
    out = {k: (v - T0 if k in STAMPS and v is not None else v) for k, v in rec.items()}
    return {**out, "clock": "relative", "run_id": run_id}


def _empty(tmp_path: Path, name: str, **params) -> list[dict]:
    return _rows(_con(tmp_path, []), name, **params)


# ------------------------------------------------------------------ report_bounds
def test_report_bounds(tmp_path):
    recs = [
        timed(0, 0.1, 0.01, 3, arrival=0.0),
        timed(1, 0.1, 0.01, 3, arrival=5.0),
        timed(2, 0.1, 0.01, 3, arrival=2.5),
        relative(timed(3, 0.1, 0.01, 3, arrival=9.0)),  # no wall clock: counted, not bounded
    ]
    rows = _rows(_con(tmp_path, recs), "report_bounds")
    # min / max over the three unix arrivals T0 + 0, 5, 2.5; 4 requests, 3 with a wall clock.
    assert rows == [
        {
            "first_arrival": START,
            "last_arrival": START + timedelta(seconds=5),
            "requests": 4,
            "with_wall_clock": 3,
        }
    ]


def test_report_bounds_empty(tmp_path):
    assert _empty(tmp_path, "report_bounds") == [
        {"first_arrival": None, "last_arrival": None, "requests": 0, "with_wall_clock": 0}
    ]


# ------------------------------------------------------------------ report_file_span
def test_report_file_span(tmp_path):
    layout = Layout(tmp_path / "wh")
    a = write_jsonl(
        tmp_path / "a.jsonl",
        [timed(0, 0.1, 0.01, 2, arrival=3.0), timed(1, 0.1, 0.01, 2, arrival=1.0)],
    )
    b = write_jsonl(
        tmp_path / "b.jsonl",
        [timed(2, 0.1, 0.01, 2, arrival=2.0), relative(timed(3, 0.1, 0.01, 2, arrival=7.0))],
    )
    ingest_paths([a, b], layout)
    con = connect(layout)
    # a: arrivals T0 + 3, T0 + 1 -> [T0 + 1, T0 + 3], 2 requests.
    assert _rows(con, "report_file_span", source_file=a) == [
        {
            "first_arrival": START + timedelta(seconds=1),
            "last_arrival": START + timedelta(seconds=3),
            "requests": 2,
        }
    ]
    # b: one unix arrival T0 + 2 bounds it; the relative-clock request counts but has no time.
    assert _rows(con, "report_file_span", source_file=b) == [
        {
            "first_arrival": START + timedelta(seconds=2),
            "last_arrival": START + timedelta(seconds=2),
            "requests": 2,
        }
    ]
    # A file never ingested: one row of nulls / zero.
    none = [{"first_arrival": None, "last_arrival": None, "requests": 0}]
    assert _rows(con, "report_file_span", source_file=tmp_path / "c.jsonl") == none


def test_report_file_span_empty(tmp_path):
    assert _empty(tmp_path, "report_file_span", source_file="logs/a.jsonl") == [
        {"first_arrival": None, "last_arrival": None, "requests": 0}
    ]


# ------------------------------------------------------------------ report_errors
def test_report_errors(tmp_path):
    recs = [
        timed(0, 0.1, 0.01, 2),  # ok: not an error
        {**timed(1, 0.1, 0.01, 2, status="error"), "error": "boom"},
        {**timed(2, 0.1, 0.01, 2, status="error"), "error": "boom"},
        timed(3, 0.1, 0.01, 2, status="error"),  # no message
        timed(4, 0.1, 0.01, 2, status="cancelled", model=None),  # model '?'
        # Messages differing only in numbers are one reason (one row, not one per number).
        {**timed(5, 0.1, 0.01, 2, status="error"), "error": "Output too few tokens 17"},
        {**timed(6, 0.1, 0.01, 2, status="error"), "error": "Output too few tokens 23"},
        {**timed(7, 0.1, 0.01, 2, status="error"), "error": "Output too few tokens 4.5"},
    ]
    rows = _rows(_con(tmp_path, recs), "report_errors")
    # Most requests first, then model ('?' < 'm'), gpu, status, error.
    too_few = "Output too few tokens N"
    assert rows == [
        {"model": "m", "gpu": "g", "status": "error", "error": too_few,
         "example": "Output too few tokens 17", "requests": 3},
        {"model": "m", "gpu": "g", "status": "error", "error": "boom", "example": "boom",
         "requests": 2},
        {"model": "?", "gpu": "g", "status": "cancelled", "error": "(no message)",
         "example": "(no message)", "requests": 1},
        {"model": "m", "gpu": "g", "status": "error", "error": "(no message)",
         "example": "(no message)", "requests": 1},
    ]  # fmt: skip


def test_report_errors_empty(tmp_path):
    assert _empty(tmp_path, "report_errors") == []


# ------------------------------------------------------------------ report_headline
def test_report_headline(tmp_path):
    recs = [
        # run r1 (m, g): arrivals 0, 1, 2, 3; finishes 0.24, 1.64, 2.2, 3.3 -> 3.3 s of run time.
        {**timed(0, 0.2, 0.02, 3, prompt=500, arrival=0.0, model="m"), "cached_tokens": 100,
         "run_id": "r1"},  # good: ttft 0.2 <= 0.5, tpot 0.02 <= 0.05
        {**timed(1, 0.6, 0.02, 3, arrival=1.0), "run_id": "r1"},  # ok, too slow: ttft 0.6
        {**timed(2, 0.1, 0.1, 2, arrival=2.0, status="error"), "run_id": "r1"},
        {**timed(3, 0.3, 0.0, 1, arrival=3.0), "run_id": "r1"},  # good: one token, no TPOT
        # run r2 (m, g): arrivals 10, 10.5; finishes 10.48, 10.61 -> 0.61 s.
        {**timed(4, 0.4, 0.04, 3, arrival=10.0), "run_id": "r2"},  # good
        {**timed(5, 0.1, 0.01, 2, arrival=10.5, status="cancelled"), "run_id": "r2"},
        # run r3 (other, g): 0.3 s; tpot 0.2 > 0.05, not good.
        {**timed(6, 0.1, 0.2, 2, arrival=20.0, model="other"), "run_id": "r3"},
    ]  # fmt: skip
    rows = _rows(_con(tmp_path, recs), "report_headline", slo_ttft=0.5, slo_tpot=0.05)
    ints = ("runs", "requests", "ok", "errors", "cancelled", "prompt_tokens", "cached_tokens",
            "output_tokens", "good")  # fmt: skip
    # m/g: 6 requests (ok: 0, 1, 3, 4), prompt 500 + 5 x 1000, output tokens of ok ones only
    # 3 + 3 + 1 + 3 = 10, good 0, 3, 4.
    assert [tuple(r[k] for k in ("model", "gpu", *ints)) for r in rows] == [
        ("m", "g", 2, 6, 4, 1, 1, 5500, 100, 10, 3),
        ("other", "g", 1, 1, 1, 0, 0, 1000, 0, 2, 0),
    ]
    m, o = rows
    # Run time sums the runs' own spans: 3.3 + 0.61 = 3.91 s (each span's stamps are exact to
    # ~3.6e-7 s, so two runs stay within EPS).
    assert m["duration_s"] == pytest.approx(3.91, abs=EPS)
    assert m["requests_per_s"] == pytest.approx(6 / 3.91, abs=EPS)
    assert m["output_tokens_per_s"] == pytest.approx(10 / 3.91, abs=EPS)
    assert m["goodput_per_s"] == pytest.approx(3 / 3.91, abs=EPS)
    assert m["slo_attainment"] == 3 / 6
    assert m["failure_rate"] == 2 / 6  # the error and the cancellation
    assert o["duration_s"] == pytest.approx(0.3, abs=EPS)
    assert o["requests_per_s"] == pytest.approx(1 / 0.3, abs=1e-5)  # 1/0.3^2 x 1e-6 ~ 1.1e-5
    assert o["output_tokens_per_s"] == pytest.approx(2 / 0.3, abs=3e-5)
    assert (o["goodput_per_s"], o["slo_attainment"], o["failure_rate"]) == (0.0, 0.0, 0.0)


def test_report_headline_empty(tmp_path):
    assert _empty(tmp_path, "report_headline") == []


# ------------------------------------------------------------------ report_run_quality
def test_report_run_quality(tmp_path):
    recs = [
        {**timed(0, 0.1, 0.01, 2), "run_id": "r1"},
        {**queued(timed(1, 0.1, 0.01, 2, model=None), None), "run_id": "r1"},  # no queue time
        {**timed(2, 0.1, 0.01, 2, gpu=None, status="error"), "run_id": "r1", "gpu_count": None,
         "first_token_ts": None, "finish_ts": None, "token_times": None},  # failed before a token
        relative(timed(3, 0.1, 0.01, 2), "r2"),
        relative(timed(4, 0.1, 0.01, 2), "r2"),
    ]  # fmt: skip
    rows = _rows(_con(tmp_path, recs), "report_run_quality")
    # Negative times and ok-without-TTFT are rejected at ingest for our format, so 0 here.
    keys = ("run_id", "source_format", "clock", "requests", "no_wall_clock", "missing_model",
            "missing_gpu", "missing_gpu_count", "negative_times", "ok_without_ttft",
            "no_queue_time")  # fmt: skip
    assert [tuple(r[k] for k in keys) for r in rows] == [
        ("r1", "native", "unix", 3, 0, 1, 1, 1, 0, 0, 1),
        ("r2", "native", "relative", 2, 2, 0, 0, 0, 0, 0, 0),
    ]


def test_report_run_quality_empty(tmp_path):
    assert _empty(tmp_path, "report_run_quality") == []


# ------------------------------------------------------------------ report_ttft_decomposition
def test_report_ttft_decomposition(tmp_path):
    recs = [
        queued(timed(0, 0.2, 0.01, 2), 0.05),  # prefill 0.15
        queued(timed(1, 0.4, 0.01, 2), 0.10),  # prefill 0.30
        queued(timed(2, 0.6, 0.01, 2), None),  # no scheduled time: all 0.6 unattributed
        queued(timed(3, 1.0, 0.01, 2), 0.30),  # prefill 0.70
        queued(timed(4, 5.0, 0.01, 2, status="error"), 0.1),  # not ok: left out
        timed(5, 0.5, 0.01, 2, model="other"),  # queue 0, prefill 0.5
    ]
    rows = _rows(_con(tmp_path, recs), "report_ttft_decomposition")
    assert [(r["model"], r["cohort"], r["requests"], r["with_queue"], r["with_prefill"])
            for r in rows] == [
        ("m", "all requests", 4, 3, 3),
        ("m", "slowest 10 %", 1, 1, 1),
        ("other", "all requests", 1, 1, 1),
        ("other", "slowest 10 %", 1, 1, 1),
    ]  # fmt: skip
    # m, all: ttft (0.2 + 0.4 + 0.6 + 1.0) / 4 = 0.55; queue (0.05 + 0.1 + 0 + 0.3) / 4 = 0.1125;
    # prefill (0.15 + 0.3 + 0 + 0.7) / 4 = 0.2875; unattributed 0.6 / 4 = 0.15 (sum 0.55).
    # m, slowest: p90 of (0.2, 0.4, 0.6, 1.0) at position 2.7 = 0.6 + 0.7 x 0.4 = 0.88 -> 1.0 only.
    # other: p90 of one value is that value, so the request is its own slowest 10 %.
    want = [
        (0.55, 0.1125, 0.2875, 0.15),
        (1.0, 0.3, 0.7, 0.0),
        (0.5, 0.0, 0.5, 0.0),
        (0.5, 0.0, 0.5, 0.0),
    ]
    for r, w in zip(rows, want, strict=True):
        got = (r["ttft_mean"], r["queue_mean"], r["prefill_mean"], r["unattributed_mean"])
        assert got == pytest.approx(w, abs=EPS)


def test_report_ttft_decomposition_empty(tmp_path):
    assert _empty(tmp_path, "report_ttft_decomposition") == []


# ------------------------------------------------------------------ report_prefill_work
def test_report_prefill_work(tmp_path):
    recs = [
        # new tokens T = prompt - cached in octave [512, 1024): attn = T x (cached + T / 2)
        queued(timed(0, 0.2, 0.01, 2, prompt=1000), 0.1),  # T 1000, 1000 x 500 = 500000, 0.1 s
        {**queued(timed(1, 0.4, 0.01, 2, prompt=1000), 0.1), "cached_tokens": 200},  # T 800,
        # 800 x (200 + 400) = 480000, 0.3 s
        queued(timed(2, 0.5, 0.01, 2, prompt=700), 0.0),  # T 700, 700 x 350 = 245000, 0.5 s
        queued(timed(3, 0.05, 0.01, 2, prompt=100), 0.01),  # octave 64: 100 x 50 = 5000, 0.04 s
        {**queued(timed(4, 0.1, 0.01, 2, prompt=50), 0.0), "cached_tokens": 50},  # T 0 -> 1
        queued(timed(5, 0.1, 0.01, 2, prompt=3000), None),  # no prefill_s: left out
        queued(timed(6, 0.1, 0.01, 2, prompt=1000, status="error"), 0.05),  # not ok: left out
        queued(timed(7, 0.1, 0.01, 2, prompt=1000), 0.1),  # prefill_s = 0: left out
        {**queued(timed(8, 0.3, 0.01, 2, prompt=1000), 0.1), "gpu_count": None,
         "weight_dtype": None, "kv_dtype": "fp8"},  # defaults 1 / bf16; its own kv_dtype group
    ]  # fmt: skip
    rows = _rows(_con(tmp_path, recs), "report_prefill_work")
    keys = ("model", "gpu", "gpu_count", "weight_dtype", "kv_dtype", "new_tokens_lo", "requests",
            "new_tokens", "cached_tokens", "attn_work")  # fmt: skip
    assert [tuple(r[k] for k in keys) for r in rows] == [
        ("m", "g", 1, "bf16", "bf16", 1.0, 1, 0, 50, 0.0),
        ("m", "g", 1, "bf16", "bf16", 64.0, 1, 100, 0, 5000.0),
        # 1000 + 800 + 700 = 2500 new; 500000 + 480000 + 245000 = 1225000
        ("m", "g", 1, "bf16", "bf16", 512.0, 3, 2500, 200, 1_225_000.0),
        ("m", "g", 1, "bf16", "fp8", 512.0, 1, 1000, 0, 500_000.0),
    ]
    # prefill_s sums 0.1, 0.04, 0.1 + 0.3 + 0.5 = 0.9 and 0.2; the medians: the middle 0.3.
    got = [(r["prefill_s"], r["prefill_p50"]) for r in rows]
    want = [(0.1, 0.1), (0.04, 0.04), (0.9, 0.3), (0.2, 0.2)]
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=EPS)


def test_report_prefill_work_alone(tmp_path):
    # Prefill windows [first token - prefill_s, first token] = [arrival + queue, arrival + ttft]:
    recs = [
        queued(timed(0, 0.3, 0.01, 2, arrival=0.0), 0.1),  # [0.1, 0.3]
        queued(timed(1, 0.3, 0.01, 2, arrival=0.2), 0.0),  # [0.2, 0.5]: overlaps 0, so neither
        queued(timed(2, 0.2, 0.01, 2, arrival=1.0), 0.0),  # [1.0, 1.2]: alone
        queued(timed(3, 0.1, 0.01, 2, arrival=1.25), 0.0),  # [1.25, 1.35]: alone
        # [1.05, 1.1] inside 2's window, but on another server: both stay alone
        {**queued(timed(4, 0.05, 0.01, 2, arrival=1.05), 0.0), "server": "other"},
    ]
    rows = _rows(_con(tmp_path, recs), "report_prefill_work")
    assert len(rows) == 1 and rows[0]["requests"] == 5 and rows[0]["alone_requests"] == 3
    r = rows[0]
    # three prompts of 1000 new tokens: attention 1000 x 500 each; time 0.2 + 0.1 + 0.05
    assert (r["alone_new_tokens"], r["alone_cached_tokens"]) == (3000, 0)
    assert r["alone_attn_work"] == pytest.approx(1_500_000.0)
    assert r["alone_prefill_s"] == pytest.approx(0.35, abs=EPS)
    assert r["prefill_s"] == pytest.approx(0.2 + 0.3 + 0.35, abs=EPS)


def test_report_prefill_work_empty(tmp_path):
    assert _empty(tmp_path, "report_prefill_work") == []


# ------------------------------------------------------------------ report_decode_batch
def _decode_batch_records() -> list[dict]:
    return [
        # Server s1, unix clock, 1 s bins from T0 (an integer second). first = arrival + ttft,
        # finish = first + (out - 1) x tpot:
        {**timed(0, 0.1, 0.5, 11, prompt=1000, arrival=0.0), "server": "s1"},  # 0.1 -> 5.1
        {**timed(1, 0.2, 0.4, 3, prompt=2000, arrival=0.2), "server": "s1"},  # 0.4 -> 1.2
        {**timed(2, 0.3, 0.25, 3, prompt=1000, arrival=2.0), "server": "s1"},  # 2.3 -> 2.8
        {**timed(3, 0.2, 0.1, 2, prompt=1000, arrival=3.0), "server": "s1"},  # 3.2 -> 3.3
        timed(4, 0.2, 0.1, 1, arrival=0.5),  # one token: no TPOT, left out
        timed(5, 0.2, 0.1, 3, arrival=0.5, status="error"),  # not ok: left out
        # Server s2, relative clock: three decoding together, 0.5 / 0.6 / 0.7 -> 2.5 / 2.6 / 2.7.
        *({**relative(timed(6 + k, 0.5, 1.0, 3, arrival=0.1 * k)), "server": "s2"}
          for k in range(3)),
    ]  # fmt: skip


def test_report_decode_batch(tmp_path):
    con = _con(tmp_path, _decode_batch_records())
    rows = _rows(con, "report_decode_batch", bin_s=1.0)
    # s1 started - finished per bin: bin 0 +2, bin 1 -1, bin 2 +1 -1, bin 3 +1 -1, bin 5 -1, so
    # decoding at the end of bins 0, 1, 2, 3 = 2, 1, 1, 1. Requests 0 and 1 start in bin 0 ->
    # batch 2 (bucket floor(2 log2 2) = 2, batch_lo 2); 2 and 3 start in bins 2, 3 -> batch 1
    # (each finished within its bin, so only request 0 is still counted). s2: 3 in bin 0 ->
    # batch 3, bucket floor(2 log2 3) = 3, batch_lo 2^1.5.
    keys = ("model", "gpu", "gpu_count", "weight_dtype", "kv_dtype", "requests")
    assert [tuple(r[k] for k in keys) for r in rows] == [
        ("m", "g", 1, "bf16", "bf16", 2),
        ("m", "g", 1, "bf16", "bf16", 2),
        ("m", "g", 1, "bf16", "bf16", 3),
    ]
    # context = prompt + output / 2: (1001.5 + 1001) / 2; (1005.5 + 2001.5) / 2; 1001.5.
    # TPOT p50 / p90 by linear interpolation: (0.1, 0.25) -> 0.175, 0.1 + 0.9 x 0.15 = 0.235;
    # (0.4, 0.5) -> 0.45, 0.49; (1, 1, 1) -> 1, 1.
    want = [
        (1.0, 1.0, 1001.25, 0.175, 0.235),
        (2.0, 2.0, 1503.5, 0.45, 0.49),
        (2**1.5, 3.0, 1001.5, 1.0, 1.0),
    ]
    for r, w in zip(rows, want, strict=True):
        got = (r["batch_lo"], r["batch_mean"], r["context_mean"], r["tpot_p50"], r["tpot_p90"])
        assert got == pytest.approx(w, abs=EPS)
    # 10 s bins: every request starts and finishes within its domain's first bin (T0 is a
    # multiple of 10), so none counts as decoding and all fall back to batch 1.
    # itl_p50: each request's median gap (equal gaps here: its TPOT), median over the bucket.
    # Request 3 has one gap only (2 tokens), so batch 1 holds request 2's 0.25 alone; batch 2:
    # (0.5, 0.4) -> 0.45; s2: 1.0.
    assert [r["itl_p50"] for r in rows] == pytest.approx([0.25, 0.45, 1.0], abs=EPS)
    rows = _rows(con, "report_decode_batch", bin_s=10)
    assert [(r["batch_lo"], r["requests"], r["batch_mean"]) for r in rows] == [(1.0, 7, 1.0)]


def test_report_decode_batch_empty(tmp_path):
    assert _empty(tmp_path, "report_decode_batch") == []


# ------------------------------------------------------------------ attribution_separable
def test_attribution_separable(tmp_path):
    recs = [
        timed(0, 0.1, 0.01, 2),  # m/g: everything known
        timed(1, 0.1, 0.01, 2),
        timed(2, 0.1, 0.01, 2, status="error"),  # not ok: left out
        timed(3, 0.1, 0.01, 2, model=None),  # no model: no cost model
        timed(4, 0.1, 0.01, 2, model="m2"),
        queued(timed(5, 0.1, 0.01, 2, model="m2"), None),  # one without a scheduled time
        timed(6, 0.1, 0.01, 2, model="m3", gpu=None),
        queued(timed(7, 0.1, 0.01, 2, model="m3", gpu=None), None),  # no gpu, queue partial
    ]
    rows = _rows(_con(tmp_path, recs), "attribution_separable")
    decode_all = "weights | KV | compute | overheads | interference"
    decode_none = "not separable (no output tokens or no cost model)"
    # (model, gpu, requests, with_queue, ttft_split, decode_split, comparison_factors); TTFT,
    # decode time, prompt and output tokens are present on every row.
    assert [
        (r["model"], r["gpu"], r["requests"], r["with_queue"], r["ttft_split"],
         r["decode_split"], r["comparison_factors"])
        for r in rows
    ] == [
        ("?", "g", 1, 1, "queue | prefill+rest (no cost model)", decode_none,
         "none (cannot simulate): missing model "),
        ("m", "g", 2, 2, "queue | prefill compute | rest", decode_all, "all factors"),
        ("m2", "g", 2, 1, "prefill compute | queue+rest (no scheduled time)", decode_all,
         "all factors"),
        ("m3", "?", 2, 1, "queue+prefill+rest (not separable)", decode_none,
         "none (cannot simulate): missing gpu"),
    ]  # fmt: skip
    for r in rows:
        assert r["source_format"] == "native"
        counts = ("with_ttft", "with_decode", "with_prompt_tokens", "with_output_tokens")
        assert all(r[c] == r["requests"] for c in counts)


def test_attribution_separable_empty(tmp_path):
    assert _empty(tmp_path, "attribution_separable") == []


# ------------------------------------------------------------------ attribution_per_request
SMALL = {"prompt_median": 300.0, "prompt_sigma": 0.6, "output_median": 80.0,
         "output_sigma": 0.6, "max_output": 400}  # fmt: skip
KEYS = ("model", "gpu", "gpu_count")


def _expected_per_request(req: pl.DataFrame) -> list[dict]:
    """attribution_per_request's rows computed from the attribution_requests rows directly: the
    TTFT means over the requests with a TTFT, the decode means over those with a decode time and
    at least one step, a part not separated counted as 0 (its time is in the residual)."""
    c = pl.col
    base = req.with_columns(
        c("model").fill_null("?"), c("gpu").fill_null("?"), c("gpu_count").fill_null(1)
    )
    counts = base.group_by(KEYS).agg(
        requests=pl.len(), fitted=c("fitted").cast(pl.Int64).sum(), with_ttft=c("ttft_s").count()
    )
    ttft = (
        base.filter(c("ttft_s").is_not_null())
        .group_by(KEYS)
        .agg(
            with_queue=c("ttft_queue_s").count(),
            with_prefill_compute=c("ttft_prefill_compute_s").count(),
            ttft_mean=c("ttft_s").mean(),
            ttft_queue_mean=c("ttft_queue_s").fill_null(0.0).mean(),
            ttft_prefill_compute_mean=c("ttft_prefill_compute_s").fill_null(0.0).mean(),
            ttft_rest_mean=c("ttft_rest_s").mean(),
            queue_share=c("ttft_queue_s").fill_null(0.0).sum() / c("ttft_s").sum(),
        )
    )
    parts = {
        "decode_weights_mean": "decode_weights_s",
        "decode_kv_mean": "decode_kv_s",
        "decode_compute_mean": "decode_compute_s",
        "decode_overhead_mean": "decode_overhead_s",
        "decode_interference_mean": "decode_interference_s",
    }
    dec = (
        base.filter(c("decode_steps").is_not_null() & c("decode_s").is_not_null())
        .group_by(KEYS)
        .agg(
            with_decode=pl.len(),
            with_decode_parts=c("decode_weights_s").count(),
            decode_mean=c("decode_s").mean(),
            **{k: c(v).fill_null(0.0).mean() for k, v in parts.items()},
            decode_not_separated_mean=(
                pl.when(c("decode_weights_s").is_null()).then(c("decode_s")).otherwise(0.0)
            ).mean(),
        )
    )
    out = counts.join(ttft, on=KEYS, how="left").join(dec, on=KEYS, how="left")
    out = out.with_columns(
        [c(k).fill_null(0) for k in ("with_queue", "with_prefill_compute")]
        + [c(k).fill_null(0) for k in ("with_decode", "with_decode_parts")]
    )
    return out.sort(KEYS).to_dicts()


def test_attribution_per_request(tmp_path):
    from pipeline import attribution
    from pipeline.attribution.per_request import DECODE_PARTS, TTFT_PARTS
    from pipeline.sim.generator import GenerateSpec, generate

    layout = Layout(tmp_path / "wh")
    paths = []
    specs = [
        GenerateSpec(requests=200, seed=41, rate=3.0, workload=SMALL),
        GenerateSpec(gpu="A100-80GB", requests=150, seed=42, rate=2.0, workload=SMALL),
    ]
    for i, spec in enumerate(specs):
        generate(spec, tmp_path / f"g{i}.jsonl")
        paths.append(tmp_path / f"g{i}.jsonl")
    # A model no cost model is fitted for ('m'): prefill compute and decode parts unknown (in the
    # rests); one request without a scheduled time (queue in the rest), one with a single token
    # (no decode step), one error (not attributed).
    recs = [
        queued(timed(0, 0.3, 0.02, 5), 0.1),
        queued(timed(1, 0.5, 0.03, 4), None),
        timed(2, 0.2, 0.0, 1),
        timed(3, 0.2, 0.01, 3, status="error"),
    ]
    paths.append(write_jsonl(tmp_path / "native.jsonl", recs))
    ingest_paths(paths, layout)
    con = connect(layout)
    with pytest.raises(QueryError, match="run `pipeline attribute` first"):
        run_named(con, load_query("attribution_per_request", REPO / "queries"))

    attribution.attribute(layout)  # what `pipeline attribute` does: writes attribution_requests
    req = pl.read_parquet(layout.root / "attribution_requests" / "*.parquet")
    assert req.height == 200 + 150 + 3
    want = _expected_per_request(req)
    got = _rows(connect(layout), "attribution_per_request")
    assert [tuple(r[k] for k in KEYS) for r in got] == [tuple(w[k] for k in KEYS) for w in want]
    assert len(got) == 3 and "m" in {r["model"] for r in got}
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w)
        for k, v in w.items():
            if isinstance(v, float):
                assert g[k] == pytest.approx(v, rel=1e-9, abs=1e-12), (g["model"], g["gpu"], k)
            else:
                assert g[k] == v, (g["model"], g["gpu"], k)
        # The part means add up to the total means (means over the same requests).
        ttft = sum(g[f"{p.removesuffix('_s')}_mean"] for p in TTFT_PARTS)
        assert abs(ttft - g["ttft_mean"]) <= 1e-9
        dec = sum(g[f"{p.removesuffix('_s')}_mean"] for p in DECODE_PARTS)
        assert abs(dec + g["decode_not_separated_mean"] - g["decode_mean"]) <= 1e-9
    by_model = {r["model"]: r for r in got}
    m = by_model["m"]
    # The unfitted model: 3 ok requests, 2 with a queue, none with prefill compute; decode time
    # for the 2 with more than one token, none of it separated.
    assert (m["requests"], m["fitted"], m["with_queue"], m["with_prefill_compute"]) == (3, 0, 2, 0)
    assert (m["with_decode"], m["with_decode_parts"]) == (2, 0)
    assert m["decode_not_separated_mean"] == pytest.approx(m["decode_mean"], abs=1e-12)
    # queue (0.1 + 0 + 0) / 3 over TTFT (0.3 + 0.5 + 0.2) / 3 = 0.1.
    assert m["queue_share"] == pytest.approx(0.1, abs=EPS)
    for r in got:
        if r["model"] != "m":
            assert r["fitted"] == r["requests"] == r["with_queue"] == r["with_prefill_compute"]
            assert r["with_decode_parts"] == r["with_decode"] > 0
            assert r["decode_weights_mean"] > 0 and r["decode_not_separated_mean"] == 0


def test_attribution_per_request_empty(tmp_path):
    from pipeline.attribution import write_empty_if_absent

    write_empty_if_absent(Layout(tmp_path / "wh"))
    assert _empty(tmp_path, "attribution_per_request") == []


def test_report_decode_batch_never_merges_runs_that_share_a_server(tmp_path):
    # Two runs on server "sim-0" at the same unix times (as the twelve sample runs are, all
    # starting 2026-01-01 00:00): each has three requests decoding together, so each sees
    # batch 3, not 6 (before, unix-clock runs sharing a server name were one batch).
    recs = [
        {**timed(10 * run + k, 0.5, 1.0, 3, arrival=0.1 * k), "server": "sim-0",
         "run_id": f"run{run}"}
        for run in (0, 1)
        for k in range(3)
    ]  # fmt: skip
    rows = _rows(_con(tmp_path, recs), "report_decode_batch", bin_s=1.0)
    assert [(r["batch_mean"], r["requests"]) for r in rows] == [(3.0, 6)]


def test_report_distributions_quantiles(tmp_path):
    import numpy as np

    ttfts = [0.1, 0.2, 0.3, 0.4, 1.0]
    recs = [timed(i, t, 0.01, 3, prompt=100 * (i + 1)) for i, t in enumerate(ttfts)]
    rows = {r["metric"]: r for r in _rows(_con(tmp_path, recs), "report_distributions")}
    assert set(rows) >= {"ttft", "tpot", "e2e", "prompt_tokens", "output_tokens"}
    from pipeline.report.sections.distributions import PS

    got = [rows["ttft"][f"q{i:02d}"] for i in range(len(PS))]
    want = np.percentile(ttfts, [100 * p for p in PS])  # linear interpolation, as metrics.md
    assert got == pytest.approx(want, abs=EPS)
    assert rows["prompt_tokens"]["q06"] == pytest.approx(300.0)  # the median prompt
    assert rows["ttft"]["n"] == 5


def test_report_distributions_per_run_for_a_handful_of_runs(tmp_path):
    import numpy as np

    # Two runs of one deployment: its curve over both, and one per run.
    recs = [
        {**timed(10 * run + i, t, 0.01, 3), "run_id": f"run{run}"}
        for run, ttfts in ((0, [0.1, 0.2, 0.3]), (1, [1.0, 2.0, 3.0]))
        for i, t in enumerate(ttfts)
    ]
    rows = [r for r in _rows(_con(tmp_path, recs), "report_distributions") if r["metric"] == "ttft"]
    by = {r["run"]: r for r in rows}
    assert sorted(by) == ["", "run0", "run1"] and [by[k]["n"] for k in ("", "run0", "run1")] == [
        6,
        3,
        3,
    ]
    assert by["run1"]["q06"] == pytest.approx(2.0) and by["run0"]["q06"] == pytest.approx(0.2)
    assert by[""]["q06"] == pytest.approx(np.median([0.1, 0.2, 0.3, 1.0, 2.0, 3.0]))
    # Seven runs are more than a handful: the deployment's curve only.
    recs = [{**timed(k, 0.1 * (k + 1), 0.01, 3), "run_id": f"r{k}"} for k in range(7)]
    rows = [
        r
        for r in _rows(_con(tmp_path / "b", recs), "report_distributions")
        if r["metric"] == "ttft"
    ]
    assert [(r["run"], r["n"]) for r in rows] == [("", 7)]

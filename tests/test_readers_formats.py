"""Unit tests per reader on small inline fixtures, incl. bad input and synthetic parity.

Synthetic detailed vLLM / SGLang files are built here with the tools' own summary arithmetic
(vLLM ``calculate_metrics``: TPOT over successful requests with > 1 output token, ITL pooled,
``np.percentile`` linear), so parity of our canonical rows with the tool's summary is exact.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline.files.sources import read_head
from pipeline.readers import registry
from pipeline.readers.base import InputError, ReadContext
from pipeline.readers.mapping import MappingError, reader_for_mapping

TABLES = ("requests", "quarantine", "arrivals", "run_summaries", "runs")
REPO = Path(__file__).resolve().parents[1]


def read_with(name: str, path: Path) -> dict[str, pl.DataFrame]:
    reader = registry.by_name(name)
    out: dict[str, list[pl.DataFrame]] = {t: [] for t in TABLES}
    for batch in reader.read(ReadContext(path=path, default_run_id="run")):
        for t in TABLES:
            f = getattr(batch, t)
            if f is not None:
                out[t].append(f)
    return {t: pl.concat(v) if v else pl.DataFrame() for t, v in out.items()}


def detected(path: Path) -> str | None:
    r = registry.detect(path, read_head(path))
    return r.name if r else None


# ---------------------------------------------------------------- vLLM / SGLang detailed


def bench_result(n: int = 60, seed: int = 0, start_times: bool = True) -> dict:
    rng = np.random.default_rng(seed)
    out_lens = rng.integers(1, 40, n)
    itls, ttfts, lats, errors = [], [], [], []
    for i in range(n):
        if i in (5, 17):  # failures: vLLM writes ttft 0, no itls, output_len 0
            itls.append([])
            ttfts.append(0.0)
            lats.append(0.0)
            errors.append("HTTP 500: engine dead")
            out_lens[i] = 0
            continue
        k = int(out_lens[i]) - 1
        if i % 7 == 0 and k > 2:  # multi-token chunks: fewer gaps than tokens
            k //= 2
        gaps = rng.uniform(0.01, 0.05, k).tolist()
        ttft = float(rng.uniform(0.05, 0.5))
        itls.append(gaps)
        ttfts.append(ttft)
        lats.append(ttft + sum(gaps))
        errors.append("")
    starts = np.cumsum(rng.exponential(0.1, n)) + 1000.0
    ok = [i for i in range(n) if not errors[i]]
    tp = [(lats[i] - ttfts[i]) / (out_lens[i] - 1) for i in ok if out_lens[i] > 1]
    it = [g for i in ok for g in itls[i]]
    tt = [ttfts[i] for i in ok]
    e2 = [lats[i] for i in ok]
    duration = float(max(starts[i] + lats[i] for i in ok) - starts.min())
    res: dict = {
        "date": "20250601-120000",
        "backend": "vllm",
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": n,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 8,
        "gpu": "H100",
        "duration": duration,
        "completed": len(ok),
        "total_input_tokens": 0,
        "total_output_tokens": int(out_lens.sum()),
        "request_throughput": len(ok) / duration,
        "request_goodput:": None,
        "output_throughput": int(out_lens.sum()) / duration,
        "input_lens": rng.integers(10, 500, n).tolist(),
        "output_lens": out_lens.tolist(),
        "ttfts": ttfts,
        "itls": itls,
        "errors": errors,
        "generated_texts": ["x"] * n,
    }
    if start_times:
        res["start_times"] = starts.tolist()
        res["latencies"] = lats
    for m, v in (("ttft", tt), ("tpot", tp), ("itl", it), ("e2el", e2)):
        res[f"mean_{m}_ms"] = float(np.mean(v) * 1000)
        res[f"median_{m}_ms"] = float(np.median(v) * 1000)
        res[f"std_{m}_ms"] = float(np.std(v) * 1000)
        res[f"p99_{m}_ms"] = float(np.percentile(v, 99) * 1000)
    return res


def canonical_metrics(r: pl.DataFrame) -> dict[str, np.ndarray]:
    ok = r.filter(pl.col("status") == "ok")
    out = ok["output_tokens"].to_numpy()
    decode = (ok["finish_ts"] - ok["first_token_ts"]).to_numpy()
    return {
        "ttft": (ok["first_token_ts"] - ok["arrival_ts"]).to_numpy(),
        "e2el": (ok["finish_ts"] - ok["arrival_ts"]).to_numpy(),
        "tpot": decode[out > 1] / (out[out > 1] - 1),
        "itl": np.concatenate([np.diff(t) for t in ok["token_times"].to_list()]),
    }


def assert_parity(r: pl.DataFrame, summary: dict[str, float]) -> None:
    m = canonical_metrics(r)
    for name, v in m.items():
        for stat, f in (("mean", np.mean), ("median", np.median)):
            assert f(v) * 1000 == pytest.approx(summary[f"{stat}_{name}_ms"], rel=1e-3)
        assert np.percentile(v, 99) * 1000 == pytest.approx(summary[f"p99_{name}_ms"], rel=1e-3)


def test_vllm_detailed_parity_and_shape(tmp_path: Path) -> None:
    res = bench_result()
    p = tmp_path / "vllm-infqps-Llama-3.1-8B.json"
    p.write_text(json.dumps(res))
    assert detected(p) == "vllm_bench"
    f = read_with("vllm_bench", p)
    r = f["requests"]
    assert r.height == 60 and f["quarantine"].height == 0
    assert (r["clock"] == "relative").all()
    assert r.filter(pl.col("status") == "error")["error"].to_list() == ["HTTP 500: engine dead"] * 2
    assert r["request_id"][0] == "0" and r["source_line"][0] == 1
    assert_parity(r, res)
    # throughput over the window [first arrival, last finish] equals the tool's figure
    ok = r.filter(pl.col("status") == "ok")
    window = ok["finish_ts"].max() - r["arrival_ts"].min()
    assert r["output_tokens"].sum() / window == pytest.approx(res["output_throughput"], rel=1e-3)
    assert ok.height / window == pytest.approx(res["request_throughput"], rel=1e-3)
    # token_counts: 1 each exactly where chunks == output tokens, else null
    per_token = ok.filter(pl.col("token_times").list.len() == pl.col("output_tokens"))
    assert per_token["token_counts"].null_count() == 0
    assert ok.height - per_token.height == ok["token_counts"].null_count()
    run = f["runs"].row(0, named=True)
    assert run["request_rate"] == float("inf") and run["max_concurrency"] == 8
    assert json.loads(run["metadata_json"])["gpu"] == "H100"
    metrics = set(f["run_summaries"]["metric"])
    assert "p99_itl_ms" in metrics and "request_goodput:" not in metrics  # null value dropped


def test_vllm_append_result_and_old_layout(tmp_path: Path) -> None:
    a, b = bench_result(10, 1, start_times=False), bench_result(12, 2, start_times=False)
    p = tmp_path / "append.json"
    p.write_text(json.dumps(a) + "\n" + json.dumps(b) + "\n")
    f = read_with("vllm_bench", p)
    assert f["requests"].height == 22 and f["runs"]["run_id"].to_list() == ["run#1", "run#2"]
    assert (f["requests"]["arrival_ts"] == 0.0).all()  # no start_times: all at t=0
    assert_parity(f["requests"].filter(pl.col("run_id") == "run#2"), b)


def test_vllm_bad_entries_are_quarantined(tmp_path: Path) -> None:
    res = bench_result(10, 3)
    res["ttfts"][2] = "fast"
    res["output_lens"][3] = 2.5
    res["itls"][4] = "oops"
    res["input_lens"] = res["input_lens"][:9]  # dropped entry
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(res))
    f = read_with("vllm_bench", p)
    q = f["quarantine"]
    assert sorted(q["line"].to_list()) == [3, 4, 5, 10]
    assert f["requests"].height + q.height == 10
    assert "ttfts" in q.filter(pl.col("line") == 3)["reason"][0]


def test_vllm_truncated_file(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(bench_result(5))[:300])
    with pytest.raises(InputError):
        list(registry.by_name("vllm_bench").read(ReadContext(p, "x")))


def test_sglang_output_details_parity(tmp_path: Path) -> None:
    res = bench_result(40, 4, start_times=False)
    for k in ("date", "model_id", "tokenizer_id"):
        res.pop(k)
    res.update(backend="sglang", dataset_name="random", request_rate=float("inf"))
    p = tmp_path / "sglang_0601_40_random.jsonl"
    p.write_text(json.dumps(res) + "\n")  # json.dumps writes bare Infinity
    assert "Infinity" in p.read_text()
    assert detected(p) == "sglang_bench"
    f = read_with("sglang_bench", p)
    assert f["requests"].height == 40 and f["runs"]["request_rate"][0] == float("inf")
    assert (f["requests"]["engine"] == "sglang").all()
    assert_parity(f["requests"], res)


# ---------------------------------------------------------------- OTLP / vLLM stats / TGI


def span(i: int, **attrs: object) -> dict:
    def val(v: object) -> dict:
        if isinstance(v, str):
            return {"stringValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        return {"doubleValue": v}

    base = {
        "gen_ai.request.id": f"cmpl-{i}",
        "gen_ai.response.model": "llama",
        "gen_ai.usage.prompt_tokens": 14,
        "gen_ai.usage.completion_tokens": 20,
        "gen_ai.latency.time_to_first_token": 0.1155,
        "gen_ai.latency.e2e": 0.25,
        "gen_ai.latency.time_in_queue": 0.01,
        "gen_ai.latency.time_in_model_prefill": 0.09,
    }
    base.update(attrs)
    start = 1790341371953418752 + i * 10**9
    return {
        "traceId": "5B8EFFF798038103D269B633813FC60C",
        "spanId": f"{i:016x}",
        "name": "llm_request",
        "kind": 2,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 254922392),
        "attributes": [{"key": k, "value": val(v)} for k, v in base.items() if v is not None],
    }


def otlp(spans: list[dict]) -> dict:
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]
                },
                "scopeSpans": [{"scope": {"name": "vllm.llm_engine"}, "spans": spans}],
            }
        ]
    }


def test_otlp_llm_spans(tmp_path: Path) -> None:
    child = {"name": "tokenize", "spanId": "ff", "startTimeUnixNano": "1", "attributes": []}
    bad = span(3, **{"gen_ai.usage.prompt_tokens": "many"})
    p = tmp_path / "spans.json"
    p.write_text(json.dumps(otlp([span(0), span(1), child, bad])))
    assert detected(p) == "otlp_llm_spans"
    f = read_with("otlp_llm_spans", p)
    r = f["requests"]
    assert r["request_id"].to_list() == ["cmpl-0", "cmpl-1"]
    row = r.row(0, named=True)
    assert row["clock"] == "unix" and row["engine"] == "vllm" and row["model"] == "llama"
    assert row["arrival_ts"] == pytest.approx(1790341371.953418752)
    assert row["first_token_ts"] - row["arrival_ts"] == pytest.approx(0.1155, abs=1e-6)
    assert row["first_token_ts"] - row["scheduled_ts"] == pytest.approx(0.09, abs=1e-6)
    assert row["finish_ts"] - row["arrival_ts"] == pytest.approx(0.25, abs=1e-6)
    assert f["quarantine"]["line"].to_list() == [4]  # the tokenize child span is skipped
    # one payload per line (collector file exporter)
    p2 = tmp_path / "spans.jsonl"
    p2.write_text(json.dumps(otlp([span(0)])) + "\n" + json.dumps(otlp([span(1)])) + "\n")
    assert read_with("otlp_llm_spans", p2)["requests"].height == 2


def test_otlp_lines_streamed_in_batches(tmp_path: Path) -> None:
    """One payload per line is read in line batches: same rows at any batch size, a bad line
    quarantined with its number and the lines after it still read."""
    lines = [json.dumps(otlp([span(2 * k), span(2 * k + 1)])) for k in range(5)]
    lines.insert(2, '{"resourceSpans": [')
    p = tmp_path / "spans.jsonl"
    p.write_text("\n".join(lines) + "\n")
    reader = registry.by_name("otlp_llm_spans")
    outs = {}
    for rows in (1, 3, 200_000):
        got = list(reader.read(ReadContext(path=p, default_run_id="run", batch_rows=rows)))
        req = pl.concat([b.requests for b in got if b.requests is not None])
        q = pl.concat([b.quarantine for b in got if b.quarantine is not None])
        outs[rows] = req
        assert req["request_id"].to_list() == [f"cmpl-{i}" for i in range(10)]
        assert req["source_line"].to_list() == list(range(1, 11))  # span index in the file
        assert q["line"].to_list() == [3]
        assert q["reason"][0].startswith("invalid or truncated JSON")
    assert outs[1].equals(outs[200_000]) and outs[3].equals(outs[200_000])
    p.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")  # with a BOM
    assert read_with("otlp_llm_spans", p)["requests"].equals(outs[200_000])


def test_vllm_request_stats_clocks(tmp_path: Path) -> None:
    rows = [
        # V1 with first_token_latency: anchored at the first token
        {"request_id": "a", "arrival_time": 1700000000.0, "queued_ts": 50.0, "scheduled_ts": 50.2,
         "first_token_ts": 50.5, "last_token_ts": 52.5, "first_token_latency": 0.6,
         "num_prompt_tokens": 100, "num_generation_tokens": 21},
        # V1 without: queued ≡ arrival
        {"request_id": "b", "arrival_time": 1700000001.0, "queued_ts": 51.0, "scheduled_ts": 51.1,
         "first_token_ts": 51.3, "last_token_ts": 52.0, "num_prompt_tokens": 10,
         "num_generation_tokens": 8},
        # V0: everything epoch
        {"request_id": "c", "arrival_time": 1700000002.0, "first_scheduled_time": 1700000002.1,
         "first_token_time": 1700000002.4, "last_token_time": 1700000003.0, "prompt_tokens": 5,
         "output_tokens": 4},
        {"request_id": "d", "arrival_time": 1700000003.0, "queued_ts": 53.0,
         "num_prompt_tokens": -1, "num_generation_tokens": 1},
    ]  # fmt: skip
    p = tmp_path / "stats.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert detected(p) == "vllm_request_stats"
    f = read_with("vllm_request_stats", p)
    r = {row["request_id"]: row for row in f["requests"].iter_rows(named=True)}
    a, b, c = r["a"], r["b"], r["c"]
    assert a["first_token_ts"] - a["arrival_ts"] == pytest.approx(0.6)
    assert a["first_token_ts"] - a["scheduled_ts"] == pytest.approx(0.3)
    assert a["finish_ts"] - a["first_token_ts"] == pytest.approx(2.0)
    assert b["scheduled_ts"] - b["arrival_ts"] == pytest.approx(0.1)
    assert b["first_token_ts"] - b["arrival_ts"] == pytest.approx(0.3)
    assert c["first_token_ts"] == pytest.approx(1700000002.4)
    assert f["quarantine"]["line"].to_list() == [4]


TGI_TEXT = (
    "2024-02-14T06:49:51.437631Z  INFO generate{parameters=GenerateParameters { best_of: None, "
    'max_new_tokens: Some(14) } total_time="611.286748ms" validation_time="754.5µs" '
    'queue_time="127.337µs" inference_time="610.405028ms" time_per_token="43.600359ms" '
    'seed="None"}: text_generation_router::server: router/src/server.rs:299: Success\n'
)


def test_tgi_text_and_json(tmp_path: Path) -> None:
    js = {
        "timestamp": "2024-03-09T05:09:19.961136Z",
        "level": "INFO",
        "message": "Success",
        "target": "text_generation_router::server",
        "span": {"total_time": "1.2s", "validation_time": "681.374µs", "queue_time": "1ms",
                 "inference_time": "1.1s", "time_per_token": "100ms", "name": "generate"},
    }  # fmt: skip
    startup = '{"timestamp":"2024-03-09T05:08:19.961136Z","level":"INFO","message":"Setting max batch total tokens to 133696","target":"text_generation_router"}'  # noqa: E501
    p = tmp_path / "tgi.log"
    p.write_text(
        TGI_TEXT
        + startup
        + "\n"
        + json.dumps(js)
        + "\n"
        + TGI_TEXT.replace("611.286748ms", "6.1 parsecs")
    )
    assert detected(p) == "tgi_router_log"
    f = read_with("tgi_router_log", p)
    r = f["requests"]
    assert r["output_tokens"].to_list() == [14, 11]
    first = r.row(0, named=True)
    assert first["finish_ts"] - first["arrival_ts"] == pytest.approx(0.611286748, abs=1e-6)
    assert first["scheduled_ts"] - first["arrival_ts"] == pytest.approx(
        0.0007545 + 0.000127337, abs=1e-6
    )
    assert first["prompt_tokens"] is None and first["first_token_ts"] is None
    assert f["quarantine"]["line"].to_list() == [4]


# ---------------------------------------------------------------- other per-request formats


def test_genai_perf(tmp_path: Path) -> None:
    t0 = 1745526100322752068
    doc = {
        "experiments": [
            {
                "experiment": {"mode": "concurrency", "value": 4},
                "requests": [
                    {"timestamp": t0, "response_timestamps": [t0 + 10**8, t0 + 2 * 10**8],
                     "response_outputs": [{"response": "data: {}\n\n"}, {"response": "data: {}\n\n"}]},  # noqa: E501
                    {"timestamp": "soon", "response_timestamps": [1]},
                ],
            }
        ],
        "service_kind": "openai",
    }  # fmt: skip
    p = tmp_path / "profile_export.json"
    p.write_text(json.dumps(doc))
    assert detected(p) == "genai_perf"
    f = read_with("genai_perf", p)
    assert f["requests"]["token_times"].to_list() == [[0.1, 0.2]]
    assert f["runs"]["max_concurrency"].to_list() == [4]
    assert f["quarantine"]["line"].to_list() == [2]


def test_llmperf_errors_and_wrong_types(tmp_path: Path) -> None:
    rec = {"error_code": None, "error_msg": "", "ttft_s": 0.3, "end_to_end_latency_s": 2.5,
           "inter_token_latency_s": 0.016, "number_input_tokens": 550, "number_output_tokens": 151,
           "request_output_throughput_token_per_s": 60.0}  # fmt: skip
    bad = {**rec, "number_output_tokens": "lots"}
    err = {**rec, "error_code": 500, "error_msg": "boom"}
    p = tmp_path / "x_individual_responses.json"
    p.write_text(json.dumps([rec, bad, err, 7]))
    f = read_with("llmperf", p)
    assert f["requests"]["status"].to_list() == ["ok", "error"]
    assert f["requests"]["error"][1] == "error_code 500: boom"
    assert f["quarantine"]["line"].to_list() == [2, 4]


def test_aiperf_inline(tmp_path: Path) -> None:
    ok = {
        "metadata": {
            "x_request_id": "r1",
            "timestamp_ns": 1759522419154829652,
            "credit_phase": "profiling",
        },
        "metrics": {
            "ttft": {"value": 100.0, "unit": "ms"},
            "request_latency": {"value": 160.0, "unit": "ms"},
            "inter_chunk_latency": {"value": [20.0, 40.0], "unit": "ms"},
            "input_sequence_length": {"value": 10, "unit": "tokens"},
            "output_sequence_length": {"value": 3, "unit": "tokens"},
        },
        "error": None,
    }
    warm = {**ok, "metadata": {**ok["metadata"], "credit_phase": "warmup"}}
    swapped = json.loads(json.dumps(ok))
    swapped["metrics"]["ttft"] = {"value": 100.0, "unit": "fortnights"}
    lines = [json.dumps(ok), json.dumps(warm), json.dumps(swapped), '{"metadata": {"x_req']
    p = tmp_path / "profile_export.jsonl"
    p.write_text("\n".join(lines) + "\n")  # fmt: skip
    f = read_with("aiperf", p)
    r = f["requests"].row(0, named=True)
    assert r["token_times"] == pytest.approx([0.1, 0.12, 0.16])
    assert r["token_counts"] == [1, 1, 1]
    assert sorted(f["quarantine"]["line"].to_list()) == [3, 4]  # unknown unit; truncated line
    # The warmup record is AIPerf's own exclusion: counted apart, not bad data.
    warm = [b.excluded for b in registry.by_name("aiperf").read(ReadContext(p, "run"))]
    assert [w["line"].to_list() for w in warm if w is not None] == [[2]]


def test_aiperf_typed_decode_matches_field_path(tmp_path: Path, monkeypatch) -> None:
    """The one-parse typed decode of ``metrics`` and the field-by-field path give equal tables."""
    from pipeline.readers import aiperf

    shared = REPO.parent / "shared" / "real_traces"
    files = [
        shared / "aiperf" / "profile_export.jsonl",
        shared / "aiperf_0.13" / "profile_export.jsonl",
    ]
    files = [f for f in files if f.exists()]
    if not files:
        pytest.skip("../shared/real_traces absent")
    for f in files:
        fast = read_with("aiperf", f)
        monkeypatch.setattr(aiperf, "_ODD", r".")  # every batch takes the field path
        slow = read_with("aiperf", f)
        monkeypatch.undo()
        assert fast["requests"].height in (47, 100)
        # JSON-path lookups re-print a number with fewer digits (464.66410099999996 comes back
        # as 464.664101): the paths agree to that rounding, and the typed one reads the file.
        assert_frame_equal(fast["requests"], slow["requests"], check_exact=False, rel_tol=1e-12)
        first = {}
        for t in f.read_text().splitlines():
            o = json.loads(t)
            m = o.get("metrics", {})
            v = m.get("ttft", m.get("time_to_first_token", {})).get("value")
            first[o["metadata"].get("x_request_id")] = v
        r = fast["requests"].filter(pl.col("token_times").is_not_null())
        assert r.height > 30
        for rid, tt in zip(r["request_id"], r["token_times"], strict=True):
            assert tt[0] == first[rid] * 1e-3


def test_aiperf_odd_values_take_the_field_path(tmp_path: Path) -> None:
    """true and null items are quarantined with a reason, not read as 1, 0 or a gap; a number
    written as text ("100") is read as before."""

    def line(i: int, ttft: object, gaps: object) -> str:
        return json.dumps({
            "metadata": {"x_request_id": f"r{i}", "timestamp_ns": 1759522419154829652 + i},
            "metrics": {
                "ttft": {"value": ttft, "unit": "ms"},
                "request_latency": {"value": 160.0, "unit": "ms"},
                "inter_chunk_latency": {"value": gaps, "unit": "ms"},
                "input_sequence_length": {"value": 10, "unit": "tokens"},
                "output_sequence_length": {"value": 3, "unit": "tokens"},
            },
        })  # fmt: skip

    good = line(1, 100.0, [20.0, 40.0])
    for odd, reason in [
        (line(2, True, [20.0, 40.0]), "ttft"),
        (line(2, 100.0, [20.0, None]), "inter_chunk_latency"),
        (line(2, 100.0, "20,40"), "inter_chunk_latency"),
    ]:
        p = tmp_path / "profile_export.jsonl"
        p.write_text(good + "\n" + odd + "\n")
        f = read_with("aiperf", p)
        assert f["requests"]["request_id"].to_list() == ["r1"]
        assert f["requests"]["token_times"][0].to_list() == pytest.approx([0.1, 0.12, 0.16])
        assert f["quarantine"]["line"].to_list() == [2]
        assert f["quarantine"]["reason"][0].startswith(reason)
    p.write_text(good + "\n" + line(2, "100", [20.0, 40.0]) + "\n")
    f = read_with("aiperf", p)
    assert f["requests"]["request_id"].to_list() == ["r1", "r2"]
    assert f["requests"]["token_times"][1].to_list() == pytest.approx([0.1, 0.12, 0.16])


# ---------------------------------------------------------------- arrivals


def test_azure_2024_mixed_timestamps(tmp_path: Path) -> None:
    p = tmp_path / "AzureLLMInferenceTrace_conv_1week.csv.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        fh.write("2024-05-10 00:00:00.009930+00:00,374,44\n")
        fh.write("2024-05-10 00:00:01+00:00,396,109\n")
        fh.write("yesterday,1,1\n")
        fh.write("2024-05-10 00:00:02.5+00:00,10\n")
    assert detected(p) == "azure_llm_trace"
    f = read_with("azure_llm_trace", p)
    assert f["arrivals"]["t_arrival"].to_list() == pytest.approx([0.0, 0.99007])
    assert f["quarantine"]["line"].to_list() == [4, 5]


@pytest.mark.parametrize("eight", [False, True])
def test_burstgpt_layouts(tmp_path: Path, eight: bool) -> None:
    if eight:
        text = ("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,"
                "Total tokens,Log Type\n5,s1,2.5,ChatGPT,472,18,490,Conversation log\n"
                "45,s2,3.0,GPT-4,1087,230,1317,API log\n")  # fmt: skip
    else:
        text = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                "5,ChatGPT,472,18,490,Conversation log\n"
                "45,GPT-4,1087,230,1317,API log\n")  # fmt: skip
    p = tmp_path / "BurstGPT_1.csv"
    p.write_text(text + "x,ChatGPT\n")
    assert detected(p) == "burstgpt"
    f = read_with("burstgpt", p)
    a = f["arrivals"]
    assert a["t_arrival"].to_list() == [0.0, 40.0]
    assert a["prompt_tokens"].to_list() == [472, 1087] and a["output_tokens"].to_list() == [18, 230]
    assert f["quarantine"]["line"].to_list() == [4]


def test_mooncake_bad_hash_ids(tmp_path: Path) -> None:
    p = tmp_path / "trace.jsonl"
    p.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0, 1]}\n'
        '{"timestamp": 1500, "input_length": 10, "output_length": 2, "hash_ids": "0,1"}\n'
        '{"timestamp": 2500, "input_length": 10, "output_length": 2, "hash_ids": []}\n'
    )
    f = read_with("mooncake", p)
    assert f["arrivals"]["t_arrival"].to_list() == [0.0, 2.5]
    assert f["quarantine"]["line"].to_list() == [2]


# ---------------------------------------------------------------- mapping reader


@pytest.mark.parametrize(
    ("stem", "ext", "n"), [("gateway_log", "csv", 4), ("client_trace", "jsonl", 2)]
)
def test_mapping_examples(stem: str, ext: str, n: int) -> None:
    reader = reader_for_mapping(REPO / "examples" / "mappings" / f"{stem}.toml")
    batch = next(reader.read(ReadContext(REPO / "examples" / "mappings" / f"{stem}.{ext}", stem)))
    r = batch.requests
    assert r.height == n and (r["clock"] == "unix").all()
    first = r.row(0, named=True)
    if stem == "gateway_log":
        assert first["first_token_ts"] - first["arrival_ts"] == pytest.approx(0.1805)
        assert r["status"].to_list() == ["ok", "ok", "error", "ok"]
    else:
        assert first["token_times"] == pytest.approx([0.15, 0.35, 0.55, 0.75, 0.95], abs=1e-6)


def test_mapping_errors(tmp_path: Path) -> None:
    m = tmp_path / "m.toml"
    m.write_text('[fields]\narrival_ts = "t"\nprompt_tokens = "p"\nwhatever = "x"\n')
    with pytest.raises(MappingError, match="unknown field"):
        reader_for_mapping(m)
    m.write_text('[time]\nunit = "fortnights"\n[fields]\narrival_ts = "t"\n')
    with pytest.raises(MappingError):
        reader_for_mapping(m)
    m.write_text('[fields]\narrival_ts = "t"\nprompt_tokens = "p"\noutput_tokens = "o"\n')
    data = tmp_path / "d.csv"
    data.write_text("t,p,o\n1.5,10,2\nnope,10,2\n")
    batch = next(reader_for_mapping(m).read(ReadContext(data, "d")))
    assert batch.requests.height == 1 and batch.quarantine["line"].to_list() == [3]


def test_mapping_parquet(tmp_path: Path) -> None:
    data = tmp_path / "d.parquet"
    pl.DataFrame({"id": ["a"], "t_us": [1_700_000_000_000_000], "p": [3], "o": [2]}).write_parquet(
        data
    )
    m = tmp_path / "m.toml"
    m.write_text('[time]\nunit = "us"\n[fields]\nrequest_id = "id"\narrival_ts = "t_us"\n'
                 'prompt_tokens = "p"\noutput_tokens = "o"\n')  # fmt: skip
    batch = next(reader_for_mapping(m).read(ReadContext(data, "d")))
    assert batch.requests["arrival_ts"][0] == pytest.approx(1_700_000_000.0)


def test_mapping_reader_is_never_sniffed(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text("a,b\n1,2\n")
    assert not registry.by_name("mapping").sniff(p, read_head(p))


def test_mapping_to_arrivals(tmp_path: Path) -> None:
    """A user's mapping with target = "arrivals" runs through the reader the shipped BurstGPT /
    Splitwise / Mooncake / Azure definitions use: relative milliseconds rebased to the first
    arrival, a ragged line and a fractional count quarantined with their line numbers."""
    m = tmp_path / "m.toml"
    m.write_text('target = "arrivals"\nformat = "csv"\n[time]\nunit = "ms"\n[fields]\n'
                 'arrival_ts = "t_ms"\nprompt_tokens = "in"\noutput_tokens = "out"\n')  # fmt: skip
    data = tmp_path / "d.csv"
    data.write_text("t_ms,in,out\n1000,10,2\n2500,12,3\n3000,12\n4000,1.5,3\n")
    f = {"arrivals": [], "quarantine": []}
    for batch in reader_for_mapping(m).read(ReadContext(data, "d")):
        for t in f:
            if getattr(batch, t) is not None:
                f[t].append(getattr(batch, t))
    a, q = pl.concat(f["arrivals"]), pl.concat(f["quarantine"])
    assert a["t_arrival"].to_list() == [0.0, 1.5] and a["prompt_tokens"].to_list() == [10, 12]
    assert (
        a["request_id"].to_list() == ["1", "2"] and a["source_format"].to_list() == ["mapping"] * 2
    )
    assert dict(zip(q["line"], q["reason"], strict=True)) == {
        4: "expected 3 fields; out is not a whole number >= 0",
        5: "in is not a whole number >= 0",
    }
    m.write_text('target = "arrivals"\nformat = "parquet"\n[fields]\narrival_ts = "t"\n')
    with pytest.raises(MappingError, match='format = "csv" or "jsonl"'):
        reader_for_mapping(m)
    m.write_text('target = "arrivals"\nformat = "csv"\n[fields]\narrival_ts = "t"\n')
    with pytest.raises(MappingError, match="must map prompt_tokens, output_tokens"):
        reader_for_mapping(m)


def test_mapping_to_arrivals_input_columns_cannot_shadow_internal_ones(tmp_path: Path) -> None:
    """Input columns named like the reader's working columns (h, t, p, o) are read as mapped: a
    hash list that is not one is quarantined, not ingested as null."""
    m = tmp_path / "m.toml"
    m.write_text('target = "arrivals"\nformat = "jsonl"\n[time]\nunit = "ms"\n[fields]\n'
                 'arrival_ts = "t"\nprompt_tokens = "p"\noutput_tokens = "o"\n'
                 'prefix_hash_ids = "h"\n')  # fmt: skip
    data = tmp_path / "d.jsonl"
    data.write_text('{"t": 0, "p": 5, "o": 2, "h": [1, 2]}\n{"t": 9, "p": 5, "o": 2, "h": [3]}\n'
                    '{"t": 20, "p": 5, "o": 2, "h": "oops"}\n')  # fmt: skip
    (batch,) = list(reader_for_mapping(m).read(ReadContext(data, "d")))
    assert batch.arrivals["t_arrival"].to_list() == pytest.approx([0.0, 0.009], abs=1e-15)
    assert batch.arrivals["prefix_hash_ids"].to_list() == [[1, 2], [3]]
    assert batch.quarantine["line"].to_list() == [3]
    assert batch.quarantine["reason"].to_list() == ["h is not a list of integers"]

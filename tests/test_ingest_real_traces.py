"""End to end: `ingest` over every real file in ../shared/real_traces, exact counts per file.

The per-reader conformance tests check frames; this checks what lands in the warehouse after
validation, deduplication and commit (and that nothing is lost on the way).
"""

from __future__ import annotations

from pipeline.ingest.run import ingest_paths, totals
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect

# file -> (format, read, ingested, quarantined, arrivals, summaries)
EXPECTED = {
    "aiperf/profile_export.jsonl": ("aiperf", 47, 47, 0, 0, 0),
    "aiperf_0.13/profile_export.jsonl": ("aiperf", 108, 100, 0, 0, 0),  # + 8 warmup excluded
    "aiperf_0.13/profile_export_aiperf.json": ("aiperf_aggregate", 0, 0, 0, 0, 618),
    "aiperf/profile_export_aiperf.json": ("aiperf_aggregate", 0, 0, 0, 0, 152),
    "azure_llm_2023/AzureLLMInferenceTrace_code.head.csv": ("azure_llm_trace", 4232, 0, 0, 4232, 0),
    "azure_llm_2023/AzureLLMInferenceTrace_conv.head.csv": ("azure_llm_trace", 4119, 0, 0, 4119, 0),
    "guidellm/benchmarks_stripped_v0.3_schema.json": ("guidellm", 1, 1, 0, 0, 763),
    "llmperf/individual_anyscale_70b.json": ("llmperf", 150, 150, 0, 0, 0),
    "llmperf/individual_bedrock_70b.json": ("llmperf", 150, 150, 0, 0, 0),
    "llmperf/summary_anyscale_70b.json": ("llmperf", 0, 0, 0, 0, 66),
    "llmperf/summary_bedrock_70b.json": ("llmperf", 0, 0, 0, 0, 66),
    "mooncake/conversation_trace.head.jsonl": ("mooncake", 624, 0, 0, 624, 0),
    "mooncake/synthetic_trace.head.jsonl": ("mooncake", 673, 0, 0, 673, 0),
    "otlp_json/opentelemetry-proto_examples_metrics.json": ("otlp_llm_spans", 1, 0, 1, 0, 0),
    "otlp_json/opentelemetry-proto_examples_trace.json": ("otlp_llm_spans", 1, 0, 1, 0, 0),
    "servegen/language_m-large_chunk-0-trace.csv": ("servegen", 1, 0, 1, 0, 0),
    "servegen/language_m-large_chunk-11-dataset.json": ("servegen", 1, 0, 1, 0, 0),
    "sglang_bench_serving/datacrunch_h200_deepseek_dp_mla_output.jsonl": (
        "sglang_bench",
        0,
        0,
        0,
        0,
        10,
    ),
    "splitwise_sim/perf_model.csv": ("splitwise", 1, 0, 1, 0, 0),
    "splitwise_sim/test_trace.csv": ("splitwise", 3, 0, 0, 3, 0),
    "vllm_bench_serve/nv-action_serving_llama8B_tp1_qps_1.json": ("vllm_bench", 0, 0, 0, 0, 12),
    "serving_runs/distserve_opt13b_a100/vllm-400-4.exp.txt": ("distserve_exp", 400, 400, 0, 0, 7),
    "serving_runs/distserve_opt13b_a100/distserve-c21d11-300-9.exp.txt": (
        "distserve_exp",
        300,
        300,
        0,
        0,
        7,
    ),
    "serving_runs/llmservingsim_vllm019/bench-RTX4090-Llama-3.1-8B/vllm_requests.jsonl": (
        "vllm_request_stats",
        300,
        300,
        0,
        0,
        0,
    ),
}
# Companions land as "skipped" with nothing written; each run is counted once.
SKIPPED = (
    "aiperf/profile_export_aiperf.csv",
    "aiperf_0.13/profile_export_aiperf.csv",
    "aiperf_0.13/phases/warmup/profile_export_aiperf.json",
    "aiperf_0.13/inputs.json",
    "serving_runs/distserve_opt13b_a100/vllm-400-4.line1_CONVERTED.jsonl",
    "serving_runs/distserve_opt13b_a100/opt-13b-sharegpt-workload__vllm-400-4.json",
    "serving_runs/llmservingsim_vllm019/bench-RTX4090-Llama-3.1-8B/vllm_meta.json",
    "serving_runs/llmservingsim_vllm019/profile-RTX4090-Llama-3.1-8B/tp1/dense.csv",
)


def test_every_real_file_lands_with_exact_counts(shared, tmp_path):
    root = shared / "real_traces"
    layout = Layout(tmp_path / "wh")
    results = {str(r.path.relative_to(root)): r for r in ingest_paths([root], layout)}
    assert "SOURCES.md" not in results  # documentation is not a log
    for rel, (fmt, read, ingested, quarantined, arrivals, summaries) in EXPECTED.items():
        r = results[rel]
        c = r.counts
        got = (r.format, c["read"], c["ingested"], c["quarantined"], c["arrivals"], c["summaries"])
        assert got == (fmt, read, ingested, quarantined, arrivals, summaries), rel
        assert c["read"] == (
            c["ingested"] + c["quarantined"] + c["duplicates"] + c["arrivals"] + c["excluded"]
        )
    for rel in SKIPPED:
        r = results[rel]
        assert (r.status, sum(r.counts.values())) == ("skipped", 0), rel
    t = totals(list(results.values()))
    con = connect(layout)
    assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == t["ingested"]
    assert con.execute("SELECT count(*) FROM arrivals").fetchone()[0] == t["arrivals"]
    assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == t["quarantined"]
    # AIPerf's cancelled requests are kept as such, not lost.
    assert con.execute(
        "SELECT status, count(*) FROM requests WHERE source_format = 'aiperf' "
        "AND source_file NOT LIKE '%aiperf_0.13%' GROUP BY 1 ORDER BY 1"
    ).fetchall() == [("cancelled", 11), ("ok", 36)]
    # AIPerf 0.13 (issue 12, point 10): the client's own figures, one run for the folder.
    a = results["aiperf_0.13/profile_export.jsonl"]
    assert (a.counts["excluded"], a.excluded) == (8, {"AIPerf warmup request (not part of the "
                                                      "profile)": 8})  # fmt: skip
    (run_id, n, ttft_ms), = con.execute(
        "SELECT run_id, count(*), avg(ttft_s) * 1000 FROM requests WHERE source_format = 'aiperf' "
        "AND source_file LIKE '%aiperf_0.13%' GROUP BY 1"
    ).fetchall()  # fmt: skip
    assert n == 100 and round(ttft_ms, 3) == 49.579  # profile_export_aiperf.json: 49.57858615
    assert con.execute(
        "SELECT model, max_concurrency FROM runs WHERE run_id = ? AND source_format = "
        "'aiperf_aggregate'", [run_id]
    ).fetchall() == [("mock-llm-8b", 8)]  # fmt: skip
    # Arrival-only traces never enter latency statistics.
    assert con.execute(
        "SELECT count(*) FROM requests WHERE source_format IN ('azure_llm_trace', 'mooncake')"
    ).fetchone() == (0,)

"""The calibration set read unchanged: our per-request rows give the tools' own summaries.

- vLLM 0.19 on an RTX 4090 (LLMServingSim's bench): mean TTFT / TPOT / E2E from `requests`, by the
  `latency_by_run` query, equal the vLLM column of its validation_summary.txt within 0.5 % (the
  summary prints one decimal of a millisecond).
- DistServe's .exp files: the run's averages from our rows equal its `{ key: value }` block
  within 0.1 %.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.ingest.run import ingest_paths
from pipeline.query.named import load_query, run_named
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.conftest import REPO, SHARED

RUNS = SHARED / "real_traces" / "serving_runs"
RTX = RUNS / "llmservingsim_vllm019" / "bench-RTX4090-Llama-3.1-8B"
DS = RUNS / "distserve_opt13b_a100"
pytestmark = pytest.mark.skipif(not RUNS.is_dir(), reason=f"calibration set absent at {RUNS}")


def _by_run(layout: Layout) -> dict[str, dict]:
    rows = run_named(connect(layout), load_query("latency_by_run", REPO / "queries")).to_pylist()
    return {r["run_id"]: r for r in rows}


def _vllm_column(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(TTFT|TPOT|Latency) (Mean|Median|P90)\s+([\d.]+)\s+", line)
        if m:
            out[f"{m[1]} {m[2]}"] = float(m[3]) / 1000.0
    return out


def test_rtx4090_vllm019_means_equal_its_summary(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "wh")
    (r,) = [x for x in ingest_paths([RTX], layout) if x.status == "ingested"]
    assert (r.counts["ingested"], r.counts["quarantined"]) == (300, 0)
    (row,) = _by_run(layout).values()
    want = _vllm_column((RTX / "validation_summary.txt").read_text())
    assert row["requests"] == 300
    assert row["model"] == "meta-llama/Llama-3.1-8B"
    for ours, theirs in (("ttft_mean", "TTFT Mean"), ("tpot_mean", "TPOT Mean"),
                         ("e2e_mean", "Latency Mean"), ("ttft_p50", "TTFT Median"),
                         ("ttft_p90", "TTFT P90"), ("e2e_p90", "Latency P90")):  # fmt: skip
        assert row[ours] == pytest.approx(want[theirs], rel=0.005), ours
    # The harness's meta.json gives the deployment: one RTX 4090, V1 with chunked prefill.
    con = connect(layout)
    meta = con.execute(
        "SELECT DISTINCT gpu, gpu_count, engine, engine_version, max_num_seqs, "
        "max_batched_tokens, chunked_prefill, weight_dtype FROM requests"
    ).fetchall()
    assert meta == [("NVIDIA GeForce RTX 4090", 1, "vllm", "0.19.0", 256, 2048, True, "bf16")]


def _summary_block(path: Path) -> dict[str, float]:
    lines = path.read_text().splitlines()[1:]
    return {
        m[1]: float(m[2]) for m in (re.match(r"^\s*(\w+)\s*:\s*(\S+)\s*$", x) for x in lines) if m
    }


def test_distserve_runs_equal_their_summary_blocks(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "wh")
    results = ingest_paths([DS], layout)
    got = {r.path.name: r for r in results if r.status == "ingested"}
    assert sorted(got) == sorted(p.name for p in DS.glob("*.exp.txt"))
    con = connect(layout)
    rows = _by_run(layout)
    assert len(rows) == 7
    for name, r in got.items():
        want = _summary_block(DS / name)
        run_id = con.execute(
            "SELECT DISTINCT run_id FROM requests WHERE source_file = ?", [str(r.path)]
        ).fetchone()[0]
        row = rows[run_id]
        span = con.execute(
            "SELECT max(t_arrival + e2e_s) - min(t_arrival), "
            "avg(e2e_s / (prompt_tokens + output_tokens)) FROM requests WHERE run_id = ?",
            [run_id],
        ).fetchone()
        assert row["requests"] == want["num_requests"], name
        assert row["ttft_mean"] * 1e3 == pytest.approx(want["avg_ttft_ms"], rel=1e-3), name
        assert row["tpot_mean"] * 1e3 == pytest.approx(want["avg_tpot_ms"], rel=1e-3), name
        assert span[0] * 1e3 == pytest.approx(want["test_duration_ms"], rel=1e-3), name
        assert span[1] * 1e3 == pytest.approx(want["avg_per_token_latency_ms"], rel=1e-3), name
        assert row["requests"] / span[0] == pytest.approx(want["request_throughput"], rel=1e-3)


def test_report_parity_puts_our_figures_beside_the_tools(shared, tmp_path: Path) -> None:
    """queries/report_parity.sql (the report's parity table): mean TTFT recomputed from the
    per-request rows equals the client's own summary, per run."""

    root = shared / "real_traces"
    layout = Layout(tmp_path / "wh")
    ingest_paths([root / "aiperf_0.13", root / "guidellm_0.8", root / "llmperf"], layout)
    rows = run_named(connect(layout), load_query("report_parity", REPO / "queries")).to_pylist()
    means = {(r["tool"], r["run_id"]): r for r in rows if r["metric"] == "ttft_mean"}
    tools = sorted({t for t, _ in means})
    assert tools == ["aiperf_aggregate", "guidellm", "llmperf"]
    for (tool, run), r in means.items():
        assert r["ours_s"] is not None and r["requests"] > 0, (tool, run)
        # GuideLLM and AIPerf store float32-rounded times: agreement to 1e-5 relative.
        assert abs(r["difference"]) < 1e-5, (tool, run, r)
    assert sum(1 for t, _ in means if t == "guidellm") == 4

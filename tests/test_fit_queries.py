"""The cost_* named queries on small hand-made cost_models rows (and requests), and on a fitted
empty warehouse (cost_models exists but has no rows)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pipeline.fit import fit_warehouse
from pipeline.fit.store import SCHEMA
from pipeline.ingest.run import ingest_paths
from pipeline.query.named import all_queries, load_query, run_named
from pipeline.schema import deployment
from pipeline.warehouse.derived import write_derived
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.conftest import REPO, record, write_jsonl

COST_QUERIES = ("cost_mfu_mbu", "cost_critical_batch", "cost_measured_vs_roofline")
MODEL, GPU = "meta-llama/Llama-3.1-8B-Instruct", "H100-SXM"
BASE = {
    "model": MODEL, "gpu": GPU, "gpu_count": 1, "engine": "vllm", "engine_version": "0.6.3",
    "tp": 1, "max_num_seqs": 256,
    "max_batched_tokens": 8192, "chunked_prefill": True, "attention": "flash",
    "weight_dtype": "bf16", "kv_dtype": "bf16", "method": "tokens", "n": 100,
    "mfu": 0.5, "mbu": 0.5, "step_overhead": 0.002, "seq_overhead": 0.0,
    "roof_s_per_token": 1e-4, "roof_s_per_pair": 0.0, "roof_weights_s": 0.001,
    "roof_kv_s_per_token": 0.0, "critical_batch_roofline": 295.0,
}  # fmt: skip


def _cost_models(layout: Layout, rows: list[dict]) -> None:
    rows = [r | {"deployment": deployment.key_id(r)} for r in rows]
    write_derived(layout, "cost_models", pl.DataFrame(rows, schema=SCHEMA))


def _rows(layout: Layout, name: str) -> list[dict]:
    return run_named(connect(layout), load_query(name, REPO / "queries")).to_pylist()


def test_cost_queries_are_named_and_described():
    names = {q.name: q for q in all_queries(REPO / "queries")}
    for n in COST_QUERIES:
        assert names[n].description


def test_fitted_empty_warehouse_gives_no_rows(tmp_path):
    layout = Layout(tmp_path / "wh")
    assert fit_warehouse(layout) == []
    con = connect(layout)
    assert con.execute("SELECT count(*) FROM cost_models").fetchone() == (0,)
    # The claims table says 'not enough data' for every claim of an empty warehouse.
    verdicts = con.execute("SELECT DISTINCT verdict FROM claims").fetchall()
    assert verdicts == [("not enough data",)]
    for name in COST_QUERIES:
        assert _rows(layout, name) == [], name


def test_cost_mfu_mbu(tmp_path):
    layout = Layout(tmp_path / "wh")
    _cost_models(
        layout,
        [
            BASE | {"phase": "prefill", "mfu": 0.5, "mfu_ci_low": 0.49, "mfu_ci_high": 0.51,
                    "mape_test": 0.02},
            BASE | {"phase": "decode", "mbu": 0.7, "mbu_ci_low": 0.69, "mbu_ci_high": 0.71,
                    "mape_test": 0.01, "n": 50},
            BASE | {"phase": "decode", "max_num_seqs": 64, "mbu": 0.6, "mbu_ci_low": 0.58,
                    "mbu_ci_high": 0.62, "mape_test": 0.03, "n": 30},
        ],
    )  # fmt: skip
    rows = _rows(layout, "cost_mfu_mbu")
    assert [(r["phase"], r["configurations"], r["observations"]) for r in rows] == [
        ("decode", 2, 80),
        ("prefill", 1, 100),
    ]
    dec = rows[0]
    assert dec["mbu"] == pytest.approx(0.65)
    assert (dec["mbu_ci_low"], dec["mbu_ci_high"]) == (0.58, 0.71)
    assert dec["worst_mape_test"] == 0.03
    assert rows[1]["mfu"] == 0.5 and rows[1]["step_overhead_s"] == 0.002


def test_cost_critical_batch(tmp_path):
    layout = Layout(tmp_path / "wh")
    _cost_models(
        layout,
        [
            BASE | {"phase": "prefill"},
            BASE | {"phase": "decode", "critical_batch_fitted": 251.0, "max_batch_seen": 73.0},
            BASE | {"phase": "decode", "max_num_seqs": 512, "critical_batch_fitted": 200.0,
                    "max_batch_seen": 300.0},
        ],
    )  # fmt: skip
    rows = _rows(layout, "cost_critical_batch")
    got = [(r["max_num_seqs"], r["measured_critical_batch"], r["decode_regime"]) for r in rows]
    assert got == [(256, 251.0, "below"), (512, 200.0, "reached")]
    assert rows[0]["predicted_critical_batch"] == 295.0
    assert rows[0]["measured_over_predicted"] == pytest.approx(251 / 295)


def test_cost_measured_vs_roofline(tmp_path):
    # Three requests a second apart (never concurrent): prefill 0.3 s, then 3 decode steps of
    # 10 ms. Roofline prefill = max(1000 x 1e-4, 1 ms) = 0.1 s; fitted = 0.1 / 0.5 + 2 ms.
    # Decode at batch 1: roofline = max(1e-4, 1 ms) = 1 ms; fitted = 1 ms / 0.5 + 2 ms = 4 ms.
    recs = []
    for i in range(3):
        a = 1_762_041_600.0 + i
        recs.append(
            record(i, model=MODEL, gpu=GPU, prompt_tokens=1000, cached_tokens=0,
                   output_tokens=4, arrival_ts=a, scheduled_ts=a + 0.01, first_token_ts=a + 0.31,
                   finish_ts=a + 0.34, token_times=[0.31, 0.32, 0.33, 0.34],
                   token_counts=[1, 1, 1, 1])
        )  # fmt: skip
    layout = Layout(tmp_path / "wh")
    ingest_paths([write_jsonl(tmp_path / "in.jsonl", recs)], layout)
    _cost_models(layout, [BASE | {"phase": "prefill"}, BASE | {"phase": "decode"}])
    rows = _rows(layout, "cost_measured_vs_roofline")
    assert [(r["phase"], r["bucket_by"], r["bucket_lo"], r["requests"]) for r in rows] == [
        ("prefill", "prompt_tokens", 512, 3),
        ("decode", "batch", 1, 3),
    ]
    pre, dec = rows
    assert pre["measured_p50_s"] == pytest.approx(0.3, abs=1e-5)
    assert pre["roofline_mean_s"] == pytest.approx(0.1)
    assert pre["fitted_mean_s"] == pytest.approx(0.202)
    assert pre["measured_over_roofline"] == pytest.approx(3.0, abs=1e-4)
    assert dec["measured_p50_s"] == pytest.approx(0.01, abs=1e-5)
    assert dec["roofline_mean_s"] == pytest.approx(0.001)
    assert dec["fitted_mean_s"] == pytest.approx(0.004)


def test_cost_measured_vs_roofline_needs_a_matching_configuration(tmp_path):
    recs = [record(0, model=MODEL, gpu=GPU)]
    layout = Layout(tmp_path / "wh")
    ingest_paths([write_jsonl(Path(tmp_path) / "in.jsonl", recs)], layout)
    _cost_models(layout, [BASE | {"phase": "prefill", "max_num_seqs": 8}])  # other config
    assert _rows(layout, "cost_measured_vs_roofline") == []

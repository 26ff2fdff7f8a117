"""Fit Splitwise's measured perf model (``perf_model.csv``: Llama-2-70B and BLOOM-176B on A100 and
H100, TP 2-8, times in ms) with :func:`pipeline.fit.frame.fit_frame`, per model x GPU x TP.

Rows -> observations: ``prompt_time`` is one prefill step of ``batch_size`` prompts of
``prompt_size`` tokens; ``token_time`` one decode step of ``batch_size`` sequences. Generation
often stopped before ``token_size`` tokens (e2e_time says so), so the decode context is
prompt + n/2 with n = (e2e - prompt_time) / token_time generated tokens, capped at token_size.
``h100-80gb-pcap`` (power-capped H100) has the H100's datasheet peaks: its lower efficiency is
the finding. Weights and KV are fp16.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from pipeline import catalog
from pipeline.fit.core import FittedModel, unit_cost
from pipeline.fit.frame import fit_frame, observations, physically_possible
from pipeline.fit.model import predict

BLOOM_TOML = """[model.bloom-176b]
name = "BLOOM-176B"
hf_id = "bigscience/bloom"
aliases = ["bloom", "bloom-176b", "bloom176b"]
family = "opt"
params = 176247271424
active_params = 176247271424
layers = 70
hidden = 14336
heads = 112
kv_heads = 112
head_dim = 128
vocab = 250880
intermediate = 57344
max_context = 2048
tied_embeddings = true
source = "HF bigscience/bloom config.json (70 layers, hidden 14336, 112 heads); 176.2B params"
"""


def frames(csv: Path) -> dict[tuple[str, str, int], pl.DataFrame]:
    """(model, hardware, tp) -> (phase, batch, tokens, context, time_s) rows."""
    df = pl.read_csv(csv).with_columns(
        gen=((pl.col("e2e_time") - pl.col("prompt_time")) / pl.col("token_time")).clip(
            1, pl.col("token_size")
        )
    )
    out = {}
    for (m, hw, tp), g in df.group_by("model", "hardware", "tensor_parallel"):
        pre = g.select(
            pl.lit("prefill").alias("phase"),
            pl.col("batch_size").alias("batch"),
            pl.col("prompt_size").alias("tokens"),
            pl.lit(0.0).alias("context"),
            (pl.col("prompt_time") / 1e3).alias("time_s"),
        )
        dec = g.select(
            pl.lit("decode").alias("phase"),
            pl.col("batch_size").alias("batch"),
            pl.lit(1, dtype=pl.Int64).alias("tokens"),
            (pl.col("prompt_size") + pl.col("gen") / 2).alias("context"),
            (pl.col("token_time") / 1e3).alias("time_s"),
        )
        out[(str(m), str(hw), int(tp))] = pl.concat([pre, dec], how="vertical_relaxed")
    return dict(sorted(out.items()))


def gpu_for(hardware: str) -> catalog.GPU:
    return catalog.gpu(hardware.removesuffix("-pcap"))


def fit_perf_model(csv: Path) -> tuple[pl.DataFrame, dict[tuple[str, str, int], FittedModel]]:
    """Fit every group; a summary frame (one row per group) and the fits."""
    rows, fits = [], {}
    for (m, hw, tp), frame in frames(csv).items():
        model, gpu = catalog.model(m), gpu_for(hw)
        fm = fit_frame(frame, model, gpu, tp, weight_dtype="fp16", kv_dtype="fp16")
        fits[(m, hw, tp)] = fm
        cost = unit_cost(model, gpu, tp, "fp16", "fp16")
        obs = observations(frame, cost)
        ape = []
        for phase in ("prefill", "decode"):
            o = obs[phase].filter(physically_possible(obs[phase]))
            p = fm.phase(phase)
            x = np.array([1 / p.mfu, 1 / p.mbu, p.step_overhead, p.seq_overhead])
            ape.append(np.abs(predict(x, o) / o["time_s"].to_numpy() - 1.0))
        assert fm.prefill is not None and fm.decode is not None
        rows.append(
            {
                "model": m,
                "hardware": hw,
                "tp": tp,
                "prefill_mfu": fm.prefill.mfu,
                "prefill_mbu": fm.prefill.mbu,
                "prefill_step_overhead_ms": fm.prefill.step_overhead * 1e3,
                "prefill_seq_overhead_ms": fm.prefill.seq_overhead * 1e3,
                "decode_mbu": fm.decode.mbu,
                "decode_step_overhead_ms": fm.decode.step_overhead * 1e3,
                "decode_seq_overhead_ms": fm.decode.seq_overhead * 1e3,
                "prefill_mape": float(ape[0].mean()),
                "decode_mape": float(ape[1].mean()),
                "mape": float(np.concatenate(ape).mean()),
                "prefill_mape_test": fm.prefill.mape_test,
                "decode_mape_test": fm.decode.mape_test,
                "dropped_impossible": fm.extra.get("dropped_impossible", 0),
            }
        )
    return pl.DataFrame(rows), fits


def markdown(summary: pl.DataFrame) -> str:
    """The docs/cost-models.md table."""
    head = ("| model | GPU | TP | prefill MFU | decode MBU | prefill MBU | decode step ms | "
            "decode per-seq ms | prefill step ms | prefill per-seq ms | MAPE prefill | "
            "MAPE decode | MAPE all | dropped |")  # fmt: skip
    lines = [head, "|" + "---|" * 14]
    for r in summary.iter_rows(named=True):
        lines.append(
            f"| {r['model']} | {r['hardware']} | {r['tp']} | {r['prefill_mfu']:.1%} | "
            f"{r['decode_mbu']:.1%} | {r['prefill_mbu']:.1%} | "
            f"{r['decode_step_overhead_ms']:.2f} | "
            f"{r['decode_seq_overhead_ms']:.3f} | {r['prefill_step_overhead_ms']:.2f} | "
            f"{r['prefill_seq_overhead_ms']:.2f} | {r['prefill_mape']:.1%} | "
            f"{r['decode_mape']:.1%} | {r['mape']:.1%} | {r['dropped_impossible']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":  # python -m pipeline.fit.splitwise_perf_model [perf_model.csv]
    import os
    import sys
    import tempfile

    csv = Path(
        sys.argv[1] if len(sys.argv) > 1 else "../shared/real_traces/splitwise_sim/perf_model.csv"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as fh:
        fh.write(BLOOM_TOML)
    os.environ.setdefault("PIPELINE_CATALOG", fh.name)
    summary, _ = fit_perf_model(csv)
    print(markdown(summary))

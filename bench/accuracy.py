"""Validate the model on the calibration set and rewrite docs/accuracy.md (`make accuracy`).

Ingests the real runs of ../shared/real_traces/serving_runs into scratch warehouses, replays
each with a model fitted without it (pipeline.fit.validate) and writes the error tables, next to
the peers' published errors. Run from the repository root: `python bench/accuracy.py`.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path

from pipeline.fit.calibration_store import load_deployments
from pipeline.fit.validate import summary, validate_deployment
from pipeline.ingest.run import IngestOptions, ingest_paths
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO.parent / "shared" / "real_traces" / "serving_runs"
DS = RUNS / "distserve_opt13b_a100"
RTX = RUNS / "llmservingsim_vllm019" / "bench-RTX4090-Llama-3.1-8B"
OPT = {"model": "facebook/opt-13b", "gpu": "A100-80GB", "gpu_count": 1,
       "weight_dtype": "fp16", "kv_dtype": "fp16"}  # fmt: skip
SETS = [
    ("DistServe vLLM OPT-13B, A100-80GB, 1-4 req/s", sorted(DS.glob("vllm-*.exp.txt")), OPT),
    ("vLLM 0.19 Llama-3.1-8B, RTX 4090, 10 req/s", [RTX], {}),
]


def _pct(v: float | None) -> str:
    return "" if v is None or not math.isfinite(v) else f"{v:+.1%}"


def main() -> int:
    if not RUNS.is_dir():
        print(f"calibration set not found at {RUNS}", file=sys.stderr)
        return 3
    lines = [
        "# Accuracy on real runs",
        "",
        "Written by `make accuracy` (`python bench/accuracy.py`); do not edit by hand.",
        "Each run of the calibration set (`../shared/real_traces/serving_runs/`, real servers on",
        "known GPUs) is replayed with a model calibrated **without** it (`pipeline validate`):",
        "leave one run out where a deployment has several runs, else fitted on the first half of",
        "the run's arrivals and scored on the second half. `in-sample` rows (fitted on",
        "everything) show what the model can express, not what it predicts.",
        'Error = replayed / observed - 1; "median |error|" is over runs x {p50, p90}.',
        "",
    ]
    for title, files, sets in SETS:
        with tempfile.TemporaryDirectory() as tmp:
            layout = Layout(Path(tmp) / "wh")
            ingest_paths(files, layout, IngestOptions(sets=sets))
            deps = load_deployments(connect(layout))
            t0 = time.perf_counter()
            rows, cals = [], []
            for dep, runs in deps.runs.items():
                got, c = validate_deployment(dep, runs, progress=print)
                rows += got
                cals += c
            secs = time.perf_counter() - t0
        cal = cals[0]
        lines += [f"## {title}", ""]
        lines.append(
            f"Scheduler `{cal.scheduler}` ({cal.scheduler_source}; losses "
            + ", ".join(f"{k} {v:.3f}" for k, v in cal.alternatives.items())
            + "). Calibrated on all runs: "
            + ", ".join(
                f"{k} {cal.values[k]:.4g} ({cal.status[k]})"
                for k in ("mfu", "mbu", "overlap", "step_overhead_s", "seq_overhead_s")
            )
            + f", KV {cal.kv_tokens:,} tokens ({cal.kv_status}). Validation took {secs:.1f} s."
        )
        lines.append("")
        for split in ("leave-one-run-out", "second-half", "in-sample"):
            part = [r for r in rows if r["split"] == split]
            if not part:
                continue
            s = summary(rows, split)
            lines += [
                f"**{split}**: median |error| TTFT {s['ttft_median_abs_error']:.1%} "
                f"(worst {s['ttft_worst_abs_error']:.1%}), TPOT {s['tpot_median_abs_error']:.1%} "
                f"(worst {s['tpot_worst_abs_error']:.1%}).",
                "",
                "| run | TTFT p50 | TTFT p90 | TPOT p50 | TPOT p90 | E2E p50 | E2E p90 | tok/s |",
                "|---|---|---|---|---|---|---|---|",
            ]
            by_run: dict[str, dict[str, float | None]] = {}
            for r in part:
                by_run.setdefault(r["run_id"], {})[r["metric"]] = r["error"]
            order = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90", "e2e_p50", "e2e_p90",
                     "throughput_tok_s")  # fmt: skip
            for run_id, m in by_run.items():
                lines.append(f"| {run_id} | " + " | ".join(_pct(m.get(k)) for k in order) + " |")
            lines.append("")
    lines += [PEERS]
    out = REPO / "docs" / "accuracy.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


PEERS = """## Peers' published errors (for comparison; their inputs differ)

| tool | what it needs | error it reports |
|---|---|---|
| LLMServingSim (vLLM 0.19) | a per-GPU layer profile | 0.2-8.6 % across its runs; \
0.2-0.9 % on the RTX 4090 run above (its `validation_summary.txt`) |
| BLIS | dedicated training runs | median 17.6 % TTFT, 7.1 % ITL against real vLLM |
| Vidur | operator profiling on the GPU | (needs its profile; not measured here) |

## Not covered yet

- DistServe's disaggregated runs (prefill TP2 + decode TP1): the calibration has no
  disaggregated scheduler yet, so they are not validated here.
- Cross-hardware and cross-configuration what-ifs (colocated vLLM fit + disaggregation against
  DistServe; RTX 4090 -> RTX PRO 6000) are not in this table yet.
- Intervals printed by `pipeline fit` come from the Jacobian of the replay residuals, which
  treats per-request errors as independent; they are narrower than run-to-run variation (the
  same vLLM server differs by ~8 % in decode speed between the 1 and 2 req/s runs).
- The RTX 4090 run had prefix caching on and its hits are not logged: prefill work is counted
  as if nothing were cached, so its fitted MFU is an upper-bound-like figure (cached prompt
  tokens make prefill look faster than the FLOPs counted).
- Where the target of issue 11 (median |error| <= 10 % TTFT, <= 5 % TPOT; no run worse than
  25 % / 10 %) is missed, the table says so: the DistServe vLLM runs miss it (p90 TTFT at
  3 req/s, where the server reaches its KV capacity late in the run; TPOT at 2 req/s, where
  the real server was ~8 % slower per decode than at the other rates).
"""

if __name__ == "__main__":
    raise SystemExit(main())

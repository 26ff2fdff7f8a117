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
from pipeline.fit.profile import load_profile
from pipeline.fit.validate import profile_rows, summary, validate_deployment, whatif_rows
from pipeline.ingest.run import IngestOptions, ingest_paths
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO.parent / "shared" / "real_traces" / "serving_runs"
DS = RUNS / "distserve_opt13b_a100"
RTX = RUNS / "llmservingsim_vllm019" / "bench-RTX4090-Llama-3.1-8B"
PROFILE = RUNS / "llmservingsim_vllm019" / "profile-RTX4090-Llama-3.1-8B"
MANIFESTS = REPO / "examples" / "manifests"
SETS = [
    (
        "DistServe vLLM OPT-13B, A100-80GB, 1-4 req/s",
        sorted(DS.glob("vllm-*.exp.txt")),
        MANIFESTS / "distserve-vllm-opt13b.run.toml",
    ),
    (
        "DistServe disaggregated OPT-13B (prefill TP2 + decode TP1), A100-80GB, 3-9 req/s",
        sorted(DS.glob("distserve-*.exp.txt")),
        MANIFESTS / "distserve-c21d11.run.toml",
    ),
    ("vLLM 0.19 Llama-3.1-8B, RTX 4090, 10 req/s", [RTX], None),
]


def _ci(cal, k: str) -> str:
    """The fit's 95 % interval of parameter ``k`` as "[lo-hi] ", or nothing where it has none."""
    ci = cal.ci.get(k)
    return f"[{ci[0]:.4g}-{ci[1]:.4g}] " if ci else ""


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
        "the run's arrivals and scored on the second half. `profile` rows replay the run with the",
        "LLMServingSim layer profile's step times as measured (`pipeline validate --profile`;",
        "no host overheads, nothing fitted but the scheduler and KV). `in-sample` rows (fitted on",
        "everything) show what the model can express, not what it predicts.",
        'Error = replayed / observed - 1; "median |error|" is over runs x {p50, p90}.',
        "",
    ]
    fitted: dict[str, tuple] = {}
    for title, files, manifest in SETS:
        with tempfile.TemporaryDirectory() as tmp:
            layout = Layout(Path(tmp) / "wh")
            ingest_paths(files, layout, IngestOptions(manifest=manifest))
            deps = load_deployments(connect(layout))
            t0 = time.perf_counter()
            rows, cals = [], []
            for dep, runs in deps.runs.items():
                got, c = validate_deployment(dep, runs, progress=print)
                rows += got
                cals += c
                if files == [RTX]:  # its layer profile, replayed as measured, beside the fit
                    prof = load_profile(PROFILE, dep.model, tp=dep.gpu_count)
                    rows += profile_rows(dep, runs, prof, c[0].scheduler, c[0].kv_tokens)
            secs = time.perf_counter() - t0
        cal = cals[0]
        fitted[title] = (cal, deps)
        lines += [f"## {title}", ""]
        names = ["mfu", "mbu", "overlap", "step_overhead_s", "seq_overhead_s"]
        if cal.status["kv_link_share"] != "not used":  # disaggregated: the KV link's share
            names.append("kv_link_share")
        intro = (
            f"Scheduler `{cal.scheduler}` ({cal.scheduler_source}; losses "
            + ", ".join(f"{k} {v:.3f}" for k, v in cal.alternatives.items())
            + "). Calibrated on all runs: "
            + ", ".join(f"{k} {cal.values[k]:.4g} {_ci(cal, k)}({cal.status[k]})" for k in names)
            + f", KV {cal.kv_tokens:,} tokens ({cal.kv_status}). Validation took {secs:.1f} s."
        )
        lines += [intro, ""]
        if len(cals) > 2:  # the held-out fits: how much the parameters move between them
            held = cals[1:]
            spread = ", ".join(
                f"{k} {min(c.values[k] for c in held):.4g}-{max(c.values[k] for c in held):.4g}"
                for k in names
            )
            lines += [
                f"Across the {len(cals) - 1} held-out calibrations: {spread} (to set beside the "
                "full fit's 95 % intervals in brackets, from its jackknife over blocks of time).",
                "",
            ]
        lines += _tables(rows)
    lines += _whatif(fitted)
    lines += [PEERS]
    out = REPO / "docs" / "accuracy.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


def _whatif(fitted: dict[str, tuple]) -> list[str]:
    """The colocated vLLM calibration replayed as DistServe's disaggregated deployment."""
    (src, _), (_, target) = fitted[SETS[0][0]], fitted[SETS[1][0]]
    rows = []
    for dep, runs in target.runs.items():
        rows += whatif_rows(src, dep, runs)
    lines = [
        "## What-if across configurations: colocated vLLM fit -> disaggregated (DistServe)",
        "",
        "The vLLM OPT-13B calibration above (1 GPU, colocated, V0) replayed with DistServe's",
        "deployment (`[disaggregation]` prefill TP2 + decode TP1 from the run manifest) against",
        "DistServe's three real runs. Nothing of these runs enters the model. Part of the gap is",
        "the engines' kernels: DistServe's own fitted profile",
        "(`profiler-a100-80g.distserve.json`) gives about 0.10 ms per prefill token at TP1",
        "against vLLM's 0.14, which a vLLM fit cannot know. Compare with the leave-one-run-out",
        "table of the disaggregated runs, calibrated on DistServe's own logs.",
        "",
    ]
    return lines + _tables(rows, splits=("what-if",))


def _tables(
    rows: list[dict], splits=("leave-one-run-out", "second-half", "profile", "in-sample")
) -> list:
    lines: list[str] = []
    for split in splits:
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
    return lines


PEERS = """## Peers' published errors (for comparison; their inputs differ)

| tool | what it needs | error it reports |
|---|---|---|
| LLMServingSim (vLLM 0.19) | a per-GPU layer profile | 0.2-8.6 % across its runs; \
0.2-0.9 % on the RTX 4090 run above (its `validation_summary.txt`) |
| BLIS | dedicated training runs | median 17.6 % TTFT, 7.1 % ITL against real vLLM |
| Vidur | operator profiling on the GPU | (needs its profile; not measured here) |

## Not covered yet

- Cross-hardware (e.g. RTX 4090 -> RTX PRO 6000): the rule is the catalog roofline of the
  target GPU with the efficiencies and overheads carried from the observed one; the calibration
  set has no run on a second GPU of the same model and engine, so its error is not measured
  here.
- Intervals printed by `pipeline fit` (in brackets above) are the wider of the Jacobian's and
  a delete-a-block jackknife's (five blocks of time, each refitted from both starts;
  docs/calibration.md). The Jacobian's alone were +-0.1 % wide, narrower than run-to-run
  variation (the same vLLM server differs by ~8 % in decode speed between the 1 and 2 req/s
  runs); the jackknife's are of the order of the held-out spread, except for drift between
  sessions, which blocks of time within runs do not see: DistServe's vLLM held-out MBU reaches
  0.755 (the fit without the 2 req/s run), above its interval's 0.675.
- The RTX 4090 run had prefix caching on and its hits are not logged: prefill work is counted
  as if nothing were cached, so its fitted MFU is an upper-bound-like figure (cached prompt
  tokens make prefill look faster than the FLOPs counted).
- Where the target of issue 11 (median |error| <= 10 % TTFT, <= 5 % TPOT; no run worse than 25
  % / 10 %) is missed, the tables say so. It is met for the RTX 4090 run, fitted on its whole
  log and on its first half. On DistServe's vLLM runs held out one by one the TTFT and TPOT
  medians meet it (TTFT 9.1 %, TPOT 4.7 %); the worst runs do not. The 2 req/s run was
  recorded ~1.5 h after the 1, 3 and 4 req/s runs (its clock starts 5,600 s later; the others
  lie within 1,000 s), and it is ~15 % slower throughout, prefill and decode alike. Fitted
  alone it wants MFU 0.53 and MBU 0.60 against 0.60-0.63 and 0.65-0.69 for the others, and no
  model shared by the four can follow that. Matched on the decode batch (5-35 requests,
  per-request decode windows rebuilt from arrival, first token and finish), observed /
  calibrated decode time is 1.04-1.11 in the 2 req/s run against 0.96-1.01 in the 3 and 4
  req/s runs, in every 15 s of the run and every context bin; DistServe's own fitted vLLM
  profile, which never saw these runs, shows the same run as the slowest (observed / profile
  1.23 against 1.03-1.15). The spread between runs of one server (about +-6 % in decode, +-10
  % in prefill) is a floor on what a held-out run can be predicted to. The p90 TTFT at 3 req/s
  sits on a KV-capacity cliff. Fitted alone, that run gets 53.1k tokens and a p90 TTFT within
  4 %; held out, the capacity the other runs give misses it by 43 %. Replayed with the full
  calibration's other parameters, its p90 TTFT is +28 % at 53,000 KV tokens, +4 % at 54,065
  (the full fit's) and -43 % at 55,000: a 4 % change in capacity moves it by a factor of two.
  The fit without it takes 55,811 tokens and MFU 0.566 from the 1, 2 and 4 req/s runs, and the
  slow 2 req/s run pulls both: calibrated on the 1 and 4 req/s runs alone, the 3 req/s run
  replays at TTFT -6.7 / -22.1 % and TPOT -2.1 / -1.1 % (p50 / p90), within the targets. A
  run-level Cauchy loss (each run's cost through log1p(cost / scale), so a run the shared
  parameters miss counts less) brought the 3 req/s p90 TTFT to +2.6 % held out, but the 1 req/s
  run's TPOT to +25 % (TPOT median 9.3 %, worst 25 %), so it was not kept.
- On DistServe's disaggregated runs held out, every target is met (TTFT 3.1 / 6.3 %, TPOT
  0.7 / 8.6 %, median / worst). DistServe's decode
  loop awaits each KV migration between its steps (`DecodingStageLLMEngine._step`), so the
  model charges each prompt's KV pull to the decode step that admits it, at a fitted share of
  the manifest's 300 GB/s (`kv_link_share`). Each instance's limits are DistServe's
  evaluation launcher's (`evaluation/2-benchmark-serving/2-start-api-server.py`: context
  batches of <= 128 requests / 8,192 tokens, decoding <= 1,024 / 65,536), recorded in the
  manifest; the model used 2,048 prefill tokens and 256 sequences before. Measured held out:
  pull as latency only and the old limits, TTFT 7.2 / 15.6 %, TPOT 8.4 / 16.9 % (median /
  worst); pull in the admitting step, old limits, 6.9 / 13.6 %, 6.9 / 9.4 %; with DistServe's
  api_server defaults instead (4,096 prefill tokens) 4.4 / 6.0 %, 5.7 / 11.7 %; with the
  launcher's, 4.2 / 7.6 %, 5.0 / 11.8 %; with the calibration also searched from a second,
  roofline start (as tabled, the two starts sharing the evaluation budget, so a calibration
  takes as long as before) 3.1 / 6.3 %, 0.7 / 8.6 %. These figures move with the search
  itself: with each start given the full budget (twice the time) they were 4.1 / 7.2 %, 5.0 /
  11.8 %, and DistServe's vLLM runs TTFT 10.9 / 42.7 %, TPOT 4.9 / 14.9 % (as with one start),
  against 9.1 / 42.7 %, 4.7 / 16.7 % as tabled. Read differences of a point or two between
  model versions as within the optimiser's noise. The share trades against MBU (full fit:
  MBU 0.85, share 0.18; from the first start alone 0.95 and 0.12), which is why the jackknife
  finds the share, the overlap and the overheads not identifiable on these three runs.
- The same launcher starts DistServe's vLLM with `--max-num-seqs 1024
  --max-num-batched-tokens 16384`. The vLLM manifest does not take them: the model uses
  vLLM V0's own default for OPT-13B (2,048 tokens, its max_model_len), and the data do not
  decide between the two. With the launcher's, held out, TTFT is 9.9 / 19.9 % but TPOT 9.8 /
  20.7 % (the 1 req/s run decodes +21 % slow); with the default, as tabled.
- The what-if from the colocated vLLM fit misses DistServe's TPOT, by +15 to +31 % at p50 and
  more in the tails. Part of it is the engines' different kernels: at small batches
  DistServe's fitted profile decodes ~10 % faster than vLLM's (batch 20, 18k context: 32 ms
  against 35 ms). The tails are a KV-capacity cliff: decoding slower, the decode instance
  holds more requests, and at the vLLM fit's 54k tokens the 6 and 9 req/s runs overflow it
  (TPOT p90 +380 % / +170 %); replayed at the DistServe fit's 61k they are +139 % / +86 %, at
  80k +45 % / -44 %. Its TTFT is within 13 %.
"""

if __name__ == "__main__":
    raise SystemExit(main())

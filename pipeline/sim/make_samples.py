"""Regenerate ``sample_traces/``: ``python -m pipeline.sim.make_samples [FOLDER]``.

Two GPUs x three model sizes x MHA and GQA. KV heads come from the model, so MHA vs GQA is a
choice of model pair of similar size: Llama-2-7B (MHA) / Llama-3.1-8B (GQA-4); Llama-2-13B (MHA) /
Mixtral-8x7B (GQA-4, 12.9B active, tp 2); OPT-66B (MHA, tp 4) / Llama-3.1-70B (GQA-8, tp 4).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.sim.generator import GenerateSpec, generate

GPUS = ("H100-SXM", "A100-80GB")
MODELS = (  # (catalog key, tensor parallel GPUs)
    ("llama-2-7b", 1),
    ("llama-3.1-8b", 1),
    ("llama-2-13b", 1),
    ("mixtral-8x7b", 2),
    ("opt-66b", 4),
    ("llama-3.1-70b", 4),
)
REQUESTS = 300
# The demo compares the Llama-3.1-8B pair (H100 -> A100): 2,000 requests each, so that replaying
# `--max-requests 300` against 2,000 really changes the simulated sample (issue 12, point 4).
DEMO_MODEL, DEMO_REQUESTS = "llama-3.1-8b", 2000


def main(folder: str = "sample_traces") -> None:
    out_dir = Path(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    for g, gpu in enumerate(GPUS):
        for m, (model, tp) in enumerate(MODELS):
            path = out_dir / f"{gpu.lower()}__{model}.jsonl.gz"
            spec = GenerateSpec(
                gpu=gpu,
                model=model,
                gpu_count=tp,
                requests=DEMO_REQUESTS if model == DEMO_MODEL else REQUESTS,
                seed=100 * g + m,
            )
            truth = generate(spec, path)
            print(f"{path}: {truth['attention_kind']}, rate {truth['arrival_process']['rate']}/s")


if __name__ == "__main__":
    main(*sys.argv[1:])

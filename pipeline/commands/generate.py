"""``pipeline generate``: a synthetic trace in our JSONL format, with its ground truth beside it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from pipeline.catalog import UnknownName
from pipeline.commands._common import Duration
from pipeline.errors import UserError
from pipeline.ingest.metadata import MetadataError, manifest_tables
from pipeline.sim.generator import ATTENTION, BATCHING, DEFAULT_START, GenerateSpec, generate
from pipeline.sim.workload import ARRIVALS

DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")


def _start(value: str | None) -> datetime:
    if value is None:
        return DEFAULT_START
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        msg = f"{value!r} is not an ISO date-time (2026-01-01T09:00:00Z)"
        raise click.BadParameter(msg) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@click.command("generate")
@click.option(
    "--out",
    "-o",
    "out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trace file to write (.jsonl, .jsonl.gz or .jsonl.zst).",
)
@click.option("--requests", "-n", default=1000, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Mean requests/s [default: 60% of the estimated capacity].",
)
@click.option("--gpu", default="H100-SXM", show_default=True, help="Accelerator (catalog name).")
@click.option("--model", default="llama-3.1-8b", show_default=True, help="Model (catalog name).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--replicas",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Identical servers behind one router (server sim-0, sim-1, ...); the default rate "
    "scales with them.",
)
@click.option(
    "--routing",
    type=click.Choice(["round-robin", "least-loaded"]),
    default="round-robin",
    show_default=True,
    help="How the router spreads requests over --replicas.",
)
@click.option(
    "--batching",
    type=click.Choice(BATCHING),
    default="continuous",
    show_default=True,
    help="continuous: the token-level scheduler; static: request-level batches of at most "
    "--max-num-seqs that run until their longest request finishes, each request reserving the "
    "model's context in KV (replay's `policy = \"static\"`).",
)
@click.option(
    "--max-seq-len",
    type=click.IntRange(min=2),
    default=None,
    help="With --batching static: KV tokens each request reserves, so prompt + output stays "
    "within it [default: the model's context].",
)
@click.option(
    "--disaggregation",
    "disaggregation_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="TOML file whose [disaggregation] table (a run manifest's keys: prefill_tp, decode_tp, "
    "prefill_replicas, decode_replicas, kv_bandwidth_gbps, kv_latency_s, per-instance limits) "
    "describes a DistServe-style deployment to simulate; FILE.run.toml is written beside the "
    "trace so that `pipeline ingest` records it.",
)
@click.option(
    "--arrivals",
    type=click.Choice(ARRIVALS),
    default="poisson",
    show_default=True,
    help="poisson, or bursty (gamma inter-arrivals, CV 3).",
)
@click.option(
    "--attention",
    type=click.Choice(ATTENTION),
    default="flash",
    show_default=True,
    help="eager materialises the prefill score matrix in HBM; the others fuse it.",
)
@click.option(
    "--gpu-count",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="GPUs per replica (tensor parallelism).",
)
@click.option("--max-num-seqs", default=256, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--max-batched-tokens",
    default=None,
    type=click.IntRange(min=1),
    help="Token budget per step [default: 8192; without chunking max(8192, context)].",
)
@click.option("--chunked-prefill/--no-chunked-prefill", default=True, show_default=True)
@click.option("--weight-dtype", type=click.Choice(DTYPES), default="bf16", show_default=True)
@click.option("--kv-dtype", type=click.Choice(DTYPES[:4]), default="bf16", show_default=True)
@click.option("--no-token-times", is_flag=True, help="Leave out per-token emission times.")
@click.option(
    "--start", default=None, help="Wall-clock time of t = 0 [default: 2026-01-01T00:00:00Z]."
)
@click.option(
    "--mfu",
    type=click.FloatRange(0, 1, min_open=True),
    default=None,
    help="Pin the true MFU [default: drawn from the seed in 0.40-0.60].",
)
@click.option(
    "--mbu",
    type=click.FloatRange(0, 1, min_open=True),
    default=None,
    help="Pin the true MBU [default: drawn from the seed in 0.60-0.80].",
)
@click.option(
    "--step-overhead",
    type=Duration(allow_zero=True),
    default=None,
    help="Pin the fixed time per step (3ms; a bare number is seconds) [default: drawn in "
    "1.5-4 ms].",
)
def command(
    out: Path,
    requests: int,
    rate: float | None,
    gpu: str,
    model: str,
    seed: int,
    replicas: int,
    routing: str,
    batching: str,
    max_seq_len: int | None,
    disaggregation_file: Path | None,
    arrivals: str,
    attention: str,
    gpu_count: int,
    max_num_seqs: int,
    max_batched_tokens: int | None,
    chunked_prefill: bool,
    weight_dtype: str,
    kv_dtype: str,
    no_token_times: bool,
    start: str | None,
    mfu: float | None,
    mbu: float | None,
    step_overhead: float | None,
) -> None:
    """Simulate a serving run and write it as a trace, with its ground truth in FILE.truth.json.

    Requests arrive (Poisson or bursty), get lognormal prompt and output lengths, and are served
    by the continuous-batching simulator with roofline step times. The true efficiencies (MFU,
    MBU, overheads) are drawn from the seed unless pinned, so `pipeline fit` can be checked.

    \b
    Example:
      pipeline generate --out traces/h100.jsonl.gz --requests 5000 --gpu H100-SXM \\
          --model meta-llama/Llama-3.1-8B-Instruct --arrivals bursty --seed 7
      pipeline generate --out traces/pool.jsonl --replicas 4 --routing least-loaded
      pipeline generate --out traces/static.jsonl --batching static --max-seq-len 4096
      pipeline generate --out traces/ds.jsonl --model facebook/opt-13b --gpu A100-80GB \\
          --disaggregation examples/manifests/distserve-c21d11.run.toml
      pipeline ingest traces/h100.jsonl.gz
    """
    pinned = {
        k: v
        for k, v in (("mfu", mfu), ("mbu", mbu), ("step_overhead", step_overhead))
        if v is not None
    }
    try:  # a spec the generator refuses (flags that do not go together) is a usage error
        spec = GenerateSpec(
            gpu=gpu,
            model=model,
            gpu_count=gpu_count,
            requests=requests,
            rate=rate,
            arrivals=arrivals,
            seed=seed,
            attention=attention,
            max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens,
            chunked_prefill=chunked_prefill,
            weight_dtype=weight_dtype,
            kv_dtype=kv_dtype,
            start=_start(start),
            token_times=not no_token_times,
            replicas=replicas,
            routing=routing,
            batching=batching,
            max_seq_len=max_seq_len,
            disaggregation=_disaggregation(disaggregation_file),
            efficiencies=pinned,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        truth = generate(spec, out)
    except (UnknownName, ValueError) as exc:
        raise UserError(str(exc)) from exc
    s = truth["summary"]
    click.echo(
        f"wrote {s['requests']} requests to {out} ({_size(out, truth['timing_s']['bytes'])}, "
        f"rate {truth['arrival_process']['rate']}/s, TTFT p50 {s['ttft_p50_s'] * 1e3:.0f} ms) "
        f"and {out}.truth.json; simulated in {truth['timing_s']['simulate']:.1f} s, "
        f"written in {truth['timing_s']['write']:.1f} s",
        err=True,
    )


def _disaggregation(path: Path | None) -> dict | None:
    """The [disaggregation] table of ``path``, checked as `pipeline ingest` checks a manifest's."""
    if path is None:
        return None
    try:
        tables = manifest_tables(path, path)
    except MetadataError as exc:
        raise UserError(str(exc)) from exc
    if "disaggregation" not in tables:
        raise UserError(f"{path}: no [disaggregation] table (or enabled = false)")
    return tables["disaggregation"]


def _size(out, uncompressed: int) -> str:
    """The file's size on disk, and the JSON it holds when compressed (102 MB, not 299 MB)."""
    on_disk = out.stat().st_size
    if on_disk == uncompressed:
        return f"{on_disk / 1e6:.1f} MB"
    return f"{on_disk / 1e6:.1f} MB on disk, {uncompressed / 1e6:.1f} MB of JSON"

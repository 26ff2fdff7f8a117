"""Files that sit beside logs in real tools' output folders but hold no requests of their own.

Each is recognised by name and content and skipped at ingest with a count and a reason, instead
of being quarantined as an unknown format (which would make ``--strict`` fail on any folder as
the tool wrote it). Files another reader already reads as part of a run (a harness's
``meta.json`` beside vLLM's request stats) say so; duplicates of a log in another encoding are
skipped so that one run is never counted twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

_Rule = tuple[str, Callable[[Path, bytes], bool]]


def _name(*patterns: str) -> Callable[[Path, bytes], bool]:
    rx = [re.compile(p) for p in patterns]
    return lambda path, head: any(r.fullmatch(path.name) for r in rx)


def _converted_twin(path: Path, head: bytes) -> bool:
    # DistServe calibration runs: `<run>.line1_CONVERTED.jsonl` is line 1 of `<run>.exp.txt`
    # re-encoded; the .exp.txt is read (it also carries the summary block).
    if not path.name.endswith(".line1_CONVERTED.jsonl"):
        return False
    stem = path.name.removesuffix(".line1_CONVERTED.jsonl")
    return (path.parent / f"{stem}.exp.txt").is_file() or (path.parent / f"{stem}.exp").is_file()


def _distserve_workload(path: Path, head: bytes) -> bool:
    h = head.lstrip()[:400]
    return h.startswith(b"[") and b'"start_time"' in h and b'"prompt_len"' in h


def _distserve_profile(path: Path, head: bytes) -> bool:
    return path.name.startswith("profiler-") and b'"decoding_smallbs"' in head


def _vllm_meta(path: Path, head: bytes) -> bool:
    return b'"vllm_version"' in head and b'"engine_kwargs"' in head


def _llmservingsim_cluster(path: Path, head: bytes) -> bool:
    return path.name == "config.json" and b'"npu_mem"' in head and b'"instances"' in head


def _validation_summary(path: Path, head: bytes) -> bool:
    return path.name.endswith("summary.txt") and b"TTFT Mean" in head and b"Sim" in head


def _timeseries(path: Path, head: bytes) -> bool:
    return head.startswith(b"t,prompt_throughput,gen_throughput,running,waiting")


def _layer_profile(path: Path, head: bytes) -> bool:
    first = head.split(b"\n", 1)[0].strip()
    return first in (
        b"layer,tokens,time_us",
        b"layer,sequences,time_us",
        b"prefill_chunk,kv_prefill,n_decode,kv_decode,time_us",
    ) or (path.name == "meta.yaml" and b"profiler_version" in head)


def _aiperf_companion(path: Path, head: bytes) -> bool:
    n = path.name
    if n in ("inputs.json", "phase_manifest.json") and (
        b'"data"' in head or b'"phases"' in head or b'"session_id"' in head or b"phase" in head
    ):
        return True
    if n == "profile_export_console.txt" or n == "profile_export_raw.jsonl":
        return True
    return n == "aiperf.log" or (n.endswith(".log") and b"aiperf" in head.lower())


def _aiperf_phase_export(path: Path, head: bytes) -> bool:
    # AIPerf 0.13 writes phases/<phase>/profile_export_aiperf.{json,csv} beside the top-level
    # export: the profiling phase repeats the top-level figures, the warmup phase describes the
    # warmup requests AIPerf (and ingest) leave out. Read once, at the top, as one run.
    return (
        path.name.startswith("profile_export_aiperf.")
        and path.parent.parent.name == "phases"
        and (path.parent.parent.parent / f"profile_export_aiperf{path.suffix}").is_file()
    )


def _aiperf_csv_beside_json(path: Path, head: bytes) -> bool:
    return path.name == "profile_export_aiperf.csv" and path.with_suffix(".json").is_file()


def _guidellm_csv(path: Path, head: bytes) -> bool:
    return path.name == "benchmarks.csv" and b"Benchmark" in head[:2000]


RULES: tuple[_Rule, ...] = (
    ("same requests as the .exp.txt beside it (read from there)", _converted_twin),
    ("DistServe input workload (the run's requests are in its .exp file)", _distserve_workload),
    (
        "DistServe fitted profile coefficients (a reference, not a log)",
        _distserve_profile,
    ),
    ("vLLM engine metadata, read with the request stats beside it", _vllm_meta),
    ("LLMServingSim cluster description (not a log)", _llmservingsim_cluster),
    ("LLMServingSim validation summary (a tool summary, not per-request)", _validation_summary),
    ("vLLM 1-second metrics time series (no requests)", _timeseries),
    ("layer-wise profile: use `pipeline fit --profile DIR`", _layer_profile),
    ("AIPerf companion file (inputs, manifest, console or log)", _aiperf_companion),
    (
        "AIPerf per-phase export (the run's figures are read from the top-level export)",
        _aiperf_phase_export,
    ),
    ("AIPerf CSV export (the same figures as the JSON beside it)", _aiperf_csv_beside_json),
    ("GuideLLM CSV export (the same benchmarks as its JSON)", _guidellm_csv),
)


def companion_reason(path: Path, head: bytes) -> str | None:
    """Why this file is skipped (not a log of requests), or None if it should be read."""
    for reason, test in RULES:
        try:
            if test(path, head):
                return reason
        except OSError:
            continue
    return None

"""Our own log format: one JSON object per request (JSON lines).

This pydantic model is the single definition. The JSON Schema in ``schemas/`` is exported from it
(``pipeline schemas --write``) and the fast ingest path derives its Polars schema from it, so the
three can never drift apart.
"""

from __future__ import annotations

from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, create_model

from pipeline.schema import deployment

Status = Literal["ok", "error", "cancelled"]
Clock = Literal["unix", "relative", "request"]

# Metadata a log may lack and a user may supply with ``--set COLUMN=VALUE`` or a run manifest:
# the run, the server and every part of the deployment key.
METADATA_COLUMNS: tuple[str, ...] = ("run_id", "server", *deployment.NAMES)


class RequestRecord(BaseModel):
    """One served request, as our own JSON-lines log format records it.

    All ``*_ts`` timestamps of one record are on one clock: Unix epoch seconds (``clock = "unix"``,
    the default), seconds from any fixed origin shared by the run (``clock = "relative"``, e.g. a
    benchmark's ``perf_counter``), or seconds from the request's own start when the log has no
    arrival times (``clock = "request"``: durations are exact, but no rate, window, concurrency or
    batch can be derived). ``token_times`` are seconds since ``arrival_ts``.
    """

    model_config = ConfigDict(extra="ignore", title="RequestRecord")

    request_id: str = Field(min_length=1, description="Unique id of the request within its run.")
    run_id: str | None = Field(
        None, description="Benchmark run or serving session; defaults to the source file's name."
    )
    server: str | None = Field(
        None,
        description="Engine instance (host:port, pod) that served it; batches form per server.",
    )
    model: str | None = Field(None, description="Model name as the server reports it.")
    gpu: str | None = Field(None, description="Accelerator type, e.g. 'H100-SXM'.")
    gpu_count: int | None = Field(None, ge=1, description="GPUs serving one replica (TP x PP).")
    engine: str | None = Field(None, description="Serving engine: vllm, sglang, tgi, trtllm ...")
    engine_version: str | None = Field(None, description="Engine version string.")
    max_num_seqs: int | None = Field(None, ge=1, description="Max concurrent sequences per step.")
    max_batched_tokens: int | None = Field(None, ge=1, description="Max tokens per engine step.")
    chunked_prefill: bool | None = Field(None, description="Chunked prefill enabled.")
    attention: str | None = Field(
        None, description="Attention implementation: flash, flashinfer, sdpa, eager, ..."
    )
    weight_dtype: str | None = Field(None, description="Weight dtype: bf16, fp16, fp8, int8, int4.")
    kv_dtype: str | None = Field(None, description="KV-cache dtype: bf16, fp16, fp8, int8.")
    prompt_tokens: int = Field(ge=0, description="Input (prompt) tokens.")
    cached_tokens: int = Field(0, ge=0, description="Prompt tokens served from a prefix cache.")
    output_tokens: int = Field(ge=0, description="Generated tokens.")
    clock: Clock = Field("unix", description="Clock of the *_ts fields.")
    arrival_ts: float = Field(description="Request reached the server (s, on `clock`).")
    scheduled_ts: float | None = Field(None, description="First prefill step began (s).")
    first_token_ts: float | None = Field(None, description="First output token emitted (s).")
    finish_ts: float | None = Field(None, description="Last token emitted or request failed (s).")
    token_times: list[float] | None = Field(
        None, description="Emission times of each token or streamed chunk, s since arrival."
    )
    token_counts: list[int] | None = Field(
        None, description="Tokens carried by each emission in token_times (default 1 each)."
    )
    status: Status = Field("ok", description="ok, error or cancelled.")
    error: str | None = Field(None, description="Error message when status is not ok.")

    # Cross-field rules (times in order, cached <= prompt, ...) are checked on whole columns at
    # ingest (pipeline/ingest/validate.py) so the fast path and this model cannot disagree.


# A deployment-key part the fields above do not spell out (one added to
# pipeline/schema/deployment.py) becomes an optional field of the record, with its doc, so that
# our format, the JSON Schema export and the fast ingest path carry it with no edit here.
_PY = {pa.string(): str, pa.int32(): int, pa.int64(): int, pa.bool_(): bool}
_MORE: dict[str, Any] = {
    p.name: (_PY[p.type] | None, Field(None, description=p.doc))
    for p in deployment.KEY
    if p.name not in RequestRecord.model_fields
}
if _MORE:
    RequestRecord = create_model("RequestRecord", __base__=RequestRecord, **_MORE)  # type: ignore[misc]


EXAMPLE_RECORD: dict[str, object] = {
    "request_id": "req-000042",
    "run_id": "prod-h100-2026-11-02",
    "server": "vllm-0:8000",
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "gpu": "H100-SXM",
    "gpu_count": 1,
    "engine": "vllm",
    "engine_version": "0.6.3",
    "max_num_seqs": 256,
    "max_batched_tokens": 8192,
    "chunked_prefill": True,
    "attention": "flash",
    "weight_dtype": "bf16",
    "kv_dtype": "bf16",
    "prompt_tokens": 1024,
    "cached_tokens": 256,
    "output_tokens": 4,
    "clock": "unix",
    "arrival_ts": 1762041600.125,
    "scheduled_ts": 1762041600.131,
    "first_token_ts": 1762041600.189,
    "finish_ts": 1762041600.228,
    "token_times": [0.064, 0.077, 0.090, 0.103],
    "token_counts": [1, 1, 1, 1],
    "status": "ok",
    "error": None,
}

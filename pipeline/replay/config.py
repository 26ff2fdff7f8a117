"""The what-if configuration (``whatif.toml``) as a pydantic model.

Every field is optional: what is left out is taken from the recorded run (its model, GPU, GPU
count, scheduler settings, number of servers), so an empty file replays a run under its own
configuration. See docs/replay.md for the schema with examples.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

Dtype = Literal["bf16", "fp16", "fp8", "int8", "int4"]


def _seconds(value: Any) -> Any:
    """'500ms', '2s', '1.5min' -> seconds, the one duration syntax of the CLI; a number is
    seconds already (issue 12, point 8)."""
    if isinstance(value, str):
        from pipeline.report.period import parse_duration

        d = parse_duration(value)
        if d is None:
            raise ValueError(f"{value!r}: give a duration such as 500ms, 2s or 1.5min")
        return d.total_seconds()
    return value


Seconds = Annotated[float, BeforeValidator(_seconds)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Deployment(_Strict):
    model: str | None = Field(None, description="Model (catalog name); default: as recorded.")
    gpu: str | None = Field(None, description="Accelerator (catalog name); default: as recorded.")
    tp: int | None = Field(None, ge=1, description="GPUs per replica (tensor parallel).")
    replicas: int | None = Field(None, ge=1, description="Servers; default: recorded servers.")
    routing: Literal["round-robin", "least-loaded"] = "round-robin"
    weight_dtype: Dtype | None = None
    kv_dtype: Literal["bf16", "fp16", "fp8", "int8"] | None = None
    flash_attention: bool | None = Field(None, description="False: eager attention.")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)


class Scheduler(_Strict):
    policy: Literal["continuous", "static"] = "continuous"
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    chunked_prefill: bool | None = None
    chunk_size: int | None = Field(None, ge=1, description="Per-request cap on one chunk.")
    mixed_prefill: bool = Field(True, description="Unchunked: prefills share steps with decodes.")
    kv_layout: Literal["paged", "contiguous"] = "paged"
    block_size: int = Field(16, ge=1)
    max_seq_len: int | None = Field(
        None, ge=1, description="Contiguous / static reservation per request [model context]."
    )
    preemption: Literal["recompute"] = "recompute"


class Disaggregation(_Strict):
    enabled: bool = False
    prefill_replicas: int = Field(1, ge=1)
    decode_replicas: int = Field(1, ge=1)
    prefill_tp: int | None = Field(None, ge=1, description="Default: deployment tp.")
    decode_tp: int | None = Field(None, ge=1, description="Default: deployment tp.")
    kv_bandwidth_gbps: float = Field(25.0, gt=0, description="KV transfer, GB/s (1e9 B/s).")
    kv_latency_s: Seconds = Field(1e-3, ge=0, description="Fixed cost per transfer.")


class Cost(_Strict):
    source: Literal["auto", "fit", "roofline"] = "auto"
    mfu: float | None = Field(None, gt=0, le=1)
    mbu: float | None = Field(None, gt=0, le=1)
    step_overhead: float | None = Field(None, ge=0)
    seq_overhead: float | None = Field(None, ge=0)


class WorkloadOptions(_Strict):
    rate_scale: float = Field(1.0, gt=0, description=">1 compresses arrivals (more load).")
    max_requests: int | None = Field(None, ge=1)


class Slo(_Strict):
    ttft_s: Seconds | None = Field(None, gt=0, description="TTFT objective (0.5, '500ms').")
    tpot_s: Seconds | None = Field(None, gt=0, description="TPOT objective (0.05, '50ms').")


class WhatIf(_Strict):
    name: str = Field("whatif", pattern=r"^[A-Za-z0-9_.-]+$")
    deployment: Deployment = Deployment()
    scheduler: Scheduler = Scheduler()
    disaggregation: Disaggregation = Disaggregation()
    cost: Cost = Cost()
    workload: WorkloadOptions = WorkloadOptions()
    slo: Slo = Slo()
    gpu_hour_usd: dict[str, float] = Field(
        default_factory=dict, description="$/GPU-hour by GPU name; without it cost = GPU-hours."
    )

    @model_validator(mode="after")
    def _check(self) -> WhatIf:
        if self.scheduler.policy == "static" and self.disaggregation.enabled:
            raise ValueError("static batching with disaggregation is not modelled")
        return self

    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    def canonical(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)

    def with_value(self, key: str, value: Any) -> WhatIf:
        """A copy with one dotted key set ('scheduler.chunk_size', 'deployment.replicas')."""
        data = self.model_dump()
        section, _, name = key.partition(".")
        if not name:
            data[section] = value
        else:
            data.setdefault(section, {})[name] = value
        return WhatIf.model_validate(data)


def load_whatif(path: str | Path | None) -> WhatIf:
    """Read a whatif.toml (None: an empty configuration, i.e. replay as recorded)."""
    if path is None:
        return WhatIf()
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {p}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{p} is not valid TOML: {exc}") from None
    data.setdefault("name", p.stem.replace(" ", "_"))
    try:
        return WhatIf.model_validate(data)
    except ValidationError as exc:
        lines = [
            f"{'.'.join(str(x) for x in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
        ]
        raise ValueError(f"{p}: " + "; ".join(lines)) from None

"""The catalog and :mod:`pipeline.physics.roofline` applied to the report's aggregated rows.

Each row is one bucket (a prompt-length octave or a decode-batch bucket) of one deployment; the
FLOPs and bytes come from the project's single copy of the formulas in ``pipeline.physics``. A
deployment whose model or GPU the catalog does not know gets no physics; the sections say so.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline import catalog
from pipeline.physics import roofline as rf


@dataclass(frozen=True)
class CatalogFacts:
    model: catalog.Model
    gpu: catalog.GPU
    gpu_count: int
    weight_dtype: str
    kv_dtype: str

    @property
    def compute_dtype(self) -> str:
        return rf.compute_dtype_for(self.gpu, self.weight_dtype)

    @property
    def peak_flops(self) -> float:
        """Per GPU, FLOP/s."""
        return self.gpu.peak_flops(self.compute_dtype)

    @property
    def bandwidth(self) -> float:
        """Per GPU, bytes/s."""
        return self.gpu.bandwidth

    @property
    def critical_batch(self) -> float:
        return rf.critical_batch(self.gpu, self.weight_dtype)

    # -- prefill, over a bucket of requests ------------------------------------------------
    def prefill_flops(self, new_tokens: float, attn_work: float) -> float:
        """Sum over requests of 2 P T + 4 L d T (S + T/2), given sum T and sum T (S + T/2).

        The formula is linear in T and in T (S + T/2), so one call with T = sum T and the S that
        reproduces the summed attention term gives the exact total.
        """
        if new_tokens <= 0:
            return 0.0
        s_equiv = attn_work / new_tokens - new_tokens / 2.0
        return float(rf.prefill_flops(self.model, new_tokens, s_equiv))

    def prefill_bytes(self, requests: float, new_tokens: float, cached_tokens: float) -> float:
        """Weights once per request (a lower bound when prefills batch) plus KV read/written."""
        mean_new = new_tokens / requests if requests else 0.0
        weights = float(rf.weight_bytes_read(self.model, mean_new, self.weight_dtype)) * requests
        kv = rf.kv_bytes_per_token(self.model, self.kv_dtype) * (new_tokens + cached_tokens)
        return weights + kv

    # -- decode, one step of B sequences of mean context c ----------------------------------
    def decode_flops(self, batch: float, context: float) -> float:
        return float(rf.decode_flops(self.model, batch, batch * context))

    def decode_bytes(self, batch: float, context: float) -> float:
        return float(
            rf.decode_bytes(
                self.model, batch, batch * context,
                weight_dtype=self.weight_dtype, kv_dtype=self.kv_dtype,
            )
        )  # fmt: skip

    def decode_floor_s(self, batch: float, context: float) -> float:
        """The roofline's lower bound on one decode step (s) at this batch and context."""
        n = self.gpu_count
        return max(
            self.decode_bytes(batch, context) / (self.bandwidth * n),
            self.decode_flops(batch, context) / (self.peak_flops * n),
        )


def catalog_facts(
    model: str | None,
    gpu: str | None,
    gpu_count: int | None = 1,
    weight_dtype: str | None = "bf16",
    kv_dtype: str | None = "bf16",
) -> CatalogFacts | None:
    """The catalog's numbers for this deployment, or None when the model or GPU is unknown."""
    if not model or not gpu or model == "?" or gpu == "?":
        return None
    wd, kd = (weight_dtype or "bf16").lower(), (kv_dtype or "bf16").lower()
    if wd not in rf.DTYPE_BYTES or kd not in rf.DTYPE_BYTES:
        return None
    try:
        m, g = catalog.model(model), catalog.gpu(gpu)
    except (catalog.UnknownName, KeyError, ValueError):
        return None
    return CatalogFacts(m, g, max(int(gpu_count or 1), 1), wd, kd)

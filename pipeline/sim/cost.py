"""The simulator's cost model from two StepCosts: prefill-carrying steps and decode-only steps.

A fit gives each phase its own efficiencies and overheads; the engine asks one object for every
step's time. Generator, replay and attribution all hand the engine this one adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.physics import DecodeLines, StepCost


@dataclass(frozen=True)
class PhaseCost:
    """The engine's cost model: prefill-carrying steps and decode-only steps priced apart."""

    prefill: StepCost
    decode: StepCost

    def time_of(
        self, tokens: float, seqs: float, attn_pairs: float, kv_tokens: float, score_elems: float
    ) -> float:
        # tokens > seqs: some sequence computes more than one token, i.e. a prefill chunk.
        c = self.prefill if tokens > seqs else self.decode
        return c.time_of(tokens, seqs, attn_pairs, kv_tokens, score_elems)

    def decode_lines(self, batch: int, sum_context: float) -> DecodeLines:
        # Closed-form decode runs: decode-only steps, the decode phase's parameters.
        return self.decode.decode_lines(batch, sum_context)

    def params(self) -> dict[str, Any]:
        return {"prefill": self.prefill.params(), "decode": self.decode.params()}

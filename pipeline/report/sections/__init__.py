"""One module per report section, each with ``build(ctx) -> Section``; ORDER is the page order."""

from __future__ import annotations

ORDER = (
    "headline",
    "why",
    "parity",
    "distributions",
    "load",
    "over_time",
    "changes",
    "ttft_prompt",
    "ttft_breakdown",
    "decode_batch",
    "roofline",
    "efficiency",
    "model",
    "attribution",
    "replay",
    "claims",
    "quality",
    "definitions",
)

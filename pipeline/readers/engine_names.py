"""The serving engine a benchmark client's backend name implies."""

from __future__ import annotations

_ENGINES = {
    "vllm": "vllm",
    "sglang": "sglang",
    "sglang-native": "sglang",
    "sglang-oai": "sglang",
    "sglang-oai-chat": "sglang",
    "tgi": "tgi",
    "lmdeploy": "lmdeploy",
    "trt": "trtllm",
    "tensorrt-llm": "trtllm",
    "trtllm": "trtllm",
}


def engine_from_backend(backend: object) -> str | None:
    """The serving engine a benchmark backend name implies (None for generic OpenAI clients)."""
    return _ENGINES.get(str(backend).lower()) if isinstance(backend, str) else None

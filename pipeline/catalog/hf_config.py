"""A Hugging Face ``config.json`` as a catalog model entry.

Two ways in (docs/catalog.md): a ``[model.<key>]`` table in ``pipeline_catalog.toml`` with
``config = "path/to/config.json"`` (fields written beside it override the file's), or
``--model-config FILE`` on the commands that read the catalog. The file's ``model_type`` picks
the family whose parameter count applies (pipeline/catalog/params.py); a type whose layers we do
not know how to count is refused with the list of those we do, never guessed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# model_type -> catalog family. Mistral (incl. Nemo and Small) is a Llama decoder.
FAMILY_OF_TYPE = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3_moe",
    "mixtral": "mixtral",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "gemma3_text": "gemma3",
    "deepseek_v2": "deepseek",
    "deepseek_v3": "deepseek",
    "gpt_oss": "gpt_oss",
    "opt": "opt",
}

# Multimodal configs keep the language model in a nested block.
_TEXT_BLOCKS = ("text_config", "language_config", "llm_config")


class ConfigError(ValueError):
    """A config.json the catalog cannot use (message says which field or type, and the file)."""


def read_config(path: str | Path) -> dict[str, Any]:
    """The JSON object of a config.json file (or of a directory holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        raw = json.loads(p.read_text("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file (expected a Hugging Face config.json)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: a config.json holds one JSON object")
    return raw


def default_name(config: dict[str, Any], path: str | Path) -> str:
    """The name a log most likely uses: ``_name_or_path`` when it is a hub id, else the folder."""
    named = str(config.get("_name_or_path") or "")
    if named and not named.startswith(("/", ".")):
        return named
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    return folder.name or p.stem


def entry_from_config(config: dict[str, Any], origin: str) -> dict[str, Any]:
    """Catalog fields (the units of models.toml) from a config.json object."""
    outer_type = str(config.get("model_type", ""))
    text = config
    for block in _TEXT_BLOCKS:
        if isinstance(config.get(block), dict):
            text = {"model_type": outer_type, **config[block]}
            break
    mtype = str(text.get("model_type") or outer_type)
    family = FAMILY_OF_TYPE.get(mtype) or FAMILY_OF_TYPE.get(outer_type)
    if family is None:
        raise ConfigError(
            f"{origin}: model_type {mtype or '(none)'!r} is not one the catalog can count; "
            f"known: {', '.join(sorted(FAMILY_OF_TYPE))}. Write the entry's fields by hand in "
            "pipeline_catalog.toml instead (docs/catalog.md)."
        )

    def need(*names: str) -> int:
        for n in names:
            if text.get(n) is not None:
                return int(text[n])
        raise ConfigError(f"{origin}: config lacks {' / '.join(names)} (model_type {mtype!r})")

    def opt(name: str, default: int = 0) -> int:
        v = text.get(name)
        return default if v is None else int(v)

    hidden = need("hidden_size", "d_model")
    heads = need("num_attention_heads")
    entry: dict[str, Any] = {
        "family": family,
        "layers": need("num_hidden_layers"),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": opt("num_key_value_heads", heads),
        "vocab": need("vocab_size"),
        "max_context": need("max_position_embeddings"),
        "tied_embeddings": bool(text.get("tie_word_embeddings", family in ("gemma2", "gemma3"))),
    }
    if family == "opt":
        entry |= {"intermediate": need("ffn_dim"), "head_dim": hidden // heads}
        entry["tied_embeddings"] = bool(text.get("tie_word_embeddings", True))
        return entry
    entry["intermediate"] = need("intermediate_size")
    entry["head_dim"] = opt("head_dim") or hidden // heads
    experts = opt("num_local_experts") or opt("num_experts") or opt("n_routed_experts")
    if experts > 1:
        entry |= {
            "n_experts": experts,
            "experts_per_token": need("num_experts_per_tok"),
            "moe_intermediate": opt("moe_intermediate_size"),
            "shared_experts": opt("n_shared_experts"),
            "dense_layers": opt("first_k_dense_replace"),
        }
    if opt("kv_lora_rank"):
        rope = need("qk_rope_head_dim")
        entry |= {
            "kv_lora_rank": opt("kv_lora_rank"),
            "q_lora_rank": opt("q_lora_rank"),
            "qk_rope_head_dim": rope,
            "head_dim": need("qk_nope_head_dim") + rope,
            "v_head_dim": need("v_head_dim"),
        }
    entry |= _sliding(text, entry["layers"])
    return entry


def _sliding(text: dict[str, Any], layers: int) -> dict[str, int]:
    """Window and how many layers use it, from layer_types or the Gemma pattern fields."""
    window = text.get("sliding_window")
    if not window or text.get("use_sliding_window") is False:
        return {}
    kinds = text.get("layer_types")
    if isinstance(kinds, list) and kinds:
        n = sum(1 for k in kinds if "sliding" in str(k))
    elif text.get("sliding_window_pattern"):  # gemma3: every pattern-th layer is global
        pattern = int(text["sliding_window_pattern"])
        n = layers - layers // pattern
    elif str(text.get("model_type")) == "gemma2":  # alternating local / global
        n = layers // 2
    else:
        n = layers
    return {"sliding_window": int(window), "sliding_layers": int(n)} if n else {}


def load_entry(path: str | Path, base: Path | None = None) -> tuple[dict[str, Any], str]:
    """(catalog fields, default name) of the config.json at ``path`` (relative to ``base``)."""
    p = Path(path)
    if base is not None and not p.is_absolute():
        p = base / p
    config = read_config(p)
    return entry_from_config(config, str(p)), default_name(config, p)

"""Load the packaged catalog and merge the user's ``pipeline_catalog.toml`` over it.

User file: ``$PIPELINE_CATALOG`` if set, else ``./pipeline_catalog.toml`` if present. It has
``[gpu.<key>]`` and ``[model.<key>]`` tables in the packaged files' units. A key that already
exists is updated field by field (so ``[gpu.h100-sxm] bandwidth_tbs = 3.0`` overrides one number);
a new key must give every required field (a model's params may be left out: they are derived).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pipeline.catalog.entries import GPU, Model
from pipeline.catalog.hf_config import load_entry
from pipeline.catalog.names import NameIndex, gpu_keys, model_keys
from pipeline.catalog.params import count_params

USER_FILE = "pipeline_catalog.toml"
ENV_VAR = "PIPELINE_CATALOG"

_GPU_REQUIRED = ("name", "memory_gib", "bandwidth_tbs", "bf16_tflops")
_MODEL_REQUIRED = (
    "name", "family", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab",
    "intermediate", "max_context",
)  # fmt: skip
# Integer architecture fields a dense GQA model leaves at their defaults (entries.Model).
_MODEL_OPTIONAL = {
    "n_experts": 1, "experts_per_token": 1, "moe_intermediate": 0, "shared_experts": 0,
    "dense_layers": 0, "kv_lora_rank": 0, "q_lora_rank": 0, "qk_rope_head_dim": 0,
    "v_head_dim": 0, "sliding_window": 0, "sliding_layers": 0,
}  # fmt: skip


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GPU]
    models: dict[str, Model]
    gpu_index: NameIndex
    model_index: NameIndex


def user_catalog_path() -> Path | None:
    """The user's catalog file, or None when there is none."""
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env)
        if not path.is_file():
            raise FileNotFoundError(f"{ENV_VAR}={env} does not name a file")
        return path
    local = Path.cwd() / USER_FILE
    return local if local.is_file() else None


# config.json files named with --model-config in this process (add_model_config).
_CONFIG_FILES: list[str] = []


def add_model_config(path: str | Path, name: str | None = None) -> str:
    """Use a Hugging Face config.json as a model for the rest of this process.

    The model is found by ``name`` when given, else by the file's ``_name_or_path`` or its
    folder's name (a hub snapshot folder ``models--Qwen--Qwen3-8B/snapshots/<hash>`` reads as
    ``Qwen/Qwen3-8B``). Returns the catalog key. Raises ConfigError for an unusable file.
    """
    _entry, default = load_entry(path)  # read now so that a bad file fails at the option
    label = name or _hub_name(Path(path)) or default
    _CONFIG_FILES.append(f"{label}={Path(path).resolve()}")
    return _config_key(label)


def _hub_name(p: Path) -> str | None:
    for part in p.resolve().parts:
        if part.startswith("models--"):
            return part.removeprefix("models--").replace("--", "/")
    return None


def _config_key(label: str) -> str:
    return "config-" + re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def catalog() -> Catalog:
    """The merged catalog (cached until the user file changes)."""
    path = user_catalog_path()
    stamp = path.stat().st_mtime_ns if path else 0
    return _build(str(path) if path else "", stamp, tuple(_CONFIG_FILES))


def _packaged(name: str) -> dict[str, Any]:
    text = resources.files("pipeline.catalog").joinpath("data", name).read_text("utf-8")
    return tomllib.loads(text)


@lru_cache(maxsize=8)
def _build(user_path: str, _stamp: int, config_files: tuple[str, ...] = ()) -> Catalog:
    gpu_raw = _packaged("gpus.toml")
    model_raw = _packaged("models.toml")
    if user_path:
        with open(user_path, "rb") as fh:
            user = tomllib.load(fh)
        _merge(gpu_raw, user.get("gpu", {}), user_path)
        models = user.get("model", {})
        base = Path(user_path).parent
        for key, fields in models.items():
            if isinstance(fields, dict) and "config" in fields:
                models[key] = _from_config(fields, base)
                model_raw.pop(key, None)  # a config replaces the entry, derived params included
        _merge(model_raw, models, user_path)
    for item in config_files:
        label, _, file = item.partition("=")
        entry = _from_config({"config": file, "name": label}, None)
        # A config for a model the catalog has replaces that entry, keeping its aliases.
        key = _existing_key(model_raw, label) or _config_key(label)
        if key in model_raw:
            entry["aliases"] = model_raw[key].get("aliases", [])
            entry["hf_id"] = model_raw[key].get("hf_id", label)
        model_raw[key] = entry
    gpus = {key: _gpu(key, raw, user_path) for key, raw in gpu_raw.items()}
    models = {key: _model(key, raw, user_path) for key, raw in model_raw.items()}
    gpu_index = NameIndex("gpu", {k: (g.name, k, *g.aliases) for k, g in gpus.items()}, gpu_keys)
    model_index = NameIndex(
        "model", {k: (m.name, m.hf_id, k, *m.aliases) for k, m in models.items()}, model_keys
    )
    return Catalog(gpus, models, gpu_index, model_index)


def _merge(base: dict[str, Any], extra: dict[str, Any], origin: str) -> None:
    for key, fields in extra.items():
        if not isinstance(fields, dict):
            raise ValueError(f"{origin}: [{key}] must be a table of fields")
        merged = dict(base.get(key, {}))
        merged.update(fields)
        base[key] = merged


def _existing_key(model_raw: dict[str, Any], label: str) -> str | None:
    wanted = set(model_keys(label))
    for key, raw in model_raw.items():
        names = (raw.get("name", ""), raw.get("hf_id", ""), key, *raw.get("aliases", ()))
        if any(wanted & set(model_keys(n)) for n in names if n):
            return key
    return None


def _from_config(fields: dict[str, Any], base: Path | None) -> dict[str, Any]:
    """A model table whose ``config`` names a config.json: the file's fields, then the table's."""
    entry, default = load_entry(str(fields["config"]), base)
    entry |= {"name": default, "source": f"config.json {fields['config']}"}
    entry |= {k: v for k, v in fields.items() if k != "config"}
    entry.setdefault("hf_id", entry["name"])
    return entry


def _missing(raw: dict[str, Any], required: tuple[str, ...], what: str, origin: str) -> None:
    lacking = [f for f in required if f not in raw]
    if lacking:
        where = f" (from {origin})" if origin else ""
        raise ValueError(f"catalog {what} lacks {', '.join(lacking)}{where}")


def _scaled(value: object, exponent: int) -> float:
    """value * 10**exponent without binary rounding drift (2.039 TB/s -> exactly 2.039e12)."""
    return float(f"{value}e{exponent}")


def _gpu(key: str, raw: dict[str, Any], origin: str) -> GPU:
    _missing(raw, _GPU_REQUIRED, f"gpu {key!r}", origin)
    optional = {
        name: _scaled(raw[f"{name}_tflops"], 12) if raw.get(f"{name}_tflops") else None
        for name in ("fp8", "int8")
    }
    return GPU(
        key=key,
        name=raw["name"],
        memory_bytes=round(float(raw["memory_gib"]) * 2**30),
        bandwidth=_scaled(raw["bandwidth_tbs"], 12),
        bf16_flops=_scaled(raw["bf16_tflops"], 12),
        fp8_flops=optional["fp8"],
        int8_flops=optional["int8"],
        aliases=tuple(raw.get("aliases", ())),
        sources=dict(raw.get("source", {})),
    )


def _model(key: str, raw: dict[str, Any], origin: str) -> Model:
    _missing(raw, _MODEL_REQUIRED, f"model {key!r}", origin)
    shape = {f: int(raw[f]) for f in _MODEL_REQUIRED if f not in ("name", "family")}
    extra: dict[str, Any] = {"tied_embeddings": bool(raw.get("tied_embeddings", False))}
    extra |= {f: int(raw.get(f, default)) for f, default in _MODEL_OPTIONAL.items()}
    sliding = ("sliding_window", "sliding_layers")  # no weights of their own
    counted = {f: v for f, v in extra.items() if f not in sliding}
    total, active = count_params(family=raw["family"], **shape, **counted)
    return Model(
        key=key,
        name=raw["name"],
        hf_id=raw.get("hf_id", raw["name"]),
        family=raw["family"],
        params=int(raw.get("params", total)),
        active_params=int(raw.get("active_params", raw.get("params", active))),
        **shape,
        **extra,
        aliases=tuple(raw.get("aliases", ())),
        source=str(raw.get("source", origin)),
    )

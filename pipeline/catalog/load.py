"""Load the packaged catalog and merge the user's ``pipeline_catalog.toml`` over it.

User file: ``$PIPELINE_CATALOG`` if set, else ``./pipeline_catalog.toml`` if present. It has
``[gpu.<key>]`` and ``[model.<key>]`` tables in the packaged files' units. A key that already
exists is updated field by field (so ``[gpu.h100-sxm] bandwidth_tbs = 3.0`` overrides one number);
a new key must give every required field (a model's params may be left out: they are derived).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pipeline.catalog.entries import GPU, Model
from pipeline.catalog.names import NameIndex, gpu_keys, model_keys
from pipeline.catalog.params import count_params

USER_FILE = "pipeline_catalog.toml"
ENV_VAR = "PIPELINE_CATALOG"

_GPU_REQUIRED = ("name", "memory_gib", "bandwidth_tbs", "bf16_tflops")
_MODEL_REQUIRED = (
    "name", "family", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab",
    "intermediate", "max_context",
)  # fmt: skip


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


def catalog() -> Catalog:
    """The merged catalog (cached until the user file changes)."""
    path = user_catalog_path()
    stamp = path.stat().st_mtime_ns if path else 0
    return _build(str(path) if path else "", stamp)


def _packaged(name: str) -> dict[str, Any]:
    text = resources.files("pipeline.catalog").joinpath("data", name).read_text("utf-8")
    return tomllib.loads(text)


@lru_cache(maxsize=8)
def _build(user_path: str, _stamp: int) -> Catalog:
    gpu_raw = _packaged("gpus.toml")
    model_raw = _packaged("models.toml")
    if user_path:
        with open(user_path, "rb") as fh:
            user = tomllib.load(fh)
        _merge(gpu_raw, user.get("gpu", {}), user_path)
        _merge(model_raw, user.get("model", {}), user_path)
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
    extra = {
        "tied_embeddings": bool(raw.get("tied_embeddings", False)),
        "n_experts": int(raw.get("n_experts", 1)),
        "experts_per_token": int(raw.get("experts_per_token", 1)),
    }
    total, active = count_params(family=raw["family"], **shape, **extra)
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

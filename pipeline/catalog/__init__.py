"""Accelerator and model catalog: datasheet and config.json numbers, each with its source.

    >>> from pipeline import catalog
    >>> catalog.gpu("NVIDIA H100 80GB HBM3").name
    'H100-SXM'
    >>> catalog.model("meta-llama/Llama-3.1-8B-Instruct").kv_heads
    8

Data lives in ``pipeline/catalog/data/*.toml``; users add or override entries in
``pipeline_catalog.toml`` (current directory, or the path in ``$PIPELINE_CATALOG``).
"""

from __future__ import annotations

from pipeline.catalog.entries import GPU, Model
from pipeline.catalog.load import catalog
from pipeline.catalog.names import UnknownName

__all__ = ["GPU", "Model", "UnknownName", "gpu", "gpus", "model", "models", "typed_gpu"]


def gpu(name: str) -> GPU:
    """The accelerator a log calls ``name`` ('H100-SXM', 'NVIDIA H100 80GB HBM3', 'h100-80gb')."""
    cat = catalog()
    return cat.gpus[cat.gpu_index.find(name)]


def model(name: str) -> Model:
    """The model a log calls ``name`` ('meta-llama/Llama-3.1-8B-Instruct', 'llama-3.1-8b')."""
    cat = catalog()
    return cat.models[cat.model_index.find(name)]


def gpus() -> list[GPU]:
    """Every accelerator in the merged catalog."""
    return list(catalog().gpus.values())


def models() -> list[Model]:
    """Every model in the merged catalog."""
    return list(catalog().models.values())


def typed_gpu(name: str) -> GPU:
    """The accelerator a user typed (``--set gpu=...``, a run manifest), refusing a bare family
    name that fits several entries: 'H100' could be H100-SXM or H100-PCIe, whose bandwidth
    differs by 67 %, so the user must say which. Names a log writes go through :func:`gpu`."""
    from pipeline.catalog.names import normalise

    cat = catalog()
    key = cat.gpu_index.find(name)  # unknown -> UnknownName with close matches
    typed = normalise(name)
    exact = {normalise(g.key) for g in cat.gpus.values()} | {
        normalise(g.name) for g in cat.gpus.values()
    }
    if typed not in exact:
        fits = sorted(
            g.name
            for g in cat.gpus.values()
            if any(normalise(n).startswith(typed) for n in (g.key, g.name, *g.aliases))
        )
        if len(fits) > 1:
            raise UnknownName(
                f"gpu {name!r} is ambiguous: {' or '.join(fits)}? Give the exact one "
                f"(e.g. --set gpu={fits[0]})."
            )
    return cat.gpus[key]

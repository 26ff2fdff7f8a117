"""Find every reader module and pick the one that recognises a file."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path

import pipeline.readers
from pipeline.readers.base import Reader

_NOT_READERS = {"base", "registry"}


@cache
def readers() -> tuple[Reader, ...]:
    """All readers, most specific first (module-level PRIORITY, lower first)."""
    found = []
    for info in pkgutil.iter_modules(pipeline.readers.__path__):
        if info.name in _NOT_READERS:
            continue
        module = importlib.import_module(f"pipeline.readers.{info.name}")
        reader = getattr(module, "READER", None)
        if reader is not None:
            found.append((getattr(module, "PRIORITY", 50), reader.name, reader))
        # A module of readers defined by data (arrival_traces: one per mapping definition).
        prio = getattr(module, "PRIORITIES", {})
        for r in getattr(module, "READERS", ()):
            found.append((prio.get(r.name, 50), r.name, r))
    return tuple(r for _, _, r in sorted(found, key=lambda t: (t[0], t[1])))


def by_name(name: str) -> Reader:
    for r in readers():
        if r.name == name:
            return r
    known = ", ".join(r.name for r in readers())
    raise KeyError(f"unknown format {name!r}; known formats: {known}")


def detect(path: Path, head: bytes) -> Reader | None:
    for r in readers():
        try:
            if r.sniff(path, head):
                return r
        except Exception:  # a sniffer must never stop detection
            continue
    return None

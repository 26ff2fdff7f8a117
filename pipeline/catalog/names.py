"""Name normalisation and lookup: many spellings in logs, one catalog entry."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping

# Words that vary between tools but never tell two entries apart.
_GPU_NOISE = {"nvidia", "amd", "geforce", "instinct", "tesla", "google"}
# Model-name suffixes for variants that share the architecture (fine-tunes, quantised copies).
_MODEL_VARIANT = {
    "instruct", "chat", "hf", "base", "it", "awq", "gptq", "fp8", "int8", "int4", "w8a8",
    "w4a16", "w8a16", "bnb", "4bit", "8bit", "dynamic", "gguf", "quantized",
}  # fmt: skip


_RELEASE = re.compile(r"^\d{4}$")


class UnknownName(ValueError):
    """A GPU or model name that matches no catalog entry (message lists close matches)."""


def normalise(name: str) -> str:
    """Lower case with every non-alphanumeric character removed: 'H100-SXM' -> 'h100sxm'."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[\s_\-/]+", name.lower()) if t]


def gpu_keys(name: str) -> list[str]:
    """Normalised forms to try for an accelerator name, most specific first."""
    tokens = [t for t in _tokens(name) if t not in _GPU_NOISE]
    return list(dict.fromkeys([normalise(name), normalise("".join(tokens))]))


def model_keys(name: str) -> list[str]:
    """Normalised forms to try for a model name: full id, basename, basename without variants."""
    base = name.rsplit("/", 1)[-1]
    # Variant words and four-digit release tags (Mistral-Nemo-Instruct-2407, Qwen3-...-2507).
    stripped = [t for t in _tokens(base) if t not in _MODEL_VARIANT and not _RELEASE.match(t)]
    return list(dict.fromkeys([normalise(name), normalise(base), normalise("-".join(stripped))]))


class NameIndex:
    """Maps every normalised alias to one entry key; refuses an alias claimed by two entries."""

    def __init__(
        self,
        kind: str,
        aliases: Mapping[str, Iterable[str]],
        forms: Callable[[str], list[str]],
    ) -> None:
        self.kind = kind
        self._forms = forms
        self._index: dict[str, str] = {}
        self._display: dict[str, str] = {}
        for key, names in aliases.items():
            for alias in names:
                for norm in forms(alias):
                    other = self._index.get(norm)
                    if other is not None and other != key:
                        raise ValueError(f"{kind} alias {alias!r} names both {other!r} and {key!r}")
                    self._index[norm] = key
                    self._display.setdefault(norm, alias)

    def find(self, original: str) -> str:
        """The key of the entry ``original`` names; raises :class:`UnknownName` with suggestions."""
        candidates = self._forms(original)
        for cand in candidates:
            if cand in self._index:
                return self._index[cand]
        close = difflib.get_close_matches(candidates[-1], list(self._index), n=5, cutoff=0.5)
        suggestions = list(dict.fromkeys(self._display[c] for c in close))
        hint = f" Close matches: {', '.join(suggestions)}." if suggestions else ""
        how = (
            ' or point an entry at its Hugging Face config.json (`config = "path/config.json"`,'
            " or `--model-config FILE`)"
            if self.kind == "model"
            else " with name, memory_gib, bandwidth_tbs and bf16_tflops"
        )
        raise UnknownName(
            f"unknown {self.kind} {original!r}.{hint} Add it to pipeline_catalog.toml "
            f"(or the file named by PIPELINE_CATALOG) under [{self.kind}.<key>]{how}; "
            "see docs/catalog.md."
        )

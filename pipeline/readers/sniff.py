"""What a file's first bytes say: its text, first line, suffix, JSON keys and CSV header."""

from __future__ import annotations

from pathlib import Path


def head_text(head: bytes) -> str:
    return head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")


def first_line(head: bytes) -> str:
    return head_text(head).split("\n", 1)[0].strip()


def has_suffix(path: Path, *suffixes: str) -> bool:
    name = path.name.lower()
    for ext in (".gz", ".zst", ".zstd"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    return name.endswith(suffixes)


def csv_header(head: bytes) -> list[str]:
    return [h.strip().strip('"') for h in first_line(head).split(",")]

"""HTML fragments for the report: every piece of text that came from data goes through ``esc``.

Section builders never write raw data into markup themselves; they call ``table``, ``para`` and
``esc`` here, so a model called ``<img src=x onerror=alert(1)>`` is shown as text everywhere.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

Fmt = Callable[[Any], str]


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def script_json(obj: object) -> str:
    """JSON safe to place inside <script>: no '<', '>' or '&' can close the element."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False, default=str)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


# -- number formats (seconds are stored; milliseconds are shown) --------------------------------
def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def ms(v: object) -> str:
    return "–" if _missing(v) else f"{float(v) * 1000:,.1f}"  # type: ignore[arg-type]


def fmt_num(v: object, digits: int = 0) -> str:
    if _missing(v):
        return "–"
    return f"{float(v):,.{digits}f}" if digits else f"{round(float(v)):,}"  # type: ignore[arg-type]


def pct(v: object, digits: int = 1) -> str:
    return "–" if _missing(v) else f"{float(v) * 100:.{digits}f} %"  # type: ignore[arg-type]


def signed_pct(v: object) -> str:
    return "–" if _missing(v) else f"{float(v) * 100:+.1f} %"  # type: ignore[arg-type]


def sci(v: object) -> str:
    return "–" if _missing(v) else f"{float(v):.3g}"  # type: ignore[arg-type]


def text(v: object) -> str:
    return "–" if v is None else str(v)


@dataclass(frozen=True)
class Col:
    name: str
    header: str
    fmt: Fmt = text
    numeric: bool = False
    css: Callable[[dict], str] | None = None  # row -> extra class for this cell


def table(df: pl.DataFrame, cols: Sequence[Col], caption: str = "", max_rows: int = 200) -> str:
    """An escaped HTML table of ``df`` (at most ``max_rows`` rows, the rest counted)."""
    head = "".join(f'<th class="{"num" if c.numeric else ""}">{esc(c.header)}</th>' for c in cols)
    rows = []
    for row in df.head(max_rows).iter_rows(named=True):
        cells = []
        for c in cols:
            classes = " ".join(
                filter(None, ["num" if c.numeric else "", c.css(row) if c.css else ""])
            )
            cells.append(f'<td class="{classes}">{esc(c.fmt(row.get(c.name)))}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = ""
    if df.height > max_rows:
        more = f'<p class="note">{df.height - max_rows:,} more rows not shown.</p>'
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (
        f'<div class="table-wrap"><table>{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>{more}"
    )


def para(s: str, cls: str = "") -> str:
    c = f' class="{esc(cls)}"' if cls else ""
    return f"<p{c}>{esc(s)}</p>"


@dataclass
class Section:
    """One report section: a title, an HTML body built with this module, and figures for JSON."""

    id: str
    title: str
    body: str = ""
    absent: str | None = None  # one line saying what data is missing, instead of a body
    summary: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        inner = para(self.absent, "absent") if self.absent else self.body
        return (
            f'<section id="{esc(self.id)}" data-section="{esc(self.id)}">'
            f"<h2>{esc(self.title)}</h2>{inner}</section>"
        )

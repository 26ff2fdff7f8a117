"""``reports/index.html``: every report in the folder, newest period first, regressions flagged."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipeline.report.html import esc
from pipeline.report.page import CSP, CSS


def entries(out_dir: Path) -> list[dict]:
    out = []
    for p in out_dir.glob("report-*.json"):
        try:
            meta = json.loads(p.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if (out_dir / str(meta.get("file", ""))).is_file():
            out.append(meta)
    return sorted(
        out,
        key=lambda m: ((m.get("period") or {}).get("end") or "", m.get("file", "")),
        reverse=True,
    )


def _row(m: dict) -> str:
    sec = m.get("sections", {})
    head = sec.get("headline", {})
    reg = sec.get("changes", {}).get("regressions")
    q = sec.get("quality", {}).get("quarantined")
    if reg is None:
        verdict, cls = "not compared", ""
    elif reg:
        verdict, cls = f"{reg} regression{'s' if reg != 1 else ''}", "bad"
    else:
        verdict, cls = "no regressions", "good"
    cells = [
        f'<a href="{esc(m["file"])}">{esc(m.get("title", m["file"]))}</a>',
        esc(f"{head.get('requests', 0):,}"),
        esc(f"{head.get('failed', 0):,}"),
        f'<span class="{cls}">{esc(verdict)}</span>',
        esc("–" if q is None else f"{q:,}"),
        esc(str(m.get("generated", ""))[:16].replace("T", " ")),
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def write_index(out_dir: Path) -> Path:
    rows = "".join(_row(m) for m in entries(out_dir))
    html = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>LLM serving reports</title><style>{CSS}</style></head><body>"
        "<header><h1>LLM serving reports</h1><p>Newest period first.</p></header><main>"
        "<table><thead><tr><th>report</th><th>requests</th><th>failed</th>"
        "<th>against previous period</th><th>quarantined</th><th>generated (UTC)</th></tr>"
        f"</thead><tbody>{rows}</tbody></table></main></body></html>\n"
    )
    path = out_dir / "index.html"
    tmp = path.with_name(f".index.html.{os.getpid()}.tmp")
    tmp.write_text(html, "utf-8")
    os.replace(tmp, path)
    return path

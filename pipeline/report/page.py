"""Assemble one self-contained HTML page: header, sections, chart specs and the inlined JS.

The page makes no network request: the libraries are inlined, chart data is embedded in the
specs, and a Content-Security-Policy forbids fetching anything (``default-src 'none'``).
Charts render as SVG; each chart's <div> gets ``data-rendered`` = 'ok' or 'error' and
``data-marks`` (the number of SVG marks drawn), which the browser test reads.
"""

from __future__ import annotations

from typing import Any

from pipeline.report.bundle import javascript
from pipeline.report.html import Section, esc, script_json

CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; "
    "style-src 'unsafe-inline'; img-src data:; font-src data:"
)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d1d1f}
header{background:#f4f5f7;padding:18px 28px;border-bottom:1px solid #ddd}
header h1{margin:0 0 4px;font-size:22px} header p{margin:2px 0;color:#555}
nav{padding:8px 28px;border-bottom:1px solid #eee;font-size:13px}
nav a{margin-right:14px;color:#0b57d0;text-decoration:none}
main{padding:0 28px 40px;max-width:1200px}
section{margin-top:28px} h2{font-size:18px;border-bottom:1px solid #eee;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
.table-wrap{overflow-x:auto} table{border-collapse:collapse;margin:8px 0;font-size:13px}
caption{text-align:left;font-weight:600;padding:4px 0}
th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:left;white-space:nowrap}
th{background:#fafafa} .num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#555;font-size:12.5px} .absent{color:#777;font-style:italic}
.bad{color:#b3261e;font-weight:600} .good{color:#1e7e34}
.flag{padding:6px 10px;border-radius:4px;background:#fafafa;display:inline-block}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.card{border:1px solid #e3e3e3;border-radius:6px;padding:8px 14px;min-width:120px}
.card .v{font-size:19px;font-weight:600} .card .k{color:#666;font-size:12px}
.chart{margin:8px 0;min-height:40px} dt{font-weight:600;margin-top:6px} dd{margin-left:16px}
code{background:#f3f3f3;padding:0 3px;border-radius:3px}
"""

# First script on the page: records uncaught errors and console.error calls on <body>.
TRAP = """
(function () {
  var n = 0;
  function note(msg) {
    n += 1;
    document.documentElement.setAttribute("data-js-errors", String(n));
    document.documentElement.setAttribute("data-js-last-error", String(msg).slice(0, 300));
  }
  window.addEventListener("error", function (e) { note(e.message || e); });
  window.addEventListener("unhandledrejection", function (e) { note(e.reason); });
  var orig = console.error;
  console.error = function () {
    note(Array.prototype.join.call(arguments, " "));
    orig.apply(console, arguments);
  };
  document.documentElement.setAttribute("data-js-errors", "0");
})();
"""

EMBED = """
(function () {
  var specs = JSON.parse(document.getElementById("report-specs").textContent);
  var ids = Object.keys(specs), done = 0, failed = 0;
  function finish() {
    done += 1;
    if (done === ids.length) {
      document.body.setAttribute("data-charts-done", String(done));
      document.body.setAttribute("data-charts-failed", String(failed));
    }
  }
  if (ids.length === 0) { document.body.setAttribute("data-charts-done", "0"); }
  ids.forEach(function (id) {
    var el = document.getElementById(id);
    vegaEmbed(el, specs[id], {renderer: "svg", actions: false}).then(function () {
      var marks = el.querySelectorAll('[role="graphics-symbol"], path.mark-line, path.mark-area');
      el.setAttribute("data-rendered", "ok");
      el.setAttribute("data-marks", String(marks.length));
      finish();
    }).catch(function (err) {
      failed += 1;
      el.setAttribute("data-rendered", "error");
      el.textContent = "This chart could not be drawn: " + err;
      console.error("chart " + id + ": " + err);
      finish();
    });
  });
})();
"""


def render_page(
    title: str, subtitle: list[str], sections: list[Section], charts: dict[str, dict[str, Any]]
) -> str:
    nav = "".join(f'<a href="#{esc(s.id)}">{esc(s.title)}</a>' for s in sections)
    sub = "".join(f"<p>{esc(line)}</p>" for line in subtitle)
    body = "".join(s.render() for s in sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style><script>{TRAP}</script></head><body>"
        f"<header><h1>{esc(title)}</h1>{sub}</header><nav>{nav}</nav><main>{body}</main>"
        f'<script type="application/json" id="report-specs">{script_json(charts)}</script>'
        f"<script>{javascript()}</script><script>{EMBED}</script></body></html>\n"
    )

"""The Vega, Vega-Lite and vega-embed JavaScript, inlined into every page (no CDN, no network).

vl-convert-python ships the libraries; bundling takes a second or two, so the result is cached
under ``$XDG_CACHE_HOME/llm-trace-pipeline/`` keyed by the vl-convert and Vega-Lite versions.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import altair as alt
import vl_convert as vlc


def vegalite_version() -> str | None:
    """Altair's Vega-Lite major.minor ('6.4'), if vl-convert ships it; else None (its latest)."""
    mm = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return mm if mm in vlc.get_vegalite_versions() else None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "llm-trace-pipeline"


@lru_cache(maxsize=1)
def javascript() -> str:
    """vegaEmbed, vega and vegaLite as window globals; safe to place inside <script>."""
    vl = vegalite_version()
    path = _cache_dir() / f"vega-bundle-{vlc.__version__}-vl{vl or 'latest'}.js"
    try:
        return path.read_text("utf-8")
    except OSError:
        pass
    js = vlc.javascript_bundle(vl_version=vl) if vl else vlc.javascript_bundle()
    js = js.replace("</script", "<\\/script").replace("<!--", "<\\!--")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(js, "utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home only costs the bundling time on every report
    return js

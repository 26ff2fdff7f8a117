"""The data flow is the architecture: lower layers never import higher ones.

Read from the source (imports anywhere in a module, deferred ones included), so a new
upward import fails here before it becomes a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PKG = REPO / "pipeline"
# package -> packages it must never import (directly), lowest layers first.
FORBIDDEN = {
    "schema": {"files", "readers", "ingest", "warehouse", "fit", "sim", "replay", "attribution",
               "report", "commands", "query", "engines"},
    "files": {"readers", "ingest", "warehouse", "fit", "sim", "replay", "attribution", "report",
              "commands"},
    "readers": {"ingest", "warehouse", "fit", "sim", "replay", "attribution", "report",
                "commands"},
    "sim": {"fit", "replay", "attribution", "report", "commands", "ingest"},
    "fit": {"replay", "attribution", "report", "commands"},
    "report": {"commands"},
}  # fmt: skip


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m.split(".")[1] for m in out if m.startswith("pipeline.") and m.count(".") >= 1}


def test_no_layer_imports_a_higher_one():
    bad = []
    for pkg, forbidden in FORBIDDEN.items():
        for path in sorted((PKG / pkg).rglob("*.py")):
            hit = _imports(path) & forbidden
            if hit:
                bad.append(
                    f"{path.relative_to(REPO)} imports pipeline.{', pipeline.'.join(sorted(hit))}"
                )
    assert not bad, "\n".join(bad)


def test_the_check_sees_imports():
    # The walk finds a deferred import inside a function too (readers used to do that).
    assert "ingest" in _imports(REPO / "pipeline" / "commands" / "ingest.py")

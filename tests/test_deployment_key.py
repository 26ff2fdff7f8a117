"""The deployment key is declared once (pipeline/schema/deployment.py).

The main test edits a scratch copy of the package, adding one part to the key and touching
nothing else, then checks in a fresh interpreter that our log format, the views, the Arrow
schemas of stored and derived tables, the fit's grouping and the report all pick it up. A
second copy of the key anywhere (a hand-written column list, a GroupKey of its own, a report
that merges fits) makes it fail.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import duckdb

from pipeline.fit.core import GroupKey
from pipeline.schema import deployment
from pipeline.schema.record import METADATA_COLUMNS, RequestRecord
from tests.conftest import REPO

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from pipeline.fit import fit_warehouse
    from pipeline.fit.core import GroupKey
    from pipeline.ingest.run import ingest_paths
    from pipeline.report import build_report
    from tests.fixtures.report_data import Spec, records
    from pipeline.schema.export import write_schemas
    from pipeline.schema.record import METADATA_COLUMNS, RequestRecord
    from pipeline.schema.tables import arrow_schema
    from pipeline.warehouse.layout import Layout
    from pipeline.warehouse.views import connect

    def _columns(tables):
        return {t: [c["name"] for c in d["columns"]] for t, d in tables.items()}

    tmp = Path(sys.argv[1])
    out = {
        "group_key": list(GroupKey._fields),
        "record": "region" in RequestRecord.model_fields,
        "metadata": "region" in METADATA_COLUMNS,
        "schemas": {t: "region" in arrow_schema(t).names
                    for t in ("requests", "replay_requests", "cost_models", "calibration",
                              "validation")},
    }
    # The exported contract (JSON Schema, table JSON, the table docs) names it too.
    exported = {p.name: p.read_text() for p in write_schemas(tmp / "schemas")}
    tables = json.loads(exported["warehouse-tables.json"])
    out["exported"] = {
        "record": "region" in json.loads(exported["request-record.schema.json"])["properties"],
        "tables": sorted(t for t, cols in _columns(tables).items() if "region" in cols),
        "docs": "`region`" in exported["warehouse-tables.md"],
    }
    files = []
    for region in ("eu", "us"):  # the same traffic served in two regions: two deployments each
        path = tmp / f"{region}.jsonl"
        with open(path, "w") as f:
            for r in records(Spec(n=400, seed=5)):
                r |= {"region": region, "run_id": f"run-{region}",
                      "request_id": f"{region}-{r['request_id']}"}
                f.write(json.dumps(r) + "\\n")
        files.append(path)
    layout = Layout(tmp / "wh")
    ingest_paths(files, layout)
    con = connect(layout)
    out["view"] = con.sql(
        "SELECT region, count(DISTINCT deployment) FROM requests GROUP BY 1 ORDER BY 1"
    ).fetchall()
    out["view_ids_name_it"] = con.execute(
        "SELECT bool_and(deployment LIKE '%|' || region || '|%') FROM requests"
    ).fetchone()[0]
    fits = fit_warehouse(layout)
    out["fits"] = sorted([k.region, k.model] for k in (f.key for f in fits))
    out["cost_models"] = connect(layout).sql(
        "SELECT region, count(DISTINCT deployment) FROM cost_models GROUP BY 1 ORDER BY 1"
    ).fetchall()
    r = build_report(layout, tmp / "report")
    out["report_ambiguous"] = r.summary["sections"]["ttft-prompt"]["fitted_ambiguous"]
    print(json.dumps(out))
    """
)


def test_a_new_key_part_needs_no_other_edit(tmp_path):
    scratch = tmp_path / "scratch"
    shutil.copytree(
        REPO / "pipeline", scratch / "pipeline", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(REPO / "queries", scratch / "queries")
    shutil.copytree(  # the synthetic logs' maker (tests/fixtures), unchanged
        REPO / "tests" / "fixtures",
        scratch / "tests" / "fixtures",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    key = scratch / "pipeline" / "schema" / "deployment.py"
    text = key.read_text()
    anchor = '    Part("weight_dtype"'
    assert text.count(anchor) == 1
    key.write_text(text.replace(anchor, '    Part("region", S, "", "Cloud region."),\n' + anchor))
    res = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path)],
        cwd=scratch,
        env={"PYTHONPATH": str(scratch), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    import json

    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert "region" in out["group_key"]
    assert out["record"] and out["metadata"]
    assert out["schemas"] == dict.fromkeys(out["schemas"], True)
    assert out["exported"]["record"] and out["exported"]["docs"]
    assert {"requests", "cost_models", "calibration", "replay_requests"} <= set(
        out["exported"]["tables"]
    )
    # Two deployments (8B on H100, 70B on H200) in each region: four in the view and the fit.
    assert out["view"] == [["eu", 2], ["us", 2]]
    assert out["view_ids_name_it"] is True
    assert len(out["fits"]) == 4
    assert sorted({r for r, _ in out["fits"]}) == ["eu", "us"]
    assert out["cost_models"] == [["eu", 2], ["us", 2]]
    # The report's charts key by model x GPU: each key now has a fit per region, so it draws
    # neither rather than one region's curve for both.
    assert out["report_ambiguous"] == 2


def test_key_sql_and_python_agree():
    # The id the views compute in SQL equals the one Python writes into derived tables
    # (defaults applied to the missing dtypes, '-' for parts with no default).
    key = GroupKey("m", "g", 2, "vllm", None, 256, None, True, None, None, None)
    row = """SELECT 'm' AS model, 'g' AS gpu, 2::INTEGER AS gpu_count, 'vllm' AS engine,
        NULL::VARCHAR AS engine_version, 256::INTEGER AS max_num_seqs,
        NULL::INTEGER AS max_batched_tokens, true AS chunked_prefill, NULL::VARCHAR AS attention,
        NULL::VARCHAR AS weight_dtype, NULL::VARCHAR AS kv_dtype"""
    got = duckdb.connect().execute(f"SELECT {deployment.id_sql()} FROM ({row})").fetchone()
    assert got == (deployment.key_id(key),)
    assert deployment.key_id(key) == "m|g|2|vllm|-|256|-|true|-|bf16|bf16"


def test_every_key_part_is_metadata_and_a_record_field():
    for name in deployment.NAMES:
        assert name in METADATA_COLUMNS
        assert name in RequestRecord.model_fields
        assert name in GroupKey._fields

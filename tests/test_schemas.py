"""schemas/ is the exported contract: stale files fail; the example record validates."""

from __future__ import annotations

import json

import jsonschema
import pyarrow.parquet as pq

from pipeline.ingest.run import ingest_paths
from pipeline.schema.export import exported, stale
from pipeline.schema.record import EXAMPLE_RECORD, RequestRecord
from pipeline.schema.tables import DERIVED, TABLES, VIEWS, arrow_schema
from pipeline.warehouse.layout import Layout
from tests.conftest import REPO, record, write_jsonl


def test_schemas_dir_is_up_to_date():
    assert stale(REPO / "schemas") == [], "run `pipeline schemas` to refresh schemas/"


def test_stale_detection_can_fail(tmp_path):
    (tmp_path / "request-record.schema.json").write_text("{}")
    assert "request-record.schema.json" in stale(tmp_path)


def test_example_record_validates_against_exported_json_schema():
    schema = json.loads(exported()["request-record.schema.json"])
    jsonschema.validate(EXAMPLE_RECORD, schema)
    RequestRecord.model_validate(EXAMPLE_RECORD)
    bad = dict(EXAMPLE_RECORD, prompt_tokens=-1)
    try:
        jsonschema.validate(bad, schema)
        raise AssertionError("negative prompt_tokens must not validate")
    except jsonschema.ValidationError:
        pass


def test_every_column_is_documented():
    tables = json.loads(exported()["warehouse-tables.json"])
    for name, t in tables.items():
        assert all(c["doc"] for c in t["columns"]), name
    assert set(tables) == set(TABLES) | set(DERIVED) | set(VIEWS)


def test_parquet_files_carry_exactly_the_declared_schema(tmp_path):
    layout = Layout(tmp_path / "wh")
    ingest_paths([write_jsonl(tmp_path / "a.jsonl", [record(0), "{bad"])], layout)
    for table in ("requests", "quarantine"):
        (f,) = layout.committed_files(table)
        assert pq.read_schema(f).remove_metadata() == arrow_schema(table).remove_metadata(), table


def test_derived_tables_are_written_with_their_contract(tmp_path):
    """`calibration` and `validation` land with exactly the Arrow schema declared for them."""
    from pipeline.fit.calibration_store import write_calibrations, write_validation

    layout = Layout(tmp_path / "wh")
    for path in (write_calibrations(layout, []), write_validation(layout, [])):
        name = path.split("/")[-2]
        got = [(f.name, f.type, f.nullable) for f in pq.read_schema(path)]
        assert got == [(f.name, f.type, f.nullable) for f in arrow_schema(name)], name
        assert name in DERIVED

"""Export the contract to ``schemas/``: JSON Schema of our record, and the warehouse tables.

``tests/test_schemas.py`` fails when the files in ``schemas/`` differ from what this produces, so
the exported contract can never go stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.schema.record import EXAMPLE_RECORD, RequestRecord
from pipeline.schema.tables import PARTITIONED, TABLES, describe


def exported() -> dict[str, str]:
    record = RequestRecord.model_json_schema()
    record["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    record["examples"] = [EXAMPLE_RECORD]
    tables = {
        name: {"partitioned_by": ["day"] if name in PARTITIONED else [], "columns": describe(name)}
        for name in TABLES
    }
    return {
        "request-record.schema.json": json.dumps(record, indent=2, sort_keys=True) + "\n",
        "warehouse-tables.json": json.dumps(tables, indent=2) + "\n",
    }


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name, text in exported().items():
        p = directory / name
        p.write_text(text)
        out.append(p)
    return out


def stale(directory: Path) -> list[str]:
    """Names of exported files that are missing or differ from the code."""
    return [
        name
        for name, text in exported().items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    ]

"""DuckDB views over the warehouse: the SQL contract every query, fit and report reads.

Input tables (requests, tokens, ...) are read from the files their manifests commit, never by a
directory glob, so a query can never see a half-written ingest. Derived tables written by later
stages (``cost_models``, ``attribution``, ...) live in ``<warehouse>/<name>/*.parquet`` and get a
view of the same name automatically.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from pipeline.schema.tables import PARTITIONED, TABLES, arrow_schema
from pipeline.warehouse.layout import Layout

# Views computed on top of a stored table: the column list is the table's plus these.
_EXTRA = {
    "requests": ("t_arrival - min(t_arrival) OVER (PARTITION BY run_id) AS arrival_s"),
}


def _scan(files: list[Path], partitioned: bool) -> str:
    listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    hive = ", hive_partitioning = true, hive_types = {'day': 'VARCHAR'}" if partitioned else ""
    return f"read_parquet([{listed}], union_by_name = true{hive})"


def connect(layout: Layout, database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(database)
    for table in TABLES:
        files = layout.committed_files(table)
        base = f"_{table}_base"
        if files:
            con.execute(f"CREATE VIEW {base} AS SELECT * FROM {_scan(files, table in PARTITIONED)}")
        else:
            empty = arrow_schema(table).empty_table()
            if table in PARTITIONED:
                import pyarrow as pa

                empty = empty.append_column("day", pa.array([], pa.string()))
            con.register(base, empty)
        extra = _EXTRA.get(table)
        select = f"SELECT *, {extra} FROM {base}" if extra else f"SELECT * FROM {base}"
        con.execute(f"CREATE VIEW {table} AS {select}")
    for name, files in derived_tables(layout).items():
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM {_scan(files, False)}")
    return con


def derived_tables(layout: Layout) -> dict[str, list[Path]]:
    """Tables written by fit / attribute / replay: any other folder of Parquet files."""
    out: dict[str, list[Path]] = {}
    if not layout.root.exists():
        return out
    for d in sorted(layout.root.iterdir()):
        if d.is_dir() and not d.name.startswith(("_", ".")) and d.name not in TABLES:
            files = sorted(d.glob("*.parquet"))
            if files and d.name.isidentifier():
                out[d.name] = files
    return out

"""DuckDB views over the warehouse: the SQL contract every query, fit and report reads.

Input tables (requests, tokens, ...) are read from the files their manifests commit, never by a
directory glob, so a query can never see a half-written ingest. Derived tables written by later
stages (``cost_models``, ``attribution``, ...) live in ``<warehouse>/<name>/*.parquet`` and get a
view of the same name automatically.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from pipeline.schema import deployment
from pipeline.schema.tables import PARTITIONED, TABLES, VIEWS, arrow_schema
from pipeline.warehouse.layout import Layout

# A log without arrival times (llmperf per-request files, SGLang / old vLLM detailed results)
# is stored with clock 'request': each request's stamps count from its own arrival, so TTFT,
# TPOT and E2E are real but there is no common time axis. The views say so with a NULL
# t_arrival: no rate, window, concurrency or batch can be computed from the zeros.
_T_ARRIVAL = "CASE WHEN clock = 'request' THEN NULL ELSE t_arrival END"
_ARRIVAL_S = f"{_T_ARRIVAL} - min({_T_ARRIVAL}) OVER (PARTITION BY run_id) AS arrival_s"
# The deployment key as one string (pipeline/schema/deployment.py): named queries partition and
# join on it (e.g. with cost_models, which stores the same id), so a new key part needs no SQL.
_DEPLOYMENT = f"{deployment.id_sql()} AS {deployment.ID_COLUMN}"
# Views computed on top of a stored table: the column list is the table's plus these.
_EXTRA = {
    "requests": f"{_ARRIVAL_S}, {_DEPLOYMENT}",
    "replay_requests": f"{_ARRIVAL_S}, {_DEPLOYMENT}",
}
# Stored columns a view shows through an expression (same name, same type).
REPLACED = {"requests": {"t_arrival": _T_ARRIVAL}, "replay_requests": {"t_arrival": _T_ARRIVAL}}


def view_select(table: str, base: str) -> str:
    """SELECT of the view over ``base``: its columns (some through REPLACED), then _EXTRA."""
    extra = _EXTRA.get(table)
    replaced = REPLACED.get(table)
    if replaced:
        names = [f.name for f in arrow_schema(table)] + (["day"] if table in PARTITIONED else [])
        cols = ", ".join(f"{replaced[n]} AS {n}" if n in replaced else n for n in names)
    else:
        cols = "*"
    return f"SELECT {cols}{', ' + extra if extra else ''} FROM {base}"


# The tokens view (columns: schema.tables.TOKENS + day), one row per emission. Chunk sizes: as
# logged; else one token each when there are as many emissions as output tokens; else unknown.
TOKENS_SQL = """
SELECT
    request_id,
    run_id,
    CAST(i - 1 AS INTEGER) AS token_index,
    token_times[i] AS t_s,
    CAST(CASE
        WHEN token_counts IS NOT NULL THEN token_counts[i]
        WHEN len(token_times) = output_tokens THEN 1
    END AS INTEGER) AS n_tokens,
    CASE WHEN i > 1 THEN token_times[i] - token_times[i - 1] END AS gap_s,
    day
FROM (
    SELECT
        request_id, run_id, token_times, token_counts, output_tokens, day,
        generate_subscripts(token_times, 1) AS i
    FROM _requests_base
    WHERE token_times IS NOT NULL
) AS e
"""

# The same view for Spark SQL (0-based arrays, posexplode). Views are the one place where each
# engine gets its own text: named queries in queries/ are translated, never duplicated.
TOKENS_SQL_SPARK = """
SELECT
    request_id,
    run_id,
    CAST(pos AS INT) AS token_index,
    t AS t_s,
    CAST(CASE
        WHEN token_counts IS NOT NULL THEN token_counts[pos]
        WHEN size(token_times) = output_tokens THEN 1
    END AS INT) AS n_tokens,
    CASE WHEN pos > 0 THEN t - token_times[pos - 1] END AS gap_s,
    day
FROM _requests_base
LATERAL VIEW posexplode(token_times) e AS pos, t
"""


# One emission view per request table: observed tokens never include a replayed one.
TOKEN_VIEWS = {"tokens": "_requests_base", "replay_tokens": "_replay_requests_base"}


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
        con.execute(f"CREATE VIEW {table} AS {view_select(table, base)}")
    for view, base in TOKEN_VIEWS.items():
        con.execute(f"CREATE VIEW {view} AS {TOKENS_SQL.replace('_requests_base', base)}")
    for name, files in derived_tables(layout).items():
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM {_scan(files, False)}")
    return con


def derived_tables(layout: Layout) -> dict[str, list[Path]]:
    """Tables written by fit / attribute / replay: any other folder of Parquet files."""
    out: dict[str, list[Path]] = {}
    if not layout.root.exists():
        return out
    for d in sorted(layout.root.iterdir()):
        if d.is_dir() and not d.name.startswith(("_", ".")) and d.name not in TABLES | VIEWS:
            files = sorted(d.glob("*.parquet"))
            if files and d.name.isidentifier():
                out[d.name] = files
    return out


def seal(con: duckdb.DuckDBPyConnection, root: Path | None) -> None:
    """Make ``con`` read the warehouse and nothing else, for good (user-written SQL).

    DuckDB may then open files under ``root`` only (the views' Parquet files): no other file, no
    URL, no extension install or load, no ATTACH, and the settings are locked, so a statement
    cannot undo this. The views already exist, so they keep working.
    """
    allowed = [str(root.resolve()) + "/"] if root is not None else []
    con.execute("SET allowed_directories = $dirs", {"dirs": allowed})
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")

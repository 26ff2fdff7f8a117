"""Load named queries from ``queries/NAME.sql`` and run them with bound parameters.

A query file starts with comment lines that describe it::

    -- description: one line shown by `pipeline query --list`
    -- param window_s: 60 (what it means)

Parameters appear in the SQL as ``$name`` and are always bound by the engine, never formatted
into the text.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

_PARAM = re.compile(r"^--\s*param\s+(\w+)\s*:\s*(\S+)\s*(?:\((.*)\))?\s*$")


class QueryError(ValueError):
    pass


@dataclass(frozen=True)
class NamedQuery:
    name: str
    path: Path
    sql: str
    description: str
    params: dict[str, str] = field(default_factory=dict)  # name -> default (text)
    param_docs: dict[str, str] = field(default_factory=dict)

    def used_params(self) -> set[str]:
        return set(re.findall(r"\$(\w+)", self.sql))


def queries_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """--queries-dir, $PIPELINE_QUERIES, ./queries, or the queries/ shipped beside the package."""
    for candidate in (
        explicit,
        os.environ.get("PIPELINE_QUERIES"),
        "queries",
        Path(__file__).resolve().parents[2] / "queries",
    ):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    raise QueryError("no queries/ folder found; pass --queries-dir or set PIPELINE_QUERIES")


def parse_query(path: Path) -> NamedQuery:
    sql = path.read_text()
    description, params, docs = "", {}, {}
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        if line.lower().startswith("-- description:"):
            description = line.split(":", 1)[1].strip()
        elif m := _PARAM.match(line):
            params[m.group(1)] = m.group(2)
            docs[m.group(1)] = (m.group(3) or "").strip()
    return NamedQuery(path.stem, path, sql, description, params, docs)


def all_queries(directory: Path | None = None) -> list[NamedQuery]:
    d = directory or queries_dir()
    return [parse_query(p) for p in sorted(d.glob("*.sql"))]


def load_query(name: str, directory: Path | None = None) -> NamedQuery:
    d = directory or queries_dir()
    path = d / f"{name}.sql"
    if not path.is_file():
        import difflib

        names = [q.stem for q in d.glob("*.sql")]
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise QueryError(f"no query named {name!r} in {d}{hint} (`pipeline query --list`)")
    return parse_query(path)


def coerce(value: str) -> object:
    """CLI parameter text to a SQL value: integer, float, else string."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value


def bind(query: NamedQuery, given: dict[str, str]) -> dict[str, object]:
    unknown = set(given) - query.used_params()
    if unknown:
        raise QueryError(
            f"query {query.name!r} has no parameter {', '.join(sorted(unknown))}; "
            f"it takes: {', '.join(sorted(query.used_params())) or 'none'}"
        )
    values = {**query.params, **given}
    missing = query.used_params() - set(values)
    if missing:
        raise QueryError(f"query {query.name!r} needs --param {', '.join(sorted(missing))}=...")
    return {k: _value(k, v) for k, v in values.items() if k in query.used_params()}


def _value(name: str, text: str) -> object:
    """A parameter named ``*_s`` is a duration: 30, 30s, 500ms and 1.5min all give seconds, as
    every duration option does (issue 12, point 8); others: integer, float, else string."""
    if not name.endswith("_s"):
        return coerce(text)
    from pipeline.report.period import parse_duration

    value = coerce(text)
    if isinstance(value, int | float):
        return float(value)
    d = parse_duration(str(text))
    if d is None:
        raise QueryError(f"--param {name}={text}: give a duration such as 500ms, 30s or 1.5min")
    return d.total_seconds()


# Derived tables and the command that writes them, for a helpful message when one is missing.
WRITTEN_BY = {
    "cost_models": "pipeline fit",
    "claims": "pipeline fit",
    "attribution": "pipeline attribute",
    "attribution_requests": "pipeline attribute",
    "attribution_elasticities": "pipeline attribute",
    "replay_steps": "pipeline replay",
}


def missing_table_hint(exc: Exception) -> str | None:
    """'run `pipeline fit` first' when a query reads a derived table that was never written."""
    m = re.search(r"Table with name (\w+) does not exist", str(exc))
    if m and m.group(1) in WRITTEN_BY:
        return f"{m.group(1)} does not exist yet: run `{WRITTEN_BY[m.group(1)]}` first"
    return None


def run_named(
    con: duckdb.DuckDBPyConnection, query: NamedQuery, params: dict[str, str] | None = None
) -> pa.Table:
    try:
        return con.sql(query.sql, params=bind(query, params or {})).to_arrow_table()
    except duckdb.CatalogException as exc:
        hint = missing_table_hint(exc)
        if hint:
            raise QueryError(f"query {query.name!r}: {hint}") from None
        raise


def check_read_only(sql: str, con: duckdb.DuckDBPyConnection | None = None) -> None:
    """Refuse anything but one SELECT / EXPLAIN statement (DuckDB's parser decides)."""
    parser = con or duckdb.connect()
    try:
        statements = parser.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"SQL does not parse: {exc}") from None
    finally:
        if con is None:
            parser.close()
    if len(statements) != 1:
        raise QueryError("give exactly one SQL statement")
    kind = statements[0].type
    if kind not in (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN):
        raise QueryError(f"only read-only queries are allowed here, not {kind.name}")


def run_adhoc(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, str] | None = None
) -> pa.Table:
    """Run one read-only statement (SELECT / WITH / DESCRIBE / SHOW ...); ``params`` fill its
    ``$name`` placeholders (numbers and dates coerced as for named queries)."""
    check_read_only(sql, con)
    used = set(re.findall(r"\$(\w+)", sql))
    given = params or {}
    if used - set(given):
        raise QueryError(f"the SQL needs --param {', '.join(sorted(used - set(given)))}=...")
    if set(given) - used:
        raise QueryError(f"--param {', '.join(sorted(set(given) - used))}: not used by the SQL")
    bound = {k: coerce(v) for k, v in given.items()}
    rel = con.sql(sql, params=bound) if bound else con.sql(sql)
    return rel.to_arrow_table()

"""Slice predicates: a user's SQL boolean expression over `requests`, checked before use.

The expression is parsed by DuckDB inside ``SELECT * FROM requests WHERE (<expr>)`` and the parse
tree must be exactly that one plain SELECT: anything that is a statement of its own (``;``,
``DROP``, ``COPY``), closes the parenthesis to add clauses (``) LIMIT``, ``) UNION SELECT``) or
reads other relations (a subquery, a table function) is rejected. It is then bound against the
``requests`` view with ``$name`` parameters taken from ``--param``, so unknown columns and type
errors are reported before any work is done. Values are bound by the engine, never formatted in.
"""

from __future__ import annotations

import json
import re
from typing import Any

import duckdb


class PredicateError(ValueError):
    pass


_FORBIDDEN_KEYS = ("SUBQUERY", "TABLE_FUNCTION", "SUBQUERY_REF", "JOIN")


def _walk(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for k in ("class", "type"):
            v = node.get(k)
            if isinstance(v, str) and v in _FORBIDDEN_KEYS:
                found.append(v)
        for v in node.values():
            found += _walk(v)
    elif isinstance(node, list):
        for v in node:
            found += _walk(v)
    return found


def check(con: duckdb.DuckDBPyConnection, expr: str, params: dict[str, Any] | None = None) -> str:
    """Return the expression if it is one read-only boolean expression over `requests` columns.

    Raises PredicateError with a one-line reason otherwise.
    """
    expr = (expr or "").strip()
    if not expr:
        raise PredicateError("empty predicate; give a SQL condition such as \"gpu = 'A100-80GB'\"")
    if ";" in re.sub(r"'(?:[^']|'')*'", "", expr) or "--" in expr or "/*" in expr:
        raise PredicateError(f"not a single expression (';' or a comment): {expr!r}")
    sql = f"SELECT * FROM requests WHERE ({expr})"
    tree = json.loads(con.execute("SELECT json_serialize_sql($q)", {"q": sql}).fetchone()[0])  # type: ignore[index]
    if tree.get("error"):
        raise PredicateError(f"predicate does not parse: {tree.get('error_message', expr)}")
    stmts = tree.get("statements", [])
    node = stmts[0]["node"] if len(stmts) == 1 else {}
    clean = (
        node.get("type") == "SELECT_NODE"
        and node.get("from_table", {}).get("type") == "BASE_TABLE"
        and node.get("from_table", {}).get("table_name") == "requests"
        and not node.get("modifiers")
        and not node.get("group_expressions")
        and node.get("having") is None
        and node.get("qualify") is None
        and not node.get("cte_map", {}).get("map")
        and len(node.get("select_list", [])) == 1
    )
    if not clean:
        raise PredicateError(f"not a plain condition on requests: {expr!r}")
    bad = _walk(node.get("where_clause"))
    if bad:
        raise PredicateError(f"the predicate may only use requests' columns, no {bad[0].lower()}")
    used = set(re.findall(r"\$(\w+)", re.sub(r"'(?:[^']|'')*'", "", expr)))
    missing = used - set(params or {})
    if missing:
        raise PredicateError(f"predicate needs --param {', '.join(sorted(missing))}=...")
    try:
        con.execute(
            f"SELECT count(*) FROM (SELECT * FROM requests WHERE ({expr}) LIMIT 0) AS s",
            {k: v for k, v in (params or {}).items() if k in used},
        ).fetchall()
    except duckdb.Error as exc:
        msg = str(exc).splitlines()[0]
        raise PredicateError(f"predicate does not bind against requests: {msg}") from None
    return expr


def used_params(expr: str, params: dict[str, Any] | None) -> dict[str, Any]:
    used = set(re.findall(r"\$(\w+)", re.sub(r"'(?:[^']|'')*'", "", expr)))
    return {k: v for k, v in (params or {}).items() if k in used}

"""Translate our SQL (DuckDB dialect, ``$name`` parameters) to Spark SQL with sqlglot.

There is one copy of every query: the DuckDB text in ``queries/``. Spark gets it through
:func:`to_spark`, which parses with ``read="duckdb"`` and writes with ``write="spark"``. Two
things sqlglot does not do the way we need, fixed here on the syntax tree:

* ``percentile_cont(q) WITHIN GROUP (ORDER BY x)`` is written by sqlglot's Spark generator as
  ``PERCENTILE_APPROX(x, q)``, an approximation. Spark 3.3+ has the exact ordered-set aggregate
  (linear interpolation, as DuckDB), so we keep ``WITHIN GROUP``; ``quantile_cont(x, q)`` and
  ``quantile_disc(x, q)`` become the same form.
* A number with a decimal point (``2.0``, ``1e-3``) is DECIMAL in Spark, so ``x / 2.0`` and
  ``avg(x / 2.0)`` would be fixed-point with a truncated scale, where DuckDB computes in DOUBLE.
  Such literals are written as ``CAST(2.0 AS DOUBLE)``.
* ``$name`` parameters are :class:`sqlglot.exp.Placeholder` nodes; they are written as Spark's
  named markers ``:name`` and bound by ``spark.sql(text, args=...)``. Values never enter the text.

Anything sqlglot cannot express in Spark raises :class:`TranslationError` instead of silently
producing different SQL (``unsupported_level=RAISE``).
"""

from __future__ import annotations

from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, UnsupportedError


class TranslationError(ValueError):
    pass


_ORDERED_SET = {exp.PercentileCont: "PERCENTILE_CONT", exp.PercentileDisc: "PERCENTILE_DISC"}


def _exact_percentiles(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.WithinGroup) and type(node.this) in _ORDERED_SET:
        fn = exp.Anonymous(this=_ORDERED_SET[type(node.this)], expressions=[node.this.this])
        return exp.WithinGroup(this=fn, expression=node.expression)
    if type(node) in _ORDERED_SET and not isinstance(node.parent, exp.WithinGroup):
        # quantile_cont(x, q) / quantile_disc(x, q): the same aggregate in its ordered-set form
        q = node.expression
        if q is None:
            raise TranslationError(f"{node.sql('duckdb')}: give the quantile explicitly")
        fn = exp.Anonymous(this=_ORDERED_SET[type(node)], expressions=[q])
        order = exp.Order(expressions=[exp.Ordered(this=node.this, nulls_first=False)])
        return exp.WithinGroup(this=fn, expression=order)
    return node


def _double_literals(node: exp.Expr) -> exp.Expr:
    decimal = isinstance(node, exp.Literal) and not node.is_string and not node.is_int
    if decimal and not isinstance(node.parent, exp.Cast):
        return exp.Cast(this=node.copy(), to=exp.DataType.build("double"))
    return node


def parameters(tree: exp.Expr) -> list[str]:
    """Names of the ``$name`` parameters in a parsed statement, in order of first use."""
    names: list[str] = []
    for ph in tree.find_all(exp.Placeholder):
        name = ph.name
        if not name or name.isdigit():
            raise TranslationError("use named parameters ($name), not positional ones")
        if name not in names:
            names.append(name)
    return names


@lru_cache(maxsize=256)
def to_spark(sql: str) -> str:
    """One DuckDB-dialect statement as Spark SQL, parameters as ``:name`` markers."""
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except ParseError as exc:
        raise TranslationError(f"SQL does not parse: {exc}") from None
    if len(statements) != 1:
        raise TranslationError("give exactly one SQL statement")
    tree = statements[0]
    parameters(tree)  # rejects positional parameters
    tree = tree.transform(_exact_percentiles).transform(_double_literals)
    try:
        return tree.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as exc:
        raise TranslationError(f"cannot translate to Spark SQL: {exc}") from None


def is_read_only(sql: str) -> bool:
    """True for one SELECT / WITH / set-operation statement (what ad-hoc queries may run)."""
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except ParseError:
        return False
    return len(statements) == 1 and isinstance(statements[0], exp.Query)

"""The DuckDB engine: the views of :mod:`pipeline.warehouse.views`, in process."""

from __future__ import annotations

from collections.abc import Mapping

import duckdb
import pyarrow as pa

from pipeline.engines.base import Engine, EngineError
from pipeline.query.named import QueryError, missing_table_hint, run_adhoc
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect


class DuckDBEngine(Engine):
    name = "duckdb"

    def __init__(self, layout: Layout, database: str = ":memory:"):
        super().__init__(layout, str(layout.root))
        self.con = connect(layout, database)

    def arrow(self, sql: str, params: Mapping[str, object] | None = None) -> pa.Table:
        try:
            rel = self.con.sql(sql, params=dict(params)) if params else self.con.sql(sql)
            if rel is None:
                raise QueryError("the statement returned no result")
            return rel.to_arrow_table()
        except duckdb.Error as exc:
            raise EngineError(f"query failed: {missing_table_hint(exc) or exc}") from None

    def adhoc(self, sql: str) -> pa.Table:
        try:
            return run_adhoc(self.con, sql)  # DuckDB's own parser decides what is read-only
        except duckdb.Error as exc:
            raise EngineError(f"query failed: {exc}") from None

    def views(self) -> list[str]:
        rows = self.con.sql(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal AND view_name NOT LIKE '\\_%' "
            "ESCAPE '\\' ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        self.con.close()

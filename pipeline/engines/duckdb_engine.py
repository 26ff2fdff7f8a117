"""The DuckDB engine: the views of :mod:`pipeline.warehouse.views`, in process."""

from __future__ import annotations

from collections.abc import Mapping

import duckdb
import pyarrow as pa

from pipeline.engines.base import Engine, EngineError
from pipeline.query.named import QueryError, missing_table_hint, run_adhoc
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect, seal


class DuckDBEngine(Engine):
    name = "duckdb"

    def __init__(
        self,
        layout: Layout | None,
        database: str = ":memory:",
        con: duckdb.DuckDBPyConnection | None = None,
    ):
        """Views over ``layout``, or (``con=``) an open connection that stays the caller's."""
        if layout is None and con is None:
            raise ValueError("give a layout or a connection")
        super().__init__(layout, str(layout.root) if layout is not None else "<connection>")
        self._owned = con is None
        self._sealed = False
        self.con = connect(layout, database) if con is None else con  # type: ignore[arg-type]

    def arrow(self, sql: str, params: Mapping[str, object] | None = None) -> pa.Table:
        try:
            rel = self.con.sql(sql, params=dict(params)) if params else self.con.sql(sql)
            if rel is None:
                raise QueryError("the statement returned no result")
            return rel.to_arrow_table()
        except duckdb.Error as exc:
            raise EngineError(f"query failed: {missing_table_hint(exc) or exc}") from None

    def adhoc(self, sql: str, params: Mapping[str, str] | None = None) -> pa.Table:
        if not self._sealed:  # user-written SQL reads the warehouse and nothing else
            seal(self.con, self.layout.root if self.layout is not None else None)
            self._sealed = True
        try:
            # DuckDB's own parser decides what is read-only.
            return run_adhoc(self.con, sql, dict(params or {}))
        except duckdb.PermissionException as exc:
            raise QueryError(
                f"not allowed: {exc}. Ad-hoc SQL reads the warehouse's tables and views only "
                "(`pipeline query --list`); it cannot open other files or URLs, load extensions "
                "or change settings."
            ) from None
        except duckdb.Error as exc:
            raise EngineError(f"query failed: {exc}") from None

    def views(self) -> list[str]:
        rows = self.con.sql(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal AND view_name NOT LIKE '\\_%' "
            "ESCAPE '\\' ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        if self._owned:
            self.con.close()

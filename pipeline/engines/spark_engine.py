"""The Spark engine: the same views over the same warehouse, queried with Spark SQL.

Views
    ``requests`` (with ``arrival_s``), ``tokens``, ``quarantine``, ``runs``, ``arrivals``,
    ``run_summaries`` and every derived table folder, as temporary views of a session of their
    own (``spark.newSession()``: same cluster, separate views and settings).

Which files
    ``files="manifest"`` (default) reads exactly the files the manifests in ``_manifest/``
    commit, passed as an explicit list with ``basePath`` so the Hive column ``day`` is kept.
    ``files="directory"`` reads the table folders instead (one path per table: cheaper to plan
    when there are very many files) and then also sees data files of an ingest that was killed
    before its commit, until the next ``pipeline ingest`` removes them in its recovery step.

Schemas
    Read schemas come from :mod:`pipeline.schema.tables` (``day`` is a string, never inferred as
    a date), so an empty warehouse has the same columns as a full one.

SQL
    Every statement is our DuckDB-dialect text translated by :func:`translate.to_spark`;
    parameters are bound with ``spark.sql(text, args=...)`` (Spark >= 3.4).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from pipeline.engines.base import Engine, EngineError
from pipeline.engines.translate import TranslationError, to_spark
from pipeline.schema.tables import PARTITIONED, TABLES, arrow_schema
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import TOKEN_VIEWS, TOKENS_SQL_SPARK, derived_tables, view_select

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FILE_MODES = ("manifest", "directory")

# Settings for a session this module starts itself (none are applied to a session passed in).
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "true",
}

# Spark's own logging for a session started here: errors only, and no JSON dump of a query's
# analysis error (the engine raises it as one line).
LOG4J2 = """\
status = error
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = spark %p %c{1}: %m%n
logger.sqlctx.name = SQLQueryContextLogger
logger.sqlctx.level = off
logger.captured.name = org.apache.spark.sql.errors
logger.captured.level = off
"""


def _log_config() -> str:
    import tempfile
    from pathlib import Path

    path = Path(tempfile.gettempdir()) / f"pipeline-spark-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(LOG4J2)
        os.replace(tmp, path)
    return str(path)


def missing_requirements() -> str | None:
    """Why Spark cannot start here, or None."""
    import shutil

    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed: pip install 'llm-trace-pipeline[spark]' (pyspark>=3.5)"
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        return "no Java runtime: install Java 17 (e.g. apt-get install openjdk-17-jre-headless)"
    return None


def start_session(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "llm-trace-pipeline",
) -> SparkSession:
    """The active session, or a new one.

    Under ``spark-submit`` or on Databricks the cluster's session is returned as it is. Otherwise
    a local one starts: ``master`` or $PIPELINE_SPARK_MASTER or ``local[*]``, with the UI off,
    quiet logs, UTC session time and shuffle partitions = 2 x cores.
    """
    reason = missing_requirements()
    if reason:
        raise EngineError(f"cannot start Spark: {reason}")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    master = master or os.environ.get("PIPELINE_SPARK_MASTER") or "local[*]"
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = dict(LOCAL_CONF)
    settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={_log_config()}"
    if master.startswith("local"):
        cores = master[master.find("[") + 1 : -1] if "[" in master else "1"
        n = (os.cpu_count() or 2) if cores in ("*", "") else int(cores)
        settings["spark.sql.shuffle.partitions"] = str(2 * n)
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_schema(table: str):
    """The table's Spark read schema: its Parquet columns, plus ``day`` when partitioned."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = arrow_schema(table)
    if table in PARTITIONED:
        schema = schema.append(pa.field("day", pa.string()))
    return from_arrow_schema(schema)


class SparkEngine(Engine):
    name = "spark"

    def __init__(
        self,
        root: str | Layout,
        spark: SparkSession | None = None,
        files: str = "manifest",
        master: str | None = None,
        conf: Mapping[str, str] | None = None,
    ):
        if files not in FILE_MODES:
            raise ValueError(f"files must be one of {FILE_MODES}, not {files!r}")
        layout, uri = _resolve(root)
        super().__init__(layout, uri)
        # PySpark logs a query's analysis error with its full JVM trace; we raise it as one line.
        logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL + 1)
        base = spark or start_session(master, conf)
        self.spark = base.newSession()  # own temp views and settings, same cluster
        self.spark.conf.set("spark.sql.session.timeZone", "UTC")
        self.files = files
        self._views: list[str] = []
        self._register()

    def _restrict_adhoc(self) -> None:
        # No `SELECT * FROM csv.`/etc/passwd``: user SQL reads the registered views only.
        self.spark.conf.set("spark.sql.runSQLOnFiles", "false")

    # -- views ---------------------------------------------------------------------------
    def _register(self) -> None:
        committed = self._committed_files() if self.files == "manifest" else {}
        for table in TABLES:
            df = self._read_table(table, committed.get(table, []))
            base = f"_{table}_base"
            df.createOrReplaceTempView(base)
            self.spark.sql(to_spark(view_select(table, base))).createOrReplaceTempView(table)
            self._views.append(table)
        for view, base in TOKEN_VIEWS.items():
            sql = TOKENS_SQL_SPARK.replace("_requests_base", base)
            self.spark.sql(sql).createOrReplaceTempView(view)
            self._views.append(view)
        for name, paths in self._derived().items():
            self.spark.read.parquet(*paths).createOrReplaceTempView(name)
            self._views.append(name)

    def _read_table(self, table: str, files: list[str]) -> DataFrame:
        schema = spark_schema(table)
        reader = self.spark.read.schema(schema)
        if self.files == "directory":
            path = _join(self.root, table)
            if self._exists(path):
                if table in PARTITIONED:
                    reader = reader.option("basePath", path)
                return reader.parquet(path)
        elif files:
            if table in PARTITIONED:
                reader = reader.option("basePath", _join(self.root, table))
            return reader.parquet(*files)
        return self.spark.createDataFrame([], schema)

    def _committed_files(self) -> dict[str, list[str]]:
        """table -> committed data files (URIs or local paths), from the manifests."""
        out: dict[str, list[str]] = {}
        if self.layout is not None:
            for table in TABLES:
                out[table] = [str(p) for p in self.layout.committed_files(table)]
            return out
        manifests = _join(self.root, "_manifest")
        if not self._list(manifests, "*.json"):
            return out
        rows = (
            self.spark.read.option("multiLine", "true")
            .json(_join(manifests, "*.json"))
            .select("files")
            .collect()
        )
        for row in rows:
            for rel in row["files"] or []:
                out.setdefault(rel.split("/", 1)[0], []).append(_join(self.root, rel))
        return {k: sorted(v) for k, v in out.items()}

    def _derived(self) -> dict[str, list[str]]:
        if self.layout is not None:
            return {k: [str(p) for p in v] for k, v in derived_tables(self.layout).items()}
        out = {}
        for d in self._list(self.root, "*", dirs=True):
            name = d.rstrip("/").rsplit("/", 1)[-1]
            if name.startswith(("_", ".")) or name in TABLES or not name.isidentifier():
                continue
            files = self._list(d, "*.parquet")
            if files:
                out[name] = sorted(files)
        return dict(sorted(out.items()))

    # -- Hadoop file system, for URIs (s3a://, abfss://, gs://, hdfs://, file://) ---------
    def _fs(self, path: str):
        jvm = self.spark.sparkContext._jvm
        p = jvm.org.apache.hadoop.fs.Path(path)
        return p, p.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())

    def _exists(self, path: str) -> bool:
        if self.layout is not None:
            return os.path.isdir(path)
        p, fs = self._fs(path)
        return bool(fs.exists(p))

    def _list(self, path: str, pattern: str, dirs: bool = False) -> list[str]:
        p, fs = self._fs(_join(path, pattern))
        found = fs.globStatus(p) or []
        return [str(s.getPath().toString()) for s in found if bool(s.isDirectory()) == dirs]

    # -- queries -------------------------------------------------------------------------
    def arrow(self, sql: str, params: Mapping[str, object] | None = None) -> pa.Table:
        from pyspark.errors import PySparkException

        try:
            text = to_spark(sql)
        except TranslationError as exc:
            raise EngineError(str(exc)) from None
        try:
            df = self.spark.sql(text, args=dict(params)) if params else self.spark.sql(text)
            return _to_arrow(df)
        except PySparkException as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EngineError(f"query failed (spark): {first}") from None

    def explain(self, sql: str, params: Mapping[str, object] | None = None) -> str:
        """Spark's physical plan of one of our statements (to check push-down and pruning)."""
        text = to_spark(sql)
        df = self.spark.sql(text, args=dict(params)) if params else self.spark.sql(text)
        return df._jdf.queryExecution().executedPlan().toString()

    def views(self) -> list[str]:
        return sorted(self._views)

    def close(self) -> None:
        for v in self._views:
            self.spark.catalog.dropTempView(v)
            self.spark.catalog.dropTempView(f"_{v}_base")
        self._views = []


def _to_arrow(df: DataFrame) -> pa.Table:
    if hasattr(df, "toArrow"):  # Spark >= 4.0
        return df.toArrow()
    batches = df._collect_as_arrow()  # Spark 3.5
    schema = None
    if not batches:
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(df.schema)
        return schema.empty_table()
    return pa.Table.from_batches(batches, schema)


def _resolve(root: str | Layout | os.PathLike) -> tuple[Layout | None, str]:
    """A local warehouse gets a Layout (manifests read by Python); a URI is left to Hadoop."""
    if isinstance(root, Layout):
        return root, str(root.root.resolve())
    text = os.fspath(root)
    if "://" in text or text.startswith("file:"):
        return None, text.rstrip("/")
    from pathlib import Path

    layout = Layout(Path(text))
    return layout, str(layout.root.resolve())


def _join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def manifest_files(manifest_json: str) -> list[str]:
    """The data files one manifest entry commits (helper for Spark jobs that list them)."""
    return list(json.loads(manifest_json).get("files", []))

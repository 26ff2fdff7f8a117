"""Every named query in queries/ gives the same answer on Spark as on DuckDB, over one warehouse.

The warehouse is built the way users build theirs: JSON-lines logs in our format, ingested with
``ingest_paths``. Queries are discovered from queries/, so a new query is covered automatically.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import polars as pl
import pytest

from pipeline.engines import open_engine
from pipeline.engines.translate import to_spark
from pipeline.ingest.run import ingest_paths, totals
from pipeline.query.named import all_queries, queries_dir
from pipeline.schema.record import EXAMPLE_RECORD
from pipeline.warehouse.derived import write_derived
from pipeline.warehouse.layout import Layout

pytestmark = pytest.mark.spark

QUERIES = all_queries(queries_dir())
REL = 1e-9

MODELS = ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct", None]
GPUS = ["H100-SXM", "A100-80G", None]
PROMPTS = [17, 100, 130, 300, 700, 1500, 3000, 6000, 12000, 20000]


def make_record(rng: random.Random, run: str, i: int, t0: float, clock: str) -> dict:
    r = dict(EXAMPLE_RECORD)
    out = rng.choice([0, 1, 2, 5, 17, 64, 200])
    prompt = rng.choice(PROMPTS) + rng.randrange(0, 50)
    arrival = t0 + i * rng.uniform(0.05, 3.0)
    queue = rng.uniform(0.0, 0.2)
    prefill = rng.uniform(0.005, 0.4) * (1 + prompt / 4096)
    gaps = [round(rng.uniform(0.004, 0.06), 6) for _ in range(max(out - 1, 0))]
    first = queue + prefill
    times = [first]
    for g in gaps:
        times.append(times[-1] + g)
    status = rng.choices(["ok", "error", "cancelled"], [90, 6, 4])[0]
    r.update(
        request_id=f"req-{i:05d}",
        run_id=run,
        model=rng.choice(MODELS),
        gpu=rng.choice(GPUS),
        prompt_tokens=prompt,
        cached_tokens=rng.randrange(0, prompt + 1) if rng.random() < 0.3 else 0,
        output_tokens=out,
        clock=clock,
        arrival_ts=arrival,
        scheduled_ts=arrival + queue,
        first_token_ts=arrival + first if out else None,
        finish_ts=arrival + (times[-1] if out else first),
        token_times=[round(t, 6) for t in times] if out else None,
        token_counts=None if rng.random() < 0.5 else [1] * out if out else None,
        status=status,
        error=None if status == "ok" else "boom",
    )
    if rng.random() < 0.1 and out >= 4:  # a streamed log: chunks of tokens, fewer emissions
        chunks = r["token_times"][1::2]
        chunks[0] = round(first, 6)
        r["token_times"] = chunks
        r["token_counts"] = [2] * (len(chunks) - 1) + [out - 2 * (len(chunks) - 1)]
    return r


def write_logs(folder: Path, seed: int = 7) -> dict[str, int]:
    """A few hundred varied requests in four files, with bad lines and duplicates."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    plan = [
        ("prod-h100-a", 1762041600.0, "unix", 140),  # 2025-11-02
        ("prod-h100-b", 1762128000.0 - 120.0, "unix", 110),  # crosses midnight
        ("bench-rel", 1000.0, "relative", 90),  # no wall clock: day=unknown
        ("prod-mixed", 1762214400.0, "unix", 80),
    ]
    expected = {"lines": 0, "bad": 0, "dups": 0}
    for n_file, (run, t0, clock, n) in enumerate(plan):
        lines = [json.dumps(make_record(rng, run, i, t0, clock)) for i in range(n)]
        if n_file == 0:
            lines.insert(10, "{not json")
            lines.insert(
                20,
                json.dumps({**json.loads(lines[5]), "request_id": "bad-1", "cached_tokens": 10**6}),
            )
            expected["bad"] += 2
        if n_file == 3:
            lines += lines[:5]  # duplicate keys: dropped at ingest
            expected["dups"] += 5
        expected["lines"] += len(lines)
        (folder / f"{run}.jsonl").write_text("\n".join(lines) + "\n")
    return expected


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> tuple[Layout, dict[str, int]]:
    root = tmp_path_factory.mktemp("spark")
    expected = write_logs(root / "logs")
    layout = Layout(root / "warehouse")
    results = ingest_paths([root / "logs"], layout)
    t = totals(results)
    assert t["read"] == expected["lines"]
    assert t["duplicates"] == expected["dups"]
    assert t["quarantined"] >= expected["bad"]
    write_derived(
        layout,
        "bench_notes",
        pl.DataFrame({"model": ["m1", "m2"], "gpu": ["H100-SXM", "A100-80G"], "a": [0.5, 1.25]}),
    )
    # A summary-only rate sweep (SGLang bench_serving's JSON lines, one summary per rate) for
    # the queries that read run_summaries: the load curves and the parity table.
    sweep = root / "sweep" / "sglang_online_output.jsonl"
    sweep.parent.mkdir()
    sweep.write_text(
        "".join(
            json.dumps({"backend": "sglang", "dataset_name": "random", "request_rate": rate,
                        "median_ttft_ms": ttft, "median_itl_ms": itl, "median_e2e_latency_ms": e2e,
                        "mean_e2e_latency_ms": e2e * 1.01, "output_throughput": out_tps,
                        "duration": 300.0, "completed": done, "total_input_tokens": done * 1024,
                        "total_output_tokens": done * 512}) + "\n"
            for rate, ttft, itl, e2e, out_tps, done in (
                (1.0, 85.0, 13.5, 7800.0, 530.0, 300), (2.0, 88.0, 14.8, 8500.0, 990.0, 600),
            )
        )
    )  # fmt: skip
    assert totals(ingest_paths([sweep], layout))["quarantined"] == 0
    expected["fit"] = _fit(layout)
    expected["ingested"] = t["ingested"]
    expected["quarantined"] = t["quarantined"]
    return layout, expected


def _fit(layout: Layout) -> str:
    """Derived tables (cost_models, claims, ...) for the queries that read them: the real fit."""
    try:
        from pipeline.fit import fit_warehouse

        fit_warehouse(layout)
    except Exception as exc:  # the fit stage is optional here; its own tests cover it
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def tables_read(query) -> set[str]:
    """Tables and views a query reads (CTE names excluded)."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(query.sql, read="duckdb")
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    return {t.name for t in tree.find_all(exp.Table) if t.name and t.name not in ctes}


@pytest.fixture(scope="module")
def engines(spark, warehouse):
    layout, _ = warehouse
    with open_engine("duckdb", layout) as duck, open_engine("spark", layout, spark=spark) as sp:
        yield duck, sp


def assert_same(a: pl.DataFrame, b: pl.DataFrame, what: str) -> None:
    assert a.columns == b.columns, what
    assert a.schema == b.schema, f"{what}: column types differ: {a.schema} vs {b.schema}"
    assert a.height == b.height, f"{what}: {a.height} rows on duckdb, {b.height} on spark"
    for name in a.columns:
        x, y = a[name].to_list(), b[name].to_list()
        if a[name].dtype.is_float() or b[name].dtype.is_float():
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                if u is None or v is None:
                    assert u is None and v is None, f"{what}.{name}[{i}]: {u} vs {v}"
                elif math.isnan(u) or math.isnan(v):
                    assert math.isnan(u) and math.isnan(v), f"{what}.{name}[{i}]: {u} vs {v}"
                else:
                    assert math.isclose(u, v, rel_tol=REL, abs_tol=1e-12), (
                        f"{what}.{name}[{i}]: duckdb {u!r} spark {v!r}"
                    )
        else:
            assert x == y, f"{what}.{name}: {x[:5]}... vs {y[:5]}..."


def test_queries_are_discovered():
    names = {q.name for q in QUERIES}
    assert {"latency_percentiles", "throughput_by_window", "ttft_by_prompt_length"} <= names


def data_params(duck, query) -> dict[str, object]:
    """A parameter named after a column of `requests` gets a value found in the data (e.g.
    source_file), so the query selects something; the others keep the file's defaults."""
    columns = set(duck.sql("SELECT * FROM requests LIMIT 0").columns)
    return {
        p: duck.sql(f"SELECT min({p}) AS v FROM requests").item()
        for p in sorted(query.used_params())
        if p in columns
    }


@pytest.mark.parametrize("query", QUERIES, ids=[q.name for q in QUERIES])
def test_named_query_same_on_both_engines(engines, warehouse, query):
    duck, sp = engines
    absent = tables_read(query) - set(duck.views())
    if absent:
        pytest.skip(
            f"reads {', '.join(sorted(absent))}, which the fit did not write here "
            f"(fit: {warehouse[1]['fit']})"
        )
    params = data_params(duck, query)
    a = duck.named(query, params)
    b = sp.named(query, params)
    assert_same(a, b, query.name)
    if a.height == 0:  # equal, but not much of a test: say so in the summary
        pytest.skip(
            f"{query.name}: compared, but it returns no rows on the test warehouse "
            "(it reads what a later stage writes); add data for it"
        )


@pytest.mark.parametrize("window_s", [1, 7.5, 3600])
def test_parameters_are_bound_on_spark(engines, window_s):
    duck, sp = engines
    a = duck.named("throughput_by_window", {"window_s": window_s})
    b = sp.named("throughput_by_window", {"window_s": str(window_s)})
    assert_same(a, b, f"throughput_by_window(window_s={window_s})")
    assert (
        a["requests_finished"].sum()
        == duck.sql(
            "SELECT count(*) AS n FROM requests WHERE status = 'ok' AND e2e_s IS NOT NULL"
        ).item()
    )


def test_parameter_value_is_never_sql(engines):
    """A hostile value is data: the query compares with it, it does not run it."""
    _, sp = engines
    sql = "SELECT count(*) AS n FROM requests WHERE model = $m"
    assert ":m" in to_spark(sql) and "$" not in to_spark(sql)
    evil = "x' OR '1'='1"
    assert sp.sql(sql, {"m": evil}).item() == 0


def test_views_and_counts(engines, warehouse):
    duck, sp = engines
    _, expected = warehouse
    assert duck.views() == sp.views()
    assert {
        "requests",
        "tokens",
        "quarantine",
        "runs",
        "arrivals",
        "run_summaries",
        "bench_notes",
    } <= set(sp.views())
    q = "SELECT count(*) AS n FROM requests"
    assert sp.sql(q).item() == duck.sql(q).item() == expected["ingested"]
    q = "SELECT count(*) AS n FROM quarantine"
    assert sp.sql(q).item() == duck.sql(q).item() == expected["quarantined"]
    q = "SELECT count(*) AS n, sum(n_tokens) AS t FROM tokens"
    assert_same(duck.sql(q), sp.sql(q), "tokens")
    q = "SELECT day, count(*) AS n FROM requests GROUP BY day ORDER BY day"
    days = sp.sql(q)
    assert_same(duck.sql(q), days, "days")
    assert days["day"].to_list() == ["2025-11-02", "2025-11-03", "2025-11-04", "unknown"]
    q = "SELECT run_id, min(arrival_s) AS lo, max(arrival_s) AS hi FROM requests GROUP BY 1"
    q += " ORDER BY 1"
    a = sp.sql(q)
    assert_same(duck.sql(q), a, "arrival_s")
    assert a["lo"].to_list() == [0.0] * 4
    assert_same(
        duck.sql("SELECT * FROM bench_notes ORDER BY model"),
        sp.sql("SELECT * FROM bench_notes ORDER BY model"),
        "derived",
    )


def test_percentiles_interpolate_exactly(engines):
    """Spark's percentile_cont is exact and linear like DuckDB's (sqlglot alone would approx)."""
    duck, sp = engines
    sql = (
        "SELECT quantile_cont(x, 0.9) AS a, "
        "percentile_cont(0.25) WITHIN GROUP (ORDER BY x DESC) AS b, "
        "percentile_disc(0.5) WITHIN GROUP (ORDER BY x) AS c "
        "FROM (SELECT ttft_s AS x FROM requests WHERE ttft_s IS NOT NULL)"
    )
    assert "APPROX" not in to_spark(sql).upper()
    assert_same(duck.sql(sql), sp.sql(sql), "percentiles")
    v = duck.sql("SELECT x FROM (VALUES (1.0), (2.0), (4.0), (10.0)) t(x)")["x"]
    assert (
        sp.sql(
            "SELECT percentile_cont(0.9) WITHIN GROUP (ORDER BY x) AS p "
            "FROM (VALUES (1.0), (2.0), (4.0), (10.0)) t(x)"
        ).item()
        == pytest.approx(4.0 + 0.7 * 6.0, rel=1e-12)
        == v.quantile(0.9, "linear")
    )


def test_directory_mode_and_uri(spark, warehouse, engines):
    """Reading table folders, or the warehouse as a file:// URI, gives the same answers."""
    layout, _ = warehouse
    duck, _ = engines
    with (
        open_engine("spark", layout, spark=spark, files="directory") as d,
        open_engine("spark", f"file://{layout.root.resolve()}", spark=spark) as u,
    ):
        for name in ("latency_percentiles", "quarantine_reasons"):
            want = duck.named(name)
            assert_same(want, d.named(name), f"{name} (directory)")
            assert_same(want, u.named(name), f"{name} (uri)")
        assert "bench_notes" in u.views()


def test_orphans_are_ignored_in_manifest_mode(spark, warehouse, tmp_path):
    """An uncommitted data file (a killed ingest's) is invisible unless reading directories."""
    layout, expected = warehouse
    copy = Layout(tmp_path / "wh")
    shutil.copytree(layout.root, copy.root)
    some = copy.committed_files("requests")[0]
    orphan = some.parent / "part-00000000deadbeef-0.parquet"
    shutil.copy(some, orphan)
    extra = pl.read_parquet(orphan).height
    q = "SELECT count(*) AS n FROM requests"
    with open_engine("spark", copy, spark=spark) as m:
        assert m.sql(q).item() == expected["ingested"]
    with open_engine("spark", copy, spark=spark, files="directory") as d:
        assert d.sql(q).item() == expected["ingested"] + extra


def test_errors_are_one_line(engines):
    from pipeline.engines import EngineError
    from pipeline.query.named import QueryError

    _, sp = engines
    with pytest.raises(EngineError, match="query failed"):
        sp.sql("SELECT no_such_column FROM requests")
    with pytest.raises(QueryError):
        sp.adhoc("DROP TABLE requests")
    with pytest.raises(QueryError, match="no parameter"):
        sp.named("latency_percentiles", {"nope": 1})

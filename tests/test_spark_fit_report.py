"""`pipeline fit` and `pipeline report` with --engine spark give what they give with duckdb.

One generated warehouse (600 requests, seed 3, per-token times); the commands run in process
with the module's local Spark session, which they pick up as the active one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.ingest.run import ingest_paths
from pipeline.sim.generator import GenerateSpec, generate
from pipeline.warehouse.layout import Layout

pytestmark = pytest.mark.spark

REL = 1e-9


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Layout:
    root = tmp_path_factory.mktemp("spark-fit")
    (root / "logs").mkdir()
    generate(GenerateSpec(requests=600, seed=3), root / "logs" / "h100.jsonl")
    layout = Layout(root / "warehouse")
    ingest_paths([root / "logs"], layout)
    return layout


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def same(a: object, b: object, what: str) -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL), (
            f"{what}: duckdb {a!r} spark {b!r}"
        )
    else:
        assert a == b, f"{what}: duckdb {a!r} spark {b!r}"


def assert_same_frames(a: pl.DataFrame, b: pl.DataFrame, what: str) -> None:
    assert a.schema == b.schema, what
    assert a.height == b.height, what
    for name in a.columns:
        for i, (u, v) in enumerate(zip(a[name].to_list(), b[name].to_list(), strict=True)):
            same(u, v, f"{what}.{name}[{i}]")


def test_fit_on_spark_equals_duckdb(spark, warehouse):
    w = str(warehouse.root)
    run("fit", "--warehouse", w, "--quiet")
    duck = {t: pl.read_parquet(warehouse.root / t / "*.parquet") for t in ("cost_models", "claims")}
    run("fit", "--warehouse", w, "--quiet", "--engine", "spark")
    sp = {t: pl.read_parquet(warehouse.root / t / "*.parquet") for t in ("cost_models", "claims")}
    assert duck["cost_models"].height == 2  # prefill and decode of the one group
    assert set(duck["cost_models"]["method"]) == {"tokens"}  # emissions came back joined in SQL
    for t in duck:
        assert_same_frames(duck[t], sp[t], t)


def test_report_on_spark_equals_duckdb(spark, warehouse, tmp_path):
    """Same headline figures, with the period filtered in Spark (half of the data)."""
    from pipeline.engines import open_engine

    with open_engine("duckdb", warehouse) as duck:
        lo, hi = duck.sql("SELECT min(arrival_at) AS lo, max(arrival_at) AS hi FROM requests").row(
            0
        )
    mid = lo + (hi - lo) / 2
    period = ["--since", lo.isoformat(), "--until", mid.isoformat(), "--compare-with", "none"]
    pages = {}
    for engine in ("duckdb", "spark"):
        out = tmp_path / engine
        path = Path(
            run("report", "--warehouse", str(warehouse.root), "--out-dir", str(out), "--quiet",
                "--engine", engine, *period).strip()
        )  # fmt: skip
        assert path.is_file() and path.suffix == ".html"
        pages[engine] = json.loads(path.with_suffix(".json").read_text())
    a, b = (pages[e]["sections"]["headline"] for e in ("duckdb", "spark"))
    assert 0 < a["requests"] < 600  # the period holds part of the data
    for key in ("requests", "failed", "output_tokens", "series"):
        same(a[key], b[key], key)
    assert len(a["by_series"]) == len(b["by_series"]) == 1
    for r, s in zip(a["by_series"], b["by_series"], strict=True):
        for key in ("model", "gpu", "requests", "ttft_p50", "ttft_p90"):
            same(r[key], s[key], f"{r['model']} x {r['gpu']}: {key}")
    assert pages["duckdb"]["charts"] == pages["spark"]["charts"]
    assert pages["duckdb"]["period"] == pages["spark"]["period"]

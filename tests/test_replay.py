"""pipeline replay: accuracy against recorded runs, write-back, routing, CLI, sweeps.

Accuracy (issue 6): a run is replayed under its own configuration with step times fitted on a
*different* run of the same deployment (another load level, another seed); p50 and p90 of TTFT,
TPOT and E2E must come back within 10 %, including an overloaded run where queueing dominates.
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from pipeline import catalog
from pipeline.cli import main
from pipeline.fit import fit_warehouse, load_fits
from pipeline.ingest.run import ingest_paths
from pipeline.physics import StepCost
from pipeline.query.named import QueryError, all_queries, load_query, run_named
from pipeline.replay import (
    compare_with_observed,
    load_workload,
    replay_run_id,
    resolve_scenario,
    run_key,
    simulate_scenario,
    write_replay,
)
from pipeline.replay.config import WhatIf
from pipeline.replay.cost import Target, choose
from pipeline.sim import EngineConfig
from pipeline.sim import simulate as sim_one
from pipeline.sim.cluster import Pool, simulate_pool
from pipeline.sim.generator import GenerateSpec, generate
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.conftest import REPO

EFF = {"mfu": 0.45, "mbu": 0.72, "step_overhead": 2.5e-3, "seq_overhead": 1.5e-5}
TOL = 0.10


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """Warehouse with a fit on run 'low' (light load) and two other runs of the deployment."""
    d = tmp_path_factory.mktemp("replay")
    layout = Layout(d / "wh")
    spec = dict(gpu="H100-SXM", model="llama-3.1-8b", efficiencies=EFF)
    generate(GenerateSpec(requests=1500, seed=21, rate=4.0, **spec), d / "low.jsonl")
    ingest_paths([d / "low.jsonl"], layout)
    fit_warehouse(layout, claims=False)
    truths = {}
    for name, seed, rate in (("mid", 22, 12.0), ("over", 23, 40.0)):
        truths[name] = generate(GenerateSpec(requests=1500, seed=seed, rate=rate, **spec),
                                d / f"{name}.jsonl")  # fmt: skip
        ingest_paths([d / f"{name}.jsonl"], layout)
    return layout, truths


@pytest.mark.parametrize("run", ["mid", "over"])
def test_replay_reproduces_recorded_percentiles(fitted, run):
    layout, truths = fitted
    w = load_workload(run, layout)
    fits = load_fits(layout)
    sc = resolve_scenario(WhatIf(), w, fits)
    assert [p.cost.source for p in sc.pools] == ["fit"]
    res = simulate_scenario(sc, w)
    table = compare_with_observed(res)
    assert table is not None
    for row in table.filter(pl.col("percentile").is_in(["p50", "p90"])).iter_rows(named=True):
        assert abs(row["error"]) <= TOL, row
    if run == "over":  # queueing dominates: TTFT p50 is seconds, not milliseconds
        assert truths[run]["summary"]["ttft_p50_s"] > 5.0


def _same(a, b) -> bool:
    """Equal, floats within 1e-9 relative: DuckDB's parallel sums differ in the last bit or two
    with the summation order (rounding to 12 digits still flipped a digit at a boundary under
    load); a replayed row in an observed view moves a count or a mean far more."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15) or (a != a and b != b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _observed_snapshot(layout):
    """Every named query on observed data, and the fit's cost models, as plain Python values."""
    from pipeline.fit.run import fit_all
    from pipeline.fit.store import to_frame

    con = connect(layout)
    out = {}
    for q in all_queries(REPO / "queries"):
        if q.name == "replay_compare":  # the one query that reads replays, on purpose
            continue
        try:
            out[q.name] = run_named(con, q).to_pylist()
        except QueryError as exc:  # needs a derived table (attribution ...) this one has not
            out[q.name] = str(exc)
    fits, _ = fit_all(con, 1500)
    out["fit"] = to_frame(fits).drop("fitted_at", strict=False).to_dicts()
    return out


def test_write_back_is_idempotent_and_kept_apart_from_observed_data(fitted, tmp_path):
    layout, _ = fitted
    before = _observed_snapshot(layout)
    w = load_workload("mid", layout)
    sc = resolve_scenario(WhatIf(name="same"), w, load_fits(layout))
    res = simulate_scenario(sc, w)
    key = run_key(w, sc, 1.0)
    run_id = replay_run_id(sc, key)
    first = write_replay(layout, res, run_id, key)
    assert first["status"] == "written" and first["requests"] == w.n and first["steps"] > 0
    again = write_replay(layout, simulate_scenario(sc, w), run_id, key)
    assert again["status"] == "already"
    con = connect(layout)
    # Observed and simulated never mix: no replayed row in requests / runs / tokens ...
    for table in ("requests", "runs", "tokens"):
        n = con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [run_id]).fetchall()
        assert n == [(0,)], table
    # ... and every observed query and the fit give exactly what they gave before the replay.
    after = _observed_snapshot(layout)
    assert after.keys() == before.keys() and len(before) >= 15
    for name in before:
        assert _same(after[name], before[name]), name
    n, fmt, src = con.execute(
        "SELECT count(*), any_value(source_format), any_value(source_file) FROM replay_requests "
        "WHERE run_id = ?", [run_id]
    ).fetchall()[0]  # fmt: skip
    assert (n, fmt, src) == (w.n, "replay", "mid")
    assert con.execute("SELECT count(*) FROM replay_runs").fetchall() == [(1,)]
    # Per-token rows exist and agree with the request-level stamps.
    toks = con.execute("SELECT count(*) FROM replay_tokens WHERE run_id = ?", [run_id])
    assert toks.fetchall()[0][0] == int(w.output.sum())
    steps = con.execute(
        "SELECT count(*), sum(prefill_tokens), sum(decode_tokens), max(kv_blocks), "
        "max(kv_blocks_total) FROM replay_steps WHERE run_id = ?", [run_id]
    ).fetchall()[0]  # fmt: skip
    assert steps[0] == res.pools["main"].engine_steps
    assert steps[1] >= int(w.prompt.sum())  # recompute after preemption adds prefill tokens
    # Every output token but the first of each request is a decode token.
    assert steps[2] == int(np.maximum(w.output - 1, 0).sum()) or res.preemptions.sum() > 0
    assert 0 < steps[3] <= steps[4]
    cmp = run_named(con, load_query("replay_compare", REPO / "queries")).to_pylist()
    mine = [r for r in cmp if r["replay_run_id"] == run_id]
    assert len(mine) == 1 and mine[0]["source_run_id"] == "mid"
    assert mine[0]["requests"] == w.n
    assert abs(mine[0]["ttft_p50_replayed"] / mine[0]["ttft_p50_observed"] - 1) <= TOL


def test_single_replica_cluster_is_the_engine(fitted):
    layout, _ = fitted
    w = load_workload("over", layout)
    cost = StepCost(catalog.model("llama-3.1-8b"), catalog.gpu("H100-SXM"), **EFF)
    cfg = EngineConfig(kv_capacity_tokens=60_000, max_num_seqs=64)
    a = sim_one(w.arrival, w.prompt, w.output, cfg, cost)
    b = simulate_pool(w.arrival, w.prompt, w.output, Pool(cfg, cost), record_steps=True)
    np.testing.assert_array_equal(a.finish, b.finish)
    np.testing.assert_array_equal(a.decode_step_end, b.servers[0].decode_step_end)
    assert len(b.steps[0]["t_start"]) == a.steps
    assert int(b.preemptions.sum()) == int(a.preemptions.sum()) > 0  # tight KV: preemption
    # Least-loaded routing: each server behaves exactly as the engine on what it was sent.
    c = simulate_pool(w.arrival, w.prompt, w.output, Pool(cfg, cost, 3, "least-loaded"))
    for k in range(3):
        g = c.ids[k]
        r = sim_one(w.arrival[g], w.prompt[g], w.output[g], cfg, cost)
        np.testing.assert_allclose(r.finish, c.finish[g], rtol=1e-12)
    counts = np.bincount(c.replica)
    assert counts.sum() == w.n and counts.min() > 0.25 * w.n


def test_nearest_hardware_borrows_fitted_efficiencies(fitted):
    layout, _ = fitted
    fits = load_fits(layout)
    target = Target(catalog.model("llama-3.1-8b"), catalog.gpu("H200"))
    ch = choose(target, fits)
    assert ch.source == "nearest-fit" and "H100-SXM" in ch.describe and "H200" in ch.describe
    fm = next(iter(fits.values()))
    assert ch.cost.decode.mbu == pytest.approx(fm.decode.mbu)
    assert ch.cost.decode.gpu.name == "H200"
    default = choose(target, {})
    assert default.source == "default" and "default efficiencies" in default.describe


def test_cli_replay_compare_sweep(fitted, tmp_path):
    layout, _ = fitted
    cfg = tmp_path / "two.toml"
    cfg.write_text('name = "two"\n[deployment]\nreplicas = 2\nrouting = "least-loaded"\n')
    runner = CliRunner()
    args = ["replay", "--workload", "over", "-w", str(layout.root), "--config", str(cfg)]
    r = runner.invoke(main, [*args, "--compare", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["run_id"].startswith("replay-two-") and doc["summary"]["gpus"] == 2
    assert doc["write"]["status"] == "written"
    # Two servers serve an overloaded run far faster than the one it was recorded on.
    ttft = {c["percentile"]: c for c in doc["compare"] if c["metric"] == "ttft"}
    assert ttft["p50"]["replayed_s"] < 0.2 * ttft["p50"]["observed_s"]
    r2 = runner.invoke(main, [*args, "--format", "json"])
    assert json.loads(r2.stdout.strip().splitlines()[-1])["write"]["status"] == "already"
    r3 = runner.invoke(
        main,
        ["replay", "--workload", "over", "-w", str(layout.root), "--sweep", "gpus=1,2,4",
         "--slo-ttft", "1.0", "--slo-tpot", "0.1", "--rate-scale", "0.5"],
    )  # fmt: skip
    assert r3.exit_code == 0, r3.output
    assert "cheapest configuration meeting the SLO: gpus=2" in r3.output, r3.output
    bad = runner.invoke(main, ["replay", "--workload", "nope", "-w", str(layout.root)])
    assert bad.exit_code == 2 and "neither a run_id" in bad.output


def test_rate_scale_and_truncation(fitted):
    layout, _ = fitted
    w = load_workload("mid", layout)
    s = w.scaled(2.0, 100)
    assert s.n == 100 and s.observed is None
    np.testing.assert_allclose(s.arrival, w.arrival[:100] / 2.0)


def test_replay_of_an_arrivals_trace(shared, tmp_path):
    layout = Layout(tmp_path / "wh")
    ingest_paths([shared / "real_traces/azure_llm_2023/AzureLLMInferenceTrace_conv.head.csv"],
                 layout)  # fmt: skip
    run = connect(layout).execute("SELECT any_value(run_id) FROM arrivals").fetchall()[0][0]
    w = load_workload(run, layout)
    assert w.kind == "arrivals" and w.n > 1000
    with pytest.raises(ValueError, match=r"deployment\.model"):
        resolve_scenario(WhatIf(), w, {})
    wi = WhatIf.model_validate(
        {"name": "azure", "deployment": {"model": "llama-3.1-70b", "gpu": "H100-SXM", "tp": 4,
                                         "replicas": 2}, "workload": {"max_requests": 400}}
    )  # fmt: skip
    w = w.scaled(1.0, 400)
    sc = resolve_scenario(wi, w, {})
    res = simulate_scenario(sc, w)
    out = write_replay(layout, res, replay_run_id(sc, run_key(w, sc, 1.0)), run_key(w, sc, 1.0))
    assert out["requests"] + out["refused"] == 400
    assert compare_with_observed(res) is None  # no observed latencies in an arrivals trace
    row = connect(layout).execute(
        "SELECT count(*), min(ttft_s) FROM replay_requests"
    ).fetchall()[0]  # fmt: skip
    assert row[0] == 400 and row[1] > 0


def test_example_configs_resolve(fitted):
    layout, _ = fitted
    from pipeline.replay import load_whatif

    w = load_workload("mid", layout).scaled(1.0, 50)
    for path in sorted((REPO / "examples/whatif").glob("*.toml")):
        sc = resolve_scenario(load_whatif(path), w, load_fits(layout))
        res = simulate_scenario(sc, w, record_steps=False)
        assert res.ok.sum() + (~res.ok).sum() == 50, path.name
        assert np.all(np.isfinite(res.finish[res.ok])), path.name


def test_a_killed_replay_write_is_recovered_by_the_next_one(tmp_path):
    """The one commit protocol (pipeline/warehouse/writer.py) for replay write-back: SIGKILL
    after staging, before anything is published; the next replay removes the staged leftovers
    itself, whichever replay it is (recovery used to wait for the next ingest), and the killed
    one, run again, is written exactly once."""
    import os
    import signal
    import subprocess
    import sys

    trace = tmp_path / "t.jsonl"
    generate(GenerateSpec(requests=200, seed=3, token_times=False), trace)
    layout = Layout(tmp_path / "wh")
    ingest_paths([trace], layout)
    cmd = [sys.executable, "-m", "pipeline", "replay", "--workload", "t", "-w", str(layout.root),
           "-q"]  # fmt: skip
    env = {**os.environ, "PIPELINE_TEST_CRASH_AT": "before_commit"}
    killed = subprocess.run(cmd, env=env, capture_output=True, timeout=300, cwd=REPO)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert any(layout.staging_dir.iterdir())  # what the killed writer left
    # Another replay (half the rate) clears the killed one's leftovers, not only its own.
    other = subprocess.run([*cmd, "--rate-scale", "0.5"], capture_output=True, timeout=300,
                           cwd=REPO)  # fmt: skip
    assert other.returncode == 0, other.stderr.decode()[-2000:]
    assert not any(layout.staging_dir.iterdir()) and not layout.orphans()
    done = subprocess.run(cmd, capture_output=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    n = connect(layout).execute(
        "SELECT count(DISTINCT run_id), count(*), count(DISTINCT (run_id, request_id)) "
        "FROM replay_requests"
    )
    assert n.fetchone() == (2, 400, 400)


@pytest.mark.parametrize("patch", [{}, {"disaggregation": {"enabled": True}}])
def test_written_token_times_are_the_simulated_emissions(fitted, tmp_path, patch):
    """Every replayed request's stored token times are the simulation's emission times minus
    its arrival, exactly (computed here with np.repeat, which the write-back no longer uses),
    colocated and disaggregated; the first is the row's TTFT and the last its E2E."""
    import pyarrow.parquet as pq

    layout, _ = fitted
    w = load_workload("mid", layout)
    sc = resolve_scenario(WhatIf.model_validate({"name": "tt", **patch}), w, load_fits(layout))
    res = simulate_scenario(sc, w)
    expected = {}
    for g, offs, times in res.token_chunks():
        rel = times - np.repeat(w.arrival[g], np.diff(offs))
        for j, i in enumerate(g.tolist()):
            expected[w.request_id[i]] = rel[offs[j] : offs[j + 1]].tolist()
    out = Layout(tmp_path / "wh")
    key = run_key(w, sc, 1.0)
    assert write_replay(out, res, replay_run_id(sc, key), key)["status"] == "written"
    sql = "SELECT request_id, token_times, ttft_s, e2e_s FROM replay_requests WHERE status='ok'"
    rows = connect(out).execute(sql).fetchall()
    assert len(rows) == len(expected) == int(res.ok.sum()) > 1000
    for rid, tt, ttft, e2e in rows:
        assert tt == expected[rid], rid
        # ttft_s / e2e_s come from the stored timestamps (microseconds, both ends rounded).
        assert abs(tt[0] - ttft) <= 2e-6 and abs(tt[-1] - e2e) <= 2e-6, rid
    # The times are byte-stream-split: the option has to name the list's leaf column, and
    # keyed by the list's name it was silently ignored (PLAIN, 1.5x the bytes).
    part = next((out.root / "replay_requests").rglob("*.parquet"))
    meta = pq.ParquetFile(part).metadata.row_group(0)
    cols = {meta.column(c).path_in_schema: meta.column(c) for c in range(meta.num_columns)}
    assert "BYTE_STREAM_SPLIT" in cols["token_times.list.element"].encodings
    assert {c.compression for c in cols.values()} == {"SNAPPY"}


def test_a_failed_replay_write_leaves_nothing_and_no_thread(fitted, tmp_path, monkeypatch):
    """The steps table is written on its own thread while the requests stream. If the requests
    fail, that thread is waited for, nothing is committed, and the next write is complete."""
    import threading

    import pipeline.replay.write as replay_write

    layout, _ = fitted
    w = load_workload("mid", layout)
    sc = resolve_scenario(WhatIf(name="fail"), w, load_fits(layout))
    res = simulate_scenario(sc, w)
    out = Layout(tmp_path / "wh")
    key = run_key(w, sc, 1.0)

    def broken(*a, **k):
        raise OSError("disk full")

    real = replay_write._frame
    monkeypatch.setattr(replay_write, "_frame", broken)
    with pytest.raises(OSError, match="disk full"):
        write_replay(out, res, replay_run_id(sc, key), key)
    assert not [t for t in threading.enumerate() if t.name.startswith("replay-steps")]
    assert not out.manifest_file(key).exists() and not any(out.staging_dir.iterdir())
    monkeypatch.setattr(replay_write, "_frame", real)
    done = write_replay(out, res, replay_run_id(sc, key), key)
    assert done["status"] == "written" and done["steps"] == res.pools["main"].engine_steps
    con = connect(out)
    assert con.execute("SELECT count(*) FROM replay_requests").fetchone() == (w.n,)
    assert con.execute("SELECT count(*) FROM replay_steps").fetchone() == (done["steps"],)


def test_steps_come_in_bounded_frames_that_add_up_to_the_log(fitted):
    layout, _ = fitted
    w = load_workload("mid", layout)
    res = simulate_scenario(resolve_scenario(WhatIf(name="st"), w, load_fits(layout)), w)
    small = list(res.steps_frames("r", rows=1000))
    assert max(f.height for f in small) == 1000 and len(small) > 3
    whole = pl.concat(list(res.steps_frames("r", rows=1 << 40)))
    assert pl.concat(small).equals(whole) and whole.height == res.pools["main"].engine_steps
    st = res.pools["main"].steps[0]
    assert whole["step"].to_list() == list(range(len(st["t_start"])))
    assert whole["t_end_s"].to_numpy().tolist() == st["t_end"].astype(float).tolist()

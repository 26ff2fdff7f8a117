"""Every option of every command is exercised by a CLI test (issue 13, point 5).

The last test walks the commands' declared options and fails when one is named by no test
that also names its command, so an option added without a test fails it. The others run the
options the rest of the suite did not, each checked by what it changes.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import time

import click
import numpy as np
import pytest
from click.testing import CliRunner

from pipeline.cli import all_commands, main
from tests.conftest import REPO, record, write_jsonl


def _invoke(args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False, **kw)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """A generated run (truth beside it) with every model option given."""
    d = tmp_path_factory.mktemp("gen")
    out = d / "opts.jsonl"
    r = _invoke(["generate", "-o", out, "-n", "600", "--seed", "4", "--rate", "3",
                 "--arrivals", "bursty", "--gpu-count", "2", "--attention", "sdpa",
                 "--weight-dtype", "fp8", "--kv-dtype", "fp8", "--max-batched-tokens", "1024",
                 "--no-chunked-prefill", "--start", "2026-03-01T00:00:00", "--mfu", "0.4",
                 "--mbu", "0.5"])  # fmt: skip
    assert r.exit_code == 0, r.output
    return out


def test_generate_options_land_in_the_trace_and_its_truth(trace):
    truth = json.loads(pathlib.Path(f"{trace}.truth.json").read_text())
    assert (truth["arrival_process"]["rate"], truth["arrival_process"]["arrivals"]) == (3, "bursty")
    assert (truth["gpu_count"], truth["attention"]) == (2, "sdpa")
    cost, cfg = truth["cost"], truth["config"]
    assert (cost["weight_dtype"], cost["kv_dtype"], cost["mfu"], cost["mbu"]) == (
        "fp8", "fp8", 0.4, 0.5
    )  # fmt: skip
    assert (cfg["max_batched_tokens"], cfg["chunked_prefill"]) == (1024, False)
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert {(r["gpu_count"], r["attention"], r["weight_dtype"], r["kv_dtype"]) for r in rows} == {
        (2, "sdpa", "fp8", "fp8")
    }
    assert {(r["max_batched_tokens"], r["chunked_prefill"]) for r in rows} == {(1024, False)}
    start = dt.datetime(2026, 3, 1, tzinfo=dt.UTC).timestamp()
    arrivals = sorted(r["arrival_ts"] for r in rows)
    assert start <= arrivals[0] < start + 60
    gaps = np.diff(arrivals)
    mean, cv = gaps.mean(), gaps.std() / gaps.mean()
    # 600 gamma gaps of CV 3: the rate within ~4 standard errors (3 / sqrt(600) = 12 %), and far
    # burstier than Poisson's CV of 1.
    assert abs(1 / mean - 3) / 3 < 0.5
    assert cv > 2


def test_routing_least_loaded_spreads_over_the_replicas(tmp_path):
    out = tmp_path / "pool.jsonl"
    args = ["generate", "-o", out, "-n", "300", "--seed", "2", "--replicas", "3"]
    assert _invoke([*args, "--routing", "least-loaded"]).exit_code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    per = {s: sum(r["server"] == s for r in rows) for s in {r["server"] for r in rows}}
    assert len(per) == 3
    assert json.loads(pathlib.Path(f"{out}.truth.json").read_text())["routing"] == "least-loaded"
    rr = tmp_path / "rr.jsonl"
    assert (
        _invoke(["generate", "-o", rr, "-n", "300", "--seed", "2", "--replicas", "3"]).exit_code
        == 0
    )
    robin = [json.loads(line)["server"] for line in rr.read_text().splitlines()]
    # round robin: arrival order cycles the servers; least-loaded does not (a different trace)
    assert [r["server"] for r in rows] != robin


def test_ingest_reingest_max_line_mapping_and_manifest(tmp_path):
    w = ["-w", tmp_path / "wh"]
    bare = [{k: v for k, v in record(i).items() if k != "gpu"} for i in range(4)]
    logs = write_jsonl(tmp_path / "a.jsonl", bare)
    _invoke(["ingest", logs, *w, "-q", "--set", "gpu=H100-SXM"])
    r = _invoke(["ingest", logs, *w, "-q", "-f", "json", "--set", "gpu=A100-80GB"])
    assert json.loads(r.stdout)["ingested"] == 0  # already in: --set alone changes nothing
    r = _invoke(["ingest", logs, *w, "-q", "-f", "json", "--reingest", "--set", "gpu=A100-80GB"])
    assert r.exit_code == 0, r.output
    q = ["query", "--sql", "SELECT gpu, count(*) AS n FROM requests GROUP BY 1", *w, "-f", "json"]
    assert json.loads(_invoke(q).stdout) == [{"gpu": "A100-80GB", "n": 4}]
    big = record(9, prompt_text="x" * 1_200_000)  # one line over 1 MB
    long = write_jsonl(tmp_path / "long.jsonl", [record(7), big])
    r = _invoke(["ingest", long, *w, "-q", "-f", "json", "--max-line-mb", "1"])
    doc = json.loads(r.stdout)
    assert (doc["ingested"], doc["quarantined"]) == (1, 1), doc
    ex = REPO / "examples" / "mappings"
    r = _invoke(["ingest", ex / "gateway_log.csv", "--mapping", ex / "gateway_log.toml", *w,
                 "-q", "-f", "json", "--set", "gpu=H100-SXM"])  # fmt: skip
    assert r.exit_code == 0 and json.loads(r.stdout)["ingested"] > 0, r.output
    manifest = tmp_path / "m.run.toml"
    manifest.write_text('gpu = "H200"\nmodel = "meta-llama/Llama-3.1-8B-Instruct"\n')
    other = write_jsonl(tmp_path / "b.jsonl", [
        {k: v for k, v in record(i, run_id="run-b").items() if k != "gpu"} for i in range(3)
    ])  # fmt: skip
    r = _invoke(["ingest", other, *w, "-q", "--manifest", manifest])
    assert r.exit_code == 0, r.output
    q = ["query", "--sql", "SELECT DISTINCT gpu FROM requests WHERE run_id = 'run-b'", *w]
    assert json.loads(_invoke([*q, "-f", "json"]).stdout) == [{"gpu": "H200"}]


def test_query_list_and_queries_dir(tmp_path):
    r = _invoke(["query", "--list"], env={"COLUMNS": "400"})  # no wrapped names
    words = set(r.stdout.split())
    assert {p.stem for p in (REPO / "queries").glob("*.sql")} <= words
    mine = tmp_path / "q"
    mine.mkdir()
    (mine / "answer.sql").write_text("-- description: the answer\nSELECT 42 AS x\n")
    w = ["-w", tmp_path / "wh"]
    _invoke(["ingest", write_jsonl(tmp_path / "a.jsonl", [record(0)]), *w, "-q"])
    r = _invoke(["query", "answer", "--queries-dir", mine, *w, "-f", "json"])
    assert json.loads(r.stdout) == [{"x": 42}]
    assert "answer" in _invoke(["query", "--list", "--queries-dir", mine]).stdout


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    d = tmp_path_factory.mktemp("wh")
    trace, w = d / "plain.jsonl", d / "wh"
    assert (
        _invoke(["generate", "-o", trace, "-n", "600", "--seed", "4", "--rate", "3"]).exit_code == 0
    )
    assert _invoke(["ingest", trace, "-w", w, "-q"]).exit_code == 0
    assert _invoke(["fit", "-w", w, "-q", "--no-calibrate"]).exit_code == 0
    return w


def test_report_and_run_options_reach_the_page(fitted, tmp_path, trace):
    rep = ["report", "-w", fitted, "-q"]
    a = _invoke([*rep, "--out-dir", tmp_path / "a", "--slo-tpot", "1ms"])
    b = _invoke([*rep, "--out-dir", tmp_path / "b", "--slo-tpot", "10s", "--regression", "5"])
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    pa, pb = (pathlib.Path(x.stdout.strip()).read_text() for x in (a, b))
    # the objective and threshold each page states
    assert "TPOT ≤ 1 ms · regression threshold 10 %" in pa
    assert "TPOT ≤ 10000 ms · regression threshold 5 %" in pb
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "t.jsonl").write_text(trace.read_text())
    r = _invoke(["run", "--logs", logs, "-w", tmp_path / "wr", "--window", "all",
                 "--out-dir", tmp_path / "rep", "--set", "region=eu", "--regression", "5",
                 "--compare-with", "previous", "-q"])  # fmt: skip
    assert r.exit_code == 2 and "region" in r.output, r.output  # --set is checked as in ingest
    r = _invoke(["run", "--logs", logs, "-w", tmp_path / "wr", "--window", "all",
                 "--out-dir", tmp_path / "rep", "--set", "engine_version=9.9", "--regression", "5",
                 "--compare-with", "previous", "-q"])  # fmt: skip
    assert r.exit_code == 0, r.output
    page = pathlib.Path(r.stdout.strip()).read_text()
    assert "regression threshold 5 %" in page
    assert "No comparison period" in page  # --compare-with previous: the data has none before
    bad = _invoke(["run", "--logs", logs, "-w", tmp_path / "wr", "--regression", "lots"])
    assert bad.exit_code == 2


def test_schedule_forwards_every_run_option_and_reads_utc(tmp_path, monkeypatch):
    from pipeline.commands import schedule

    logs = write_jsonl(tmp_path / "a.jsonl", [record(0)])
    args = ["--cron", "@daily", "--logs", str(logs), "-w", "wh", "--out-dir", "rep",
            "--window", "1h", "--reader", "native", "--engine", "duckdb", "--since", "2026-01-01",
            "--until", "2026-01-02", "--compare-with", "previous", "--slo-ttft", "2s",
            "--slo-tpot", "50ms", "--regression", "7", "--set", "gpu=H100-SXM"]  # fmt: skip
    fwd = schedule._forward(schedule.command.make_context("schedule", list(args)))
    for opt, value in (("--window", "1h"), ("--reader", "native"), ("--slo-tpot", "50ms"),
                       ("--compare-with", "previous"), ("--regression", "7.0"),
                       ("--set", "gpu=H100-SXM"), ("--out-dir", "rep")):  # fmt: skip
        assert fwd[fwd.index(opt) + 1] == value, opt
    # `pipeline run` picks its periods from --window: schedule refuses --since / --until as
    # run does, rather than dropping them
    r = _invoke(["schedule", *args[:4], "--until", "2026-01-02", "--max-runs", "1"])
    assert r.exit_code == 2 and "--since/--until" in r.output, r.output
    seen = {}

    def fake_loop(cron, job, now, max_runs=None, say=print, **_):
        seen["now"] = now()
        return 0

    monkeypatch.setattr(schedule, "loop", fake_loop)
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # UTC+9, no daylight saving
    time.tzset()
    try:
        for utc in (True, False):
            _invoke(["schedule", "--cron", "@daily", "--logs", logs, "--max-runs", "1"]
                    + (["--utc"] if utc else []))  # fmt: skip
            ref = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(hours=0 if utc else 9)
            assert abs((seen["now"] - ref).total_seconds()) < 60, utc
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_replay_fits_and_slo_attainment(fitted, tmp_path):
    r = _invoke(
        ["query", "--sql", "SELECT DISTINCT run_id FROM requests", "-w", fitted, "-f", "json"]
    )
    rid = json.loads(r.stdout)[0]["run_id"]
    other = tmp_path / "other"
    _invoke(["ingest", write_jsonl(tmp_path / "a.jsonl", [record(0)]), "-w", other, "-q"])
    # the workload from `fitted`, the cost models from --fits: replaying with no fits at all
    # falls back to the roofline and says so
    base = ["replay", "--workload", rid, "-w", fitted, "--no-write", "-q", "-f", "json"]
    own = json.loads(_invoke(base).stdout)
    theirs = json.loads(_invoke([*base, "--fits", other]).stdout)
    assert own["cost"] != theirs["cost"]
    slo = ["--slo-ttft", "300ms", "--slo-tpot", "40ms"]
    lo = json.loads(_invoke([*base, *slo, "--slo-attainment", "0.1"]).stdout)
    hi = json.loads(_invoke([*base, *slo, "--slo-attainment", "0.99"]).stdout)
    assert lo["summary"]["slo_attainment"] == hi["summary"]["slo_attainment"]  # measured, same
    sweep = ["--sweep", "max_num_seqs=2,256"]
    lo = json.loads(_invoke([*base, *slo, *sweep, "--slo-attainment", "0.001"]).stdout)
    hi = json.loads(_invoke([*base, *slo, *sweep, "--slo-attainment", "0.99"]).stdout)
    # two sequences at a time queue 600 requests: a few meet the SLO, enough for a 0.1 % target
    # and not for 99 %; 256 meet it either way
    assert 0.001 <= lo["sweep"][0]["slo_attainment"] < 0.99
    assert [s["meets_slo"] for s in lo["sweep"]] == [True, True]
    assert [s["meets_slo"] for s in hi["sweep"]] == [False, True]


def test_attribute_no_fit_and_validate_run(fitted, tmp_path):
    w = tmp_path / "nofit"
    _invoke(["ingest", write_jsonl(tmp_path / "a.jsonl", [record(i) for i in range(30)]),
             "-w", w, "-q"])  # fmt: skip
    r = _invoke(["attribute", "-w", w, "--no-fit", "-f", "json"])
    assert not (w / "cost_models").exists() and not list(w.glob("**/cost_models*"))
    assert r.exit_code == 0, r.output  # without --no-fit the same call writes cost_models
    r = _invoke(["validate", "-w", fitted, "--run", "no-such-run", "-q"])
    assert r.exit_code == 2 and "no replayable run among no-such-run" in r.output


def test_model_config_is_read_by_every_command_that_takes_it(tmp_path):
    missing = tmp_path / "nope.json"
    for cmd in ("attribute", "fit", "replay", "report", "validate"):
        extra = ["--workload", "x"] if cmd == "replay" else []
        r = CliRunner().invoke(main, [cmd, *extra, "--model-config", str(missing)])
        assert r.exit_code == 2 and "no such file" in r.output, (cmd, r.output)


def test_profile_on_fit_and_validate(shared, tmp_path):
    runs = shared / "real_traces" / "serving_runs" / "llmservingsim_vllm019"
    prof = runs / "profile-RTX4090-Llama-3.1-8B"
    w = ["-w", tmp_path / "wh"]
    assert _invoke(["ingest", runs / "bench-RTX4090-Llama-3.1-8B", *w, "-q"]).exit_code == 0
    r = _invoke(["fit", *w, "--no-calibrate", "--profile", prof])
    assert r.exit_code == 0, r.output
    assert "decode step (1 seq, ctx 1024)" in r.output
    r = _invoke(["fit", *w, "--no-calibrate", "--profile", tmp_path])
    assert r.exit_code == 1 or r.exit_code == 2, r.output
    assert "not a layer profile" in r.output


def _mentions(texts: dict[str, str], command: str, spellings: list[str]) -> bool:
    return any(
        f'"{command}"' in t and any(f'"{s}"' in t for s in spellings) for t in texts.values()
    )


def test_every_option_of_every_command_is_exercised_by_a_test():
    texts = {p.name: p.read_text() for p in pathlib.Path(__file__).parent.glob("test_*.py")}
    untested = []
    for name, cmd in all_commands().items():
        for p in cmd.params:
            if not isinstance(p, click.Option) or p.hidden or "--help" in p.opts:
                continue
            if not _mentions(texts, name, p.opts + p.secondary_opts):
                untested.append(f"{name} {p.opts[0]}")
    assert not untested, f"options no CLI test runs: {untested}"

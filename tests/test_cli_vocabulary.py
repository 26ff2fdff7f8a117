"""One CLI vocabulary: every command's options mean the same thing (issue 13, point 5).

The first test walks every command's declared options, so a new command or option that
reuses a word with another meaning fails it; the others run the new spellings and the old ones
(which still work for one release and say what to write instead).
"""

from __future__ import annotations

import json

import click
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline.cli import all_commands, main
from pipeline.commands.options import OUTPUT_FORMATS
from tests.conftest import record, write_jsonl


def _options(cmd: click.Command) -> dict[str, click.Option]:
    return {o: p for p in cmd.params if isinstance(p, click.Option) for o in p.opts}


def test_every_command_uses_the_words_the_same_way():
    seen = set()
    for name, cmd in all_commands().items():
        opts = _options(cmd)
        if "--format" in opts:  # output, always: every command writes every output format
            p = opts["--format"]
            if not p.hidden:
                assert (p.metavar or "").split("|") == list(OUTPUT_FORMATS), (name, p.metavar)
                assert "-f" in p.opts, name
                assert "--out" in opts, f"{name}: --format parquet needs --out FILE"
                seen.add(name)
        for flag in ("--out", "-o"):
            if flag in opts and not opts[flag].hidden:  # a file, never a folder
                assert opts[flag].type.dir_okay is False, (name, flag)
        if "--out-dir" in opts:
            assert opts["--out-dir"].type.file_okay is False, name
        if "--param" in opts:
            assert "-p" in opts["--param"].opts, name
        if "--warehouse" in opts and name != "ingest":
            # every command that reads the warehouse takes --engine (or refuses spark itself)
            assert "--engine" in opts, name
        for old in ("--dir", "--json"):  # folders are --out-dir; --json is --format json
            assert old not in opts or opts[old].hidden, (name, old)
        assert not ("--reader" in opts and opts.get("--format") is None and name == "ingest")
    # the walk really looked at every command that prints a result
    assert seen >= {"attribute", "fit", "formats", "ingest", "query", "replay", "validate"}, seen


@pytest.fixture
def logs(tmp_path):
    return write_jsonl(tmp_path / "a.jsonl", [record(i) for i in range(5)])


def _invoke(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_ingest_format_is_output_and_reader_is_input(tmp_path, logs):
    w = ["-w", str(tmp_path / "wh")]
    r = _invoke(["ingest", str(logs), *w, "--reader", "native", "--format", "json", "-q"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["ingested"], doc["files"]) == (5, 1)
    assert doc["per_file"][0]["format"] == "native"
    assert "deprecated" not in r.stderr
    out = tmp_path / "files.parquet"
    r = _invoke(["ingest", str(logs), *w, "--format", "parquet", "-o", str(out), "-q"])
    assert r.exit_code == 0, r.output
    assert pq.read_table(out).column("status").to_pylist() == ["already"]


def test_old_spellings_still_work_and_say_what_replaces_them(tmp_path, logs):
    w = ["-w", str(tmp_path / "wh")]
    r = _invoke(["ingest", str(logs), *w, "--format", "native", "--json", "-q"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ingested"] == 5
    assert "--format native (a reader) is deprecated" in r.stderr
    assert "use --reader native" in r.stderr
    assert "--json is deprecated" in r.stderr and "use --format json" in r.stderr
    r = _invoke(["report", *w, "--out", str(tmp_path / "rep"), "-q"])
    assert r.exit_code == 0, r.output
    assert "use --out-dir" in r.stderr
    assert list((tmp_path / "rep").glob("report-*.html"))
    r = _invoke(["formats", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["format"]
    r = _invoke(["schemas", "--check", "--dir", "schemas"])
    assert r.exit_code == 0, r.output
    assert "--dir schemas is deprecated" in r.stderr and "use --out-dir schemas" in r.stderr


def test_duckdb_only_commands_refuse_spark_with_a_reason(tmp_path, logs):
    for cmd in ("attribute", "validate", "replay"):
        extra = ["run-x"] if cmd == "replay" else []
        r = CliRunner().invoke(main, [cmd, *extra, "-w", str(tmp_path), "--engine", "spark"])
        assert r.exit_code == 2, (cmd, r.output)
        assert "runs on DuckDB only" in r.output, cmd


def test_output_format_outside_a_commands_choices_is_a_usage_error():
    r = CliRunner().invoke(main, ["formats", "--format", "xml"])
    assert r.exit_code == 2
    assert "choose one of table|csv|json|parquet" in r.output
    r = CliRunner().invoke(main, ["query", "--sql", "SELECT 1", "-f", "parquet"])
    assert r.exit_code == 2 and "needs --out FILE" in r.output


def test_param_is_parsed_once_the_same_way(tmp_path, logs):
    w = ["-w", str(tmp_path / "wh")]
    _invoke(["ingest", str(logs), *w, "-q"])
    r = _invoke(["query", "--sql", "SELECT $n + 1 AS x", *w, "-p", "n=41", "-f", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [{"x": 42}]
    for cmd in (["query", "--sql", "SELECT 1"], ["attribute"]):
        r = CliRunner().invoke(main, [*cmd, *w, "-p", "novalue"])
        assert r.exit_code == 2 and "expected KEY=VALUE" in r.output, cmd


def test_every_result_command_writes_csv_json_and_parquet(tmp_path, logs):
    """fit, replay and formats joined query / attribute / validate / ingest: the same table in
    each output format, to stdout or --out."""
    w = ["-w", str(tmp_path / "wh")]
    _invoke(["ingest", str(logs), *w, "-q"])
    r = _invoke(["fit", *w, "-q", "--no-calibrate", "--format", "json"])
    fits = json.loads(r.stdout) if r.exit_code == 0 else None
    # five requests are too few for a step fit: exit 3, and nothing printed as a result
    assert (r.exit_code, fits) == (3, None), r.output
    big = tmp_path / "gen.jsonl"
    assert _invoke(["generate", "-o", str(big), "-n", "400", "--seed", "5"]).exit_code == 0
    w = ["-w", str(tmp_path / "wh2")]
    _invoke(["ingest", str(big), *w, "-q"])
    out = tmp_path / "fits.parquet"
    r = _invoke(["fit", *w, "-q", "--no-calibrate", "-f", "parquet", "-o", str(out)])
    assert r.exit_code == 0, r.output
    t = pq.read_table(out)
    assert sorted(t.column("phase").to_pylist()) == ["decode", "prefill"]
    r = _invoke(["fit", *w, "-q", "--no-calibrate", "-f", "json"])
    assert [d["phase"] for d in json.loads(r.stdout)] == t.column("phase").to_pylist()
    r = _invoke(["query", "--sql", "SELECT DISTINCT run_id FROM requests", *w, "-f", "json"])
    rid = json.loads(r.stdout)[0]["run_id"]
    cmp = tmp_path / "cmp.csv"
    r = _invoke(["replay", "--workload", rid, *w, "--compare", "--no-write", "-q",
                 "-f", "csv", "-o", str(cmp)])  # fmt: skip
    assert r.exit_code == 0, r.output
    head = cmp.read_text().splitlines()
    assert head[0] == '"metric","percentile","observed_s","replayed_s","error"'
    assert len(head) > 2
    r = _invoke(["replay", "--workload", rid, *w, "--no-write", "-q", "-f", "json"])
    doc = json.loads(r.stdout)
    assert doc["summary"]["requests"] == 400 and "compare" not in doc
    out = tmp_path / "formats.parquet"
    r = _invoke(["formats", "-f", "parquet", "-o", str(out)])
    assert r.exit_code == 0, r.output
    names = pq.read_table(out).column("format").to_pylist()
    assert "native" in names and len(names) == len(set(names))


def test_run_and_schedule_take_engine_and_schedule_forwards_it(tmp_path, logs):
    from pipeline.commands import schedule

    r = _invoke(["run", "--logs", str(logs), "-w", str(tmp_path / "wh"), "--window", "all",
                 "--out-dir", str(tmp_path / "rep"), "--engine", "duckdb", "-q"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert list((tmp_path / "rep").glob("report-*.html"))
    ctx = schedule.command.make_context(
        "schedule", ["--cron", "@daily", "--logs", str(logs), "--engine", "spark"]
    )
    args = schedule._forward(ctx)
    assert args[args.index("--engine") + 1] == "spark"

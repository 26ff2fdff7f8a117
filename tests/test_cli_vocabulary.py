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
        if "--format" in opts:  # output, always: its choices are output formats
            p = opts["--format"]
            if not p.hidden:
                shown = set((p.metavar or "").split("|"))
                assert shown <= set(OUTPUT_FORMATS), (name, shown)
                assert "-f" in p.opts, name
                seen.add("--format")
        for flag in ("--out", "-o"):
            if flag in opts and not opts[flag].hidden:  # a file, never a folder
                assert opts[flag].type.dir_okay is False, (name, flag)
        if "--out-dir" in opts:
            assert opts["--out-dir"].type.file_okay is False, name
        if "--param" in opts:
            assert "-p" in opts["--param"].opts, name
        if "--warehouse" in opts and name not in ("ingest", "run", "schedule"):
            # every command that reads the warehouse takes --engine (or refuses spark itself)
            assert "--engine" in opts, name
        if "--json" in opts:
            assert opts["--json"].hidden, f"{name}: --json is the deprecated spelling"
        assert not ("--reader" in opts and opts.get("--format") is None and name == "ingest")
    assert seen  # the walk really looked at something


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


def test_duckdb_only_commands_refuse_spark_with_a_reason(tmp_path, logs):
    for cmd in ("attribute", "validate", "replay"):
        extra = ["run-x"] if cmd == "replay" else []
        r = CliRunner().invoke(main, [cmd, *extra, "-w", str(tmp_path), "--engine", "spark"])
        assert r.exit_code == 2, (cmd, r.output)
        assert "runs on DuckDB only" in r.output, cmd


def test_output_format_outside_a_commands_choices_is_a_usage_error():
    r = CliRunner().invoke(main, ["formats", "--format", "parquet", "-o", "x.parquet"])
    assert r.exit_code == 2
    assert "choose one of table|json|csv" in r.output
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

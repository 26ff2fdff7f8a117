"""The real entry point: exit codes, messages, output formats."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

from tests.conftest import record, write_jsonl


def run(args, env, **kw):
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


def test_ingest_then_query_csv_and_json(tmp_path, cli_env):
    logs = write_jsonl(tmp_path / "a.jsonl", [record(i) for i in range(5)] + ["{bad"])
    r = run(["ingest", str(logs), "--format", "json", "--quiet"], cli_env)
    assert r.returncode == 0, r.stderr
    counts = json.loads(r.stdout)
    assert (counts["read"], counts["ingested"], counts["quarantined"]) == (6, 5, 1)
    r = run(
        [
            "query",
            "--sql",
            "SELECT request_id, output_tokens FROM requests ORDER BY 1",
            "--format",
            "csv",
        ],
        cli_env,
    )
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [x["request_id"] for x in rows] == [f"req-{i:06d}" for i in range(5)]
    r = run(["query", "quarantine_reasons", "--format", "json"], cli_env)
    (q,) = json.loads(r.stdout)
    assert q["records"] == 1 and q["first_line"] == 6


def test_strict_exits_1_when_something_was_quarantined(tmp_path, cli_env):
    logs = write_jsonl(tmp_path / "a.jsonl", [record(0), "{bad"])
    r = run(["ingest", str(logs), "--strict", "--quiet"], cli_env)
    assert r.returncode == 1
    clean = write_jsonl(tmp_path / "b" / "b.jsonl", [record(9)])
    assert run(["ingest", str(clean), "--strict", "--quiet"], cli_env).returncode == 0


def test_usage_errors_exit_2_with_a_message_not_a_traceback(tmp_path, cli_env):
    logs = write_jsonl(tmp_path / "a.jsonl", [record(0)])
    other = write_jsonl(tmp_path / "b.jsonl", [record(1)])
    assert run(["ingest", str(other), "--quiet"], cli_env).returncode == 0  # a warehouse exists
    for args, text in [
        (["ingest", str(logs), "--set", "gpux=1"], "not a metadata column"),
        (["ingest", str(logs), "--set", "gpu_count=two"], "gpu_count must be a positive integer"),
        (["ingest", str(logs), "--set", "gpu=H100"], "ambiguous: H100-PCIe or H100-SXM?"),
        (["ingest", str(logs), "--set", "gpu=RTX-9090"], "Close matches: RTX-4090"),
        (["ingest", str(logs), "--set", "model=acme/x"], "unknown model 'acme/x'"),
        (["ingest", str(logs), "--reader", "nope"], "unknown format"),
        (["ingest", str(logs), "--format", "nope"], "unknown format"),  # deprecated spelling
        (["query", "no_such_query"], "no query named"),
        (["query", "--sql", "DELETE FROM requests"], "only read-only queries"),
        (["query", "--sql", "SELECT nope FROM requests"], "query failed"),
        (["query", "--sql", "SELECT 1", "--format", "parquet"], "needs --out"),
    ]:
        r = run(args, cli_env)
        assert r.returncode == 2, (args, r.stderr)
        assert text in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr


def _examples(help_text: str, name: str) -> list[list[str]]:
    """The invocations under an 'Example(s):' heading, continuation lines joined, as words."""
    lines = help_text.splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() in ("Example:", "Examples:"):
            i += 1
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                line = lines[i].split("#", 1)[0].rstrip()
                while line.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line[:-1] + " " + lines[i].strip()
                if line.strip().startswith(f"pipeline {name}"):
                    out.append(line.split())
                i += 1
        i += 1
    return out


def test_every_command_has_help_with_an_example(cli_env):
    """Each --help shows at least one example invocation, and every option an example uses
    is one the command accepts (the usage line alone does not count)."""
    from pipeline.cli import all_commands

    commands = all_commands()
    assert len(commands) == 12, sorted(commands)  # loaded lazily by `main`: all of them here
    for name, cmd in commands.items():
        r = run([name, "--help"], cli_env)
        assert r.returncode == 0, name
        examples = _examples(r.stdout, name)
        assert examples, f"{name}: no example under an Example(s): heading"
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        for words in examples:
            used = {w.split("=", 1)[0] for w in words if w.startswith("-")}
            assert used <= known, (name, used - known)


def test_parquet_output(tmp_path, cli_env):
    import pyarrow.parquet as pq

    write_jsonl(tmp_path / "a.jsonl", [record(i) for i in range(3)])
    run(["ingest", str(tmp_path / "a.jsonl"), "-q"], cli_env)
    out = tmp_path / "o.parquet"
    r = run(["query", "latency_percentiles", "-f", "parquet", "-o", str(out)], cli_env)
    assert r.returncode == 0, r.stderr
    assert pq.read_table(out).column("requests").to_pylist() == [3]


def test_formats_lists_every_reader_with_capabilities(cli_env):
    r = run(["formats", "--format", "json"], cli_env)
    rows = {x["format"]: x for x in json.loads(r.stdout)}
    assert {
        "native",
        "vllm_bench",
        "sglang_bench",
        "tgi_router_log",
        "aiperf",
        "llmperf",
        "guidellm",
        "azure_llm_trace",
        "mooncake",
        "burstgpt",
        "mapping",
    } <= set(rows)
    assert rows["native"]["per_token"] and rows["native"]["gpu_model_in_log"]
    assert rows["mooncake"]["arrivals_only"] and not rows["mooncake"]["per_request"]
    assert "gpu" in rows["vllm_bench"]["needs_set"]


def test_missing_warehouse_is_a_data_error_for_every_reader_of_it(tmp_path, cli_env):
    env = {**cli_env, "PIPELINE_WAREHOUSE": str(tmp_path / "none")}
    for args in (
        ["fit"],
        ["report", "--out-dir", str(tmp_path / "r")],
        ["attribute"],
        ["validate"],
        ["query", "latency_percentiles"],
        ["query", "--sql", "SELECT 1"],
    ):
        r = run(args, env)
        assert r.returncode == 3, (args, r.stderr)
        assert "no warehouse at" in r.stderr and "pipeline ingest" in r.stderr


def test_adhoc_sql_reads_the_warehouse_and_nothing_else(tmp_path, cli_env):
    logs = write_jsonl(tmp_path / "a.jsonl", [record(i) for i in range(3)])
    assert run(["ingest", str(logs), "--quiet"], cli_env).returncode == 0
    secret = tmp_path / "secret.csv"
    secret.write_text("password\nhunter2\n", "utf-8")
    attempts = [
        f"SELECT * FROM read_csv('{secret}')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_csv('https://example.com/x.csv')",
        f"SELECT * FROM '{secret}'",
        "SELECT * FROM read_parquet('/tmp/*.parquet')",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        f"ATTACH '{tmp_path / 'x.db'}'",
        f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'",
    ]
    for sql in attempts:
        r = run(["query", "--sql", sql, "--format", "csv"], cli_env)
        assert r.returncode == 2, (sql, r.returncode, r.stdout, r.stderr)
        assert "hunter2" not in r.stdout and "Traceback" not in r.stderr, sql
    assert not (tmp_path / "out.csv").exists()
    # The warehouse itself stays readable, and --param fills $placeholders in ad-hoc SQL too.
    r = run(
        ["query", "--sql", "SELECT count(*) AS n FROM requests WHERE output_tokens >= $m",
         "--param", "m=1", "--format", "csv"], cli_env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert list(csv.reader(io.StringIO(r.stdout))) == [["n"], ["3"]]
    r = run(["query", "--sql", "SELECT 1 AS x", "--param", "m=1"], cli_env)
    assert r.returncode == 2 and "not used by the SQL" in r.stderr

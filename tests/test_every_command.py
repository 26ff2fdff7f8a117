"""One contract for failures (issue 12, point 6): every command, on the real files in ../shared, on
an empty warehouse and on a summary-only one, ends with a documented exit code and a message,
never a traceback.

Exit codes (README): 0 success, 1 a check asked for failed, 2 usage error, 3 data error
(nothing to work on). Commands run in process (click's runner) so that an unexpected exception
shows up as such instead of as a process's exit status 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.ingest.run import ingest_paths
from pipeline.query.named import all_queries
from pipeline.warehouse.layout import Layout
from tests.conftest import REPO

DOCUMENTED = {0, 1, 2, 3}


def _commands(wh: Path, out: Path, logs: Path) -> list[list[str]]:
    w = ["-w", str(wh)]
    named = [["query", q.name, *w, "--format", "csv"] for q in all_queries(REPO / "queries")]
    return [
        *named,
        ["query", "--sql", "SELECT count(*) FROM requests", *w, "--format", "csv"],
        ["fit", *w, "--no-calibrate"],
        ["validate", *w],
        ["attribute", *w, "--format", "json"],
        ["report", *w, "--out-dir", str(out)],
        ["report", *w, "--out-dir", str(out), "--since", "2001-01-01", "--until", "2001-01-02"],
        ["replay", "--workload", "no-such-run", *w, "--no-write"],
        ["run", "--logs", str(logs), *w, "--out-dir", str(out)],
        ["schemas", "--check", "--out-dir", str(REPO / "schemas")],
        ["formats"],
    ]


def _key(args: list[str]) -> str:
    """'query NAME', 'report --since', or the command's name."""
    if args[0] == "query":
        return "query --sql" if args[1] == "--sql" else f"query {args[1]}"
    return f"{args[0]} --since" if "--since" in args else args[0]


def _check(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(main, args, catch_exceptions=True)
    exc = res.exception
    if exc is not None and not isinstance(exc, SystemExit):
        raise AssertionError(f"{args}: ended in {type(exc).__name__}: {exc}\n{res.output}")
    assert res.exit_code in DOCUMENTED, (args, res.exit_code, res.output)
    assert "Traceback" not in res.output, (args, res.output)
    return res.exit_code, res.output


def test_every_command_on_an_empty_and_a_summary_only_warehouse(shared, tmp_path):
    empty = Layout(tmp_path / "empty")
    empty.ensure()  # a warehouse with nothing in it
    summaries = Layout(tmp_path / "summaries")
    vb = shared / "real_traces" / "vllm_bench_serve"
    ingest_paths(sorted(vb.glob("*.json")), summaries)  # tool summaries, no per-request rows
    codes = {}
    for name, layout in (("empty", empty), ("summaries", summaries)):
        logs = tmp_path / f"logs-{name}"
        logs.mkdir()
        for args in _commands(layout.root, tmp_path / f"out-{name}", logs):
            codes[(name, _key(args))] = _check(args)[0]
    # Nothing to work on is a data error (3), not success and not a crash.
    for name in ("empty", "summaries"):
        assert codes[(name, "fit")] == 3
        assert codes[(name, "report --since")] == 3
        assert codes[(name, "validate")] == 3
        assert codes[(name, "query latency_percentiles")] == 0  # an empty table is an answer
    assert codes[("empty", "replay")] in (2, 3)
    # Tool summaries alone still make a page: the tools' own figures, per-request views absent.
    assert codes[("empty", "report")] == 3 and codes[("summaries", "report")] == 0
    (page,) = (tmp_path / "out-summaries").glob("report-*.html")
    text = page.read_text()
    assert "mean_ttft_ms" in text and "13,479.2" in text  # vLLM bench's own mean TTFT at qps inf
    assert "No successful requests to draw distributions of." in text


def test_every_command_on_the_real_files(shared, tmp_path):
    real = Layout(tmp_path / "real")
    root = shared / "real_traces"
    # Everything but the calibration set (its replay calibration has tests of its own).
    ingest_paths([p for p in sorted(root.iterdir()) if p.name != "serving_runs"], real)
    logs = tmp_path / "logs"
    logs.mkdir()
    codes = {}
    for args in _commands(real.root, tmp_path / "out", logs):
        codes[_key(args)] = _check(args)[0]
    assert codes["report"] == 0
    assert codes["report --since"] == 3  # 2001 is before every request: an error, not a page
    assert codes["formats"] == 0 and codes["schemas"] == 0
    assert codes["query latency_percentiles"] == 0


@pytest.mark.parametrize(
    "args",
    [
        ["query", "nope"],
        ["query", "--sql", "DROP TABLE requests"],
        ["report", "--slo-ttft", "fast"],
        ["replay", "--slo-ttft", "-1s", "--workload", "x"],
        ["ingest", "/no/such/file"],
        ["fit", "--max-requests", "1"],
    ],
)
def test_usage_errors_are_2_before_any_data_error(args, tmp_path):
    code, output = _check([*args, "-w", str(tmp_path / "none")])
    assert code == 2, output

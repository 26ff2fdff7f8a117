"""Logs without arrival times (issue 12, point 3): no number from a clock that does not exist.

llmperf's per-request files (also SGLang's and old vLLM's detailed results) give each request's
TTFT and E2E but not when it arrived. They are stored with clock 'request'; every rate, window,
batch and concurrency derived from a common time axis is NULL, the fit and attribution leave
them out and say so, and the tool's own summary (beside the file) supplies the rate it measured.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.fit.run import NO_CLOCK, fit_all
from pipeline.ingest.run import IngestOptions, ingest_paths
from pipeline.query.named import load_query, run_named
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.conftest import REPO


@pytest.fixture
def llmperf(shared, tmp_path):
    layout = Layout(tmp_path / "wh")
    sets = {"model": "llama-3.1-70b", "gpu": "H100-SXM", "gpu_count": 4}
    ingest_paths([shared / "real_traces" / "llmperf"], layout, IngestOptions(sets=sets))
    return layout


def test_no_rate_window_or_batch_from_zeros(llmperf):
    con = connect(llmperf)
    clocks = con.execute(
        "SELECT clock, count(*), count(t_arrival), count(arrival_s) FROM requests GROUP BY 1"
    ).fetchall()
    assert clocks == [("request", 300, 0, 0)]
    # TTFT and E2E are real: llmperf's own per-request values.
    ((ttft_mean,),) = con.execute("SELECT avg(ttft_s) FROM requests WHERE status = 'ok'").fetchall()
    assert ttft_mean > 0
    q = lambda name, **p: run_named(con, load_query(name, REPO / "queries"), p).to_pylist()  # noqa: E731
    (head,) = q("report_headline")
    assert (head["duration_s"], head["requests_per_s"], head["output_tokens_per_s"]) == (
        None,
        None,
        None,
    )
    assert head["runs_without_clock"] == 2
    # llmperf's own rates (1.41 and 0.42 req/s, summary_*.json) joined to the per-request runs,
    # combined like ours: 300 requests over the run time the two rates imply.
    anyscale, bedrock = 1.4122212869398756, 0.41980645855095916
    assert head["tool_requests_per_s"] == pytest.approx(300 / (150 / anyscale + 150 / bedrock))
    assert q("throughput_by_window") == []
    assert q("report_decode_batch") == []
    runs = con.execute(
        "SELECT count(DISTINCT run_id), count(*) FROM runs WHERE source_format = 'llmperf'"
    ).fetchall()
    assert runs == [(2, 4)]  # summary and per-request file: one run each pair, not two


def test_fit_and_attribute_leave_them_out_and_say_so(llmperf, cli_env):
    fits, skipped = fit_all(connect(llmperf))
    assert fits == [] and [why for _, why in skipped] == [NO_CLOCK]
    env = {**cli_env, "PIPELINE_WAREHOUSE": str(llmperf.root)}
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "attribute",
         "--baseline", "run_id LIKE 'individual_anyscale%'",
         "--candidate", "run_id LIKE 'individual_bedrock%'"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert "has no arrival times" in r.stderr and "Traceback" not in r.stderr

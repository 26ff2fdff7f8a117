"""Issue 12, point 8: durations take units everywhere (500ms, 2s, 1.5min), bare numbers are
seconds, in options and in named-query parameters alike."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.query.named import QueryError, bind, load_query, queries_dir


def test_duration_parameters_of_named_queries_take_units():
    q = load_query("throughput_by_window", queries_dir())
    assert bind(q, {"window_s": "500ms"}) == {"window_s": 0.5}
    assert bind(q, {"window_s": "1.5min"}) == {"window_s": 90.0}
    assert bind(q, {"window_s": "30"}) == {"window_s": 30.0}  # a bare number is seconds
    assert bind(q, {}) == {"window_s": 60.0}  # the query's default, in seconds
    with pytest.raises(QueryError, match="give a duration"):
        bind(q, {"window_s": "soon"})


@pytest.mark.parametrize(("text", "seconds"), [("3ms", 0.003), ("0.002", 0.002), ("0", 0.0)])
def test_generate_step_overhead_takes_units(tmp_path, text, seconds):
    out = tmp_path / "t.jsonl"
    args = ["generate", "-o", str(out), "-n", "5", "--step-overhead", text]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    truth = json.loads((tmp_path / "t.jsonl.truth.json").read_text())
    assert truth["cost"]["step_overhead"] == pytest.approx(seconds)


def test_a_negative_duration_is_a_usage_error(tmp_path):
    args = ["generate", "-o", str(tmp_path / "t.jsonl"), "-n", "5", "--step-overhead", "-1ms"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "give a duration" in r.output


def test_whatif_durations_take_units():
    from pydantic import ValidationError

    from pipeline.replay.config import WhatIf

    w = WhatIf.model_validate(
        {"slo": {"ttft_s": "500ms", "tpot_s": 0.05}, "disaggregation": {"kv_latency_s": "2ms"}}
    )
    assert (w.slo.ttft_s, w.slo.tpot_s, w.disaggregation.kv_latency_s) == (0.5, 0.05, 0.002)
    with pytest.raises(ValidationError, match="give a duration"):
        WhatIf.model_validate({"slo": {"ttft_s": "soon"}})

"""Each named query on small input rows with expected output rows, and on an empty warehouse."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.ingest.run import ingest_paths
from pipeline.query.named import QueryError, all_queries, load_query, run_named
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.conftest import REPO, record, write_jsonl

T0 = 1_762_041_600.0
# Unix-epoch seconds in float64 resolve 2.4e-7 s near 1.76e9, so differences are exact to ~5e-7.
EPS = 1e-6


def timed(i, ttft, tpot, out, prompt=1000, model="m", gpu="g", arrival=None, status="ok"):
    a = T0 + (i if arrival is None else arrival)
    times = [round(ttft + k * tpot, 6) for k in range(out)]
    return record(
        i,
        model=model,
        gpu=gpu,
        prompt_tokens=prompt,
        cached_tokens=0,
        output_tokens=out,
        arrival_ts=a,
        scheduled_ts=a,
        first_token_ts=a + times[0],
        finish_ts=a + times[-1],
        token_times=times,
        token_counts=None,
        status=status,
    )


def _con(tmp_path: Path, recs: list[dict]):
    layout = Layout(tmp_path / "wh")
    if recs:
        ingest_paths([write_jsonl(tmp_path / "in.jsonl", recs)], layout)
    return connect(layout)


def _rows(con, name: str, **params) -> list[dict]:
    return run_named(
        con, load_query(name, REPO / "queries"), {k: str(v) for k, v in params.items()}
    ).to_pylist()


def test_every_named_query_runs_on_an_empty_warehouse(tmp_path):
    from pipeline.attribution import write_empty_if_absent
    from pipeline.fit import fit_warehouse

    # Derived tables exist (empty) once their command ran: `pipeline fit`, `pipeline attribute`.
    fit_warehouse(Layout(tmp_path / "wh"))
    write_empty_if_absent(Layout(tmp_path / "wh"))
    con = _con(tmp_path, [])
    for q in all_queries(REPO / "queries"):
        rows = run_named(con, q).to_pylist()
        # Grouped queries return no rows; a global aggregate returns one row of zeros / nulls.
        assert len(rows) <= 1, q.name
        for row in rows:
            assert all(v in (0, None) for v in row.values()), (q.name, row)


def test_every_named_query_has_a_description():
    assert all(q.description for q in all_queries(REPO / "queries"))


def test_latency_percentiles(tmp_path):
    recs = [
        timed(0, 0.1, 0.01, 3),
        timed(1, 0.2, 0.02, 3),
        timed(2, 0.4, 0.04, 3),
        timed(3, 9.9, 0.5, 3, status="error"),  # errors are not in latency percentiles
        timed(4, 0.3, 0.05, 2, model="other"),
    ]
    rows = _rows(_con(tmp_path, recs), "latency_percentiles")
    assert [(r["model"], r["gpu"], r["requests"], r["output_tokens"]) for r in rows] == [
        ("m", "g", 3, 9),
        ("other", "g", 1, 2),
    ]
    m = rows[0]
    # Linear interpolation over (0.1, 0.2, 0.4): p90 at position 1.8, p99 at 1.98.
    assert m["ttft_p50"] == pytest.approx(0.2, abs=EPS)
    assert m["ttft_p90"] == pytest.approx(0.36, abs=EPS)
    assert m["ttft_p99"] == pytest.approx(0.396, abs=EPS)
    assert m["tpot_p50"] == pytest.approx(0.02, abs=EPS)
    # ITL pools the six gaps (0.01, 0.01, 0.02, 0.02, 0.04, 0.04): p50 = 0.02, p90 = 0.04.
    assert m["itl_p50"] == pytest.approx(0.02, abs=EPS)
    assert m["itl_p90"] == pytest.approx(0.04, abs=EPS)
    # E2E = ttft + 2 tpot: 0.12, 0.24, 0.48.
    assert m["e2e_p50"] == pytest.approx(0.24, abs=EPS)
    assert rows[1]["ttft_p99"] == pytest.approx(0.3, abs=EPS)


def test_latency_by_run(tmp_path):
    recs = [
        {**timed(0, 0.1, 0.01, 3), "run_id": "a"},
        {**timed(1, 0.2, 0.02, 3), "run_id": "a"},
        {**timed(2, 0.6, 0.04, 3), "run_id": "a"},
        {**timed(3, 0.3, 0.05, 1), "run_id": "b"},  # one token: no TPOT
        {**timed(4, 0.5, 0.03, 2), "run_id": "b"},
        {**timed(5, 9.0, 0.5, 3, status="error"), "run_id": "b"},  # errors are left out
    ]
    rows = _rows(_con(tmp_path, recs), "latency_by_run")
    assert [(r["run_id"], r["requests"], r["output_tokens"]) for r in rows] == [
        ("a", 3, 9),
        ("b", 2, 3),
    ]
    a, b = rows
    assert a["ttft_mean"] == pytest.approx(0.3, abs=EPS)
    assert a["ttft_p50"] == pytest.approx(0.2, abs=EPS)
    assert a["ttft_p90"] == pytest.approx(0.52, abs=EPS)  # 0.2 + 0.8 * (0.6 - 0.2)
    assert a["tpot_mean"] == pytest.approx(0.07 / 3, abs=EPS)
    assert a["e2e_mean"] == pytest.approx((0.12 + 0.24 + 0.68) / 3, abs=EPS)
    assert b["tpot_mean"] == pytest.approx(0.03, abs=EPS)  # only the 2-token request has one
    assert b["ttft_mean"] == pytest.approx(0.4, abs=EPS)
    assert b["e2e_p90"] == pytest.approx(0.3 + 0.9 * (0.53 - 0.3), abs=EPS)


def test_ttft_by_prompt_length(tmp_path):
    recs = [
        timed(0, 0.1, 0.01, 2, prompt=100),
        timed(1, 0.3, 0.01, 2, prompt=600),
        timed(2, 0.5, 0.01, 2, prompt=1000),
        timed(3, 2.0, 0.01, 2, prompt=20000),
    ]
    rows = _rows(_con(tmp_path, recs), "ttft_by_prompt_length")
    got = [(r["bucket_lo"], r["bucket_hi"], r["requests"], r["mean_prompt_tokens"]) for r in rows]
    assert got == [(0, 128, 1, 100.0), (512, 1024, 2, 800.0), (16384, None, 1, 20000.0)]
    assert rows[1]["ttft_mean"] == pytest.approx(0.4, abs=EPS)
    assert rows[1]["ttft_p90"] == pytest.approx(0.48, abs=EPS)


def test_throughput_by_window(tmp_path):
    # Finish times since the first arrival: 0.3, 5.3, 12.3, 14.3 s (ttft 0.1 + 2 x 0.1).
    recs = [timed(i, 0.1, 0.1, 3, arrival=a) for i, a in enumerate([0.0, 5.0, 12.0, 14.0])]
    rows = _rows(_con(tmp_path, recs), "throughput_by_window", window_s=10)
    got = [
        (r["window_index"], r["window_start_s"], r["requests_finished"], r["output_tokens"])
        for r in rows
    ]
    assert got == [(0, 0.0, 2, 6), (1, 10.0, 2, 6)]
    assert rows[0]["output_tokens_per_s"] == pytest.approx(0.6)
    assert rows[0]["requests_per_s"] == pytest.approx(0.2)


def test_quarantine_reasons(tmp_path):
    recs = [timed(0, 0.1, 0.1, 2), "{bad", "{bad", record(5, output_tokens=-1)]
    rows = _rows(_con(tmp_path, recs), "quarantine_reasons")
    assert [(r["records"], r["first_line"]) for r in rows] == [(2, 2), (1, 4)]
    assert rows[1]["reason"] == "negative token count: output_tokens = -1"


def test_parameters_are_bound_and_checked(tmp_path):
    con = _con(tmp_path, [timed(0, 0.1, 0.1, 2)])
    q = load_query("throughput_by_window", REPO / "queries")
    with pytest.raises(QueryError, match="no parameter nope"):
        run_named(con, q, {"nope": "1"})
    # A value that would be an injection if pasted into the SQL is just a bad duration here.
    with pytest.raises(QueryError, match="give a duration"):
        run_named(con, q, {"window_s": "1); DROP VIEW requests; --"})
    assert con.execute("SELECT count(*) FROM requests").fetchone() == (1,)


def test_unknown_query_suggests_close_names():
    with pytest.raises(QueryError, match="did you mean latency_percentiles"):
        load_query("latency_percentile", REPO / "queries")


def test_a_derived_table_not_yet_written_names_the_command(tmp_path):
    con = _con(tmp_path, [])
    with pytest.raises(QueryError, match="run `pipeline fit` first"):
        run_named(con, load_query("cost_mfu_mbu", REPO / "queries"))

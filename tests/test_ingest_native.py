"""Our own format: records round-trip; each kind of bad input is quarantined with a reason."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import zstandard

from pipeline.ingest.run import IngestOptions, ingest_paths, totals
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.conftest import record, write_jsonl


def _ingest(tmp_path: Path, *paths: Path, **opts) -> tuple[dict, object]:
    layout = Layout(tmp_path / "wh")
    results = ingest_paths(list(paths), layout, IngestOptions(**opts))
    return totals(results), connect(layout)


def _reasons(con) -> dict[int, str]:
    return dict(con.execute("SELECT line, reason FROM quarantine ORDER BY line").fetchall())


def test_valid_record_round_trips_with_metrics(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [record(0), record(1)])
    t, con = _ingest(tmp_path, path)
    assert (t["read"], t["ingested"], t["quarantined"], t["tokens"]) == (2, 2, 0, 8)
    row = con.execute(
        "SELECT prompt_tokens, cached_tokens, output_tokens, t_arrival, queue_s, prefill_s, "
        "ttft_s, decode_s, tpot_s, e2e_s, arrival_s, day, gpu, max_num_seqs, chunked_prefill "
        "FROM requests WHERE request_id = 'req-000001'"
    ).fetchone()
    a, s, f, e = 1762041601.125, 1762041601.131, 1762041601.189, 1762041601.228
    assert row[:4] == (1024, 256, 4, a)
    assert row[4] == pytest.approx(s - a, abs=1e-12)
    assert row[5] == pytest.approx(f - s, abs=1e-12)
    assert row[6] == pytest.approx(f - a, abs=1e-12)
    assert row[7] == pytest.approx(e - f, abs=1e-12)
    assert row[8] == pytest.approx((e - f) / 3, abs=1e-12)
    assert row[9] == pytest.approx(e - a, abs=1e-12)
    assert row[10] == 1.0  # one second after the run's first arrival
    assert row[11:] == ("2025-11-02", "H100-SXM", 256, True)
    toks = con.execute(
        "SELECT token_index, t_s, n_tokens, gap_s FROM tokens "
        "WHERE request_id = 'req-000000' ORDER BY token_index"
    ).fetchall()
    assert [t[1] for t in toks] == [0.064, 0.077, 0.090, 0.103]
    assert toks[0][3] is None and toks[1][3] == pytest.approx(0.013, abs=1e-12)
    assert all(t[2] == 1 for t in toks)


BAD_LINES = {
    "not json": ("{not json", "not valid JSON"),
    "wrong type": (json.dumps(record(1, prompt_tokens="many")), "prompt_tokens"),
    "missing field": (
        json.dumps({k: v for k, v in record(2).items() if k != "output_tokens"}),
        "output_tokens",
    ),
    "negative tokens": (json.dumps(record(3, output_tokens=-4)), "negative token count"),
    "first token before arrival": (
        json.dumps(record(4, first_token_ts=record(4)["arrival_ts"] - 0.5, scheduled_ts=None)),
        "first token 0.5 s before arrival",
    ),
    "non-monotonic tokens": (
        json.dumps(record(5, token_times=[0.064, 0.09, 0.077, 0.103])),
        "not in increasing order",
    ),
    "finish before first": (
        json.dumps(record(6, finish_ts=record(6)["first_token_ts"] - 0.01)),
        "finish_ts is 0.01 s before first_token_ts",
    ),
    "array not object": ("[1, 2, 3]", "Input should be an object"),
    "bad status": (json.dumps(record(8, status="weird")), "status"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_each_bad_line_is_quarantined_with_line_and_reason(tmp_path, case):
    line, expected = BAD_LINES[case]
    path = write_jsonl(tmp_path / "mixed.jsonl", [record(10), line, record(11)])
    t, con = _ingest(tmp_path, path)
    assert (t["read"], t["ingested"], t["quarantined"]) == (3, 2, 1)
    reasons = _reasons(con)
    assert list(reasons) == [2]
    assert expected in reasons[2]
    raw = con.execute("SELECT raw FROM quarantine").fetchone()[0]
    assert raw  # the raw record is kept for the user to inspect


def test_float_token_count_is_coerced_not_lost(tmp_path):
    path = write_jsonl(tmp_path / "f.jsonl", [record(0, prompt_tokens=512.0)])
    t, con = _ingest(tmp_path, path)
    assert t["ingested"] == 1
    assert con.execute("SELECT prompt_tokens FROM requests").fetchone() == (512,)


def test_blank_lines_keep_line_numbers(tmp_path):
    path = write_jsonl(tmp_path / "b.jsonl", [record(0), "", "   ", "{oops", record(1)])
    t, con = _ingest(tmp_path, path)
    assert (t["read"], t["ingested"], t["quarantined"]) == (3, 2, 1)
    assert list(_reasons(con)) == [4]
    lines = con.execute("SELECT source_line FROM requests ORDER BY 1").fetchall()
    assert lines == [(1,), (5,)]


def test_duplicates_skipped_within_and_across_files(tmp_path):
    a = write_jsonl(tmp_path / "in" / "a.jsonl", [record(0), record(1), record(0)])
    b = write_jsonl(tmp_path / "in" / "b.jsonl", [record(1), record(2)])
    t, con = _ingest(tmp_path, a, b)
    assert (t["read"], t["ingested"], t["duplicates"]) == (5, 3, 2)
    assert con.execute("SELECT count(DISTINCT request_id), count(*) FROM requests").fetchone() == (
        3,
        3,
    )


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_compressed_inputs(tmp_path, suffix):
    text = "".join(json.dumps(record(i)) + "\n" for i in range(20)).encode()
    path = tmp_path / f"c{suffix}"
    data = gzip.compress(text) if suffix.endswith("gz") else zstandard.compress(text)
    path.write_bytes(data)
    t, _ = _ingest(tmp_path, path)
    assert (t["read"], t["ingested"], t["quarantined"]) == (20, 20, 0)


def test_truncated_gzip_keeps_what_precedes_and_quarantines_the_tail(tmp_path):
    text = "".join(json.dumps(record(i)) + "\n" for i in range(2000)).encode()
    data = gzip.compress(text)
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    t, con = _ingest(tmp_path, path)
    assert t["quarantined"] == 1
    assert t["read"] == t["ingested"] + t["quarantined"]
    assert 0 < t["ingested"] < 2000
    ((line, reason),) = con.execute("SELECT line, reason FROM quarantine").fetchall()
    assert "truncated" in reason or "ends early" in reason
    assert line == t["ingested"] + 1


def test_empty_file_is_reported_not_an_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    layout = Layout(tmp_path / "wh")
    (r,) = ingest_paths([path], layout)
    assert r.status == "empty" and r.counts["read"] == 0


def test_binary_file_is_quarantined_whole(tmp_path):
    path = tmp_path / "blob.jsonl"
    path.write_bytes(bytes(range(256)) * 100)
    t, con = _ingest(tmp_path, path)
    assert (t["read"], t["quarantined"], t["ingested"]) == (1, 1, 0)
    assert "binary file" in _reasons(con)[0]


def test_unrecognised_text_is_quarantined_whole(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\nworld\n")
    t, con = _ingest(tmp_path, path)
    assert t["quarantined"] == 1
    assert "unrecognised format" in _reasons(con)[0]


def test_50mb_single_line_is_quarantined_in_bounded_memory(tmp_path):
    path = tmp_path / "huge.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps(record(0)) + "\n")
        f.write('{"request_id": "x", "pad": "' + "a" * (50 * 1024 * 1024) + '"}\n')
        f.write(json.dumps(record(2)) + "\n")
    t, con = _ingest(tmp_path, path, max_line_bytes=8 * 1024 * 1024)
    assert (t["read"], t["ingested"], t["quarantined"]) == (3, 2, 1)
    reasons = _reasons(con)
    assert list(reasons) == [2] and "over the 8,388,608-byte limit" in reasons[2]


def test_set_fills_only_missing_metadata(tmp_path):
    recs = [record(0, gpu=None, gpu_count=None), record(1, gpu="A100-80GB")]
    path = write_jsonl(tmp_path / "m.jsonl", recs)
    _, con = _ingest(tmp_path, path, sets={"gpu": "H100-SXM", "gpu_count": 8})
    rows = con.execute("SELECT request_id, gpu, gpu_count FROM requests ORDER BY 1").fetchall()
    assert rows == [("req-000000", "H100-SXM", 8), ("req-000001", "A100-80GB", 1)]


def test_run_manifest_beside_the_log(tmp_path):
    write_jsonl(tmp_path / "in" / "m.jsonl", [record(0, gpu=None, max_num_seqs=None)])
    (tmp_path / "in" / "run.toml").write_text('gpu = "L40S"\nmax_num_seqs = 64\n')
    t, con = _ingest(tmp_path, tmp_path / "in")
    assert t["files"] == 1  # the manifest itself is not ingested
    assert con.execute("SELECT gpu, max_num_seqs FROM requests").fetchone() == ("L40S", 64)


def test_relative_clock_has_no_absolute_arrival(tmp_path):
    r = record(
        0,
        clock="relative",
        arrival_ts=10.0,
        scheduled_ts=10.5,
        first_token_ts=11.0,
        finish_ts=11.3,
        token_times=[1.0, 1.1, 1.2, 1.3],
    )
    _, con = _ingest(tmp_path, write_jsonl(tmp_path / "r.jsonl", [r]))
    assert con.execute("SELECT arrival_at, day, ttft_s FROM requests").fetchone() == (
        None,
        "unknown",
        1.0,
    )


def test_blank_files_are_empty_every_time_and_a_bom_loses_nothing(tmp_path):
    layout = Layout(tmp_path / "wh")
    (tmp_path / "a.jsonl").write_bytes(b"")
    (tmp_path / "b.jsonl").write_bytes(b"")  # same (empty) content as a.jsonl
    (tmp_path / "blank.jsonl").write_bytes(b"\n  \n\r\n\t\n")
    results = ingest_paths(
        [tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "blank.jsonl"], layout
    )
    assert [r.status for r in results] == ["empty", "empty", "empty"]
    # A UTF-8 byte-order mark (Windows editors) does not cost the first record.
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(
        b"\xef\xbb\xbf" + b"".join(json.dumps(record(i)).encode() + b"\n" for i in range(3))
    )
    (r,) = ingest_paths([bom], layout)
    assert (r.status, r.format, r.counts["ingested"], r.counts["quarantined"]) == (
        "ingested", "native", 3, 0,
    )  # fmt: skip


def test_a_file_with_every_record_refused_says_so(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [record(i, output_tokens=-1) for i in range(3)])
    (r,) = ingest_paths([path], Layout(tmp_path / "wh"))
    assert (r.status, r.counts["read"], r.counts["quarantined"]) == ("quarantined", 3, 3)
    again = ingest_paths([path], Layout(tmp_path / "wh"))  # remembered: not read twice
    assert [x.status for x in again] == ["already"]

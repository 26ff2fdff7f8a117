"""The fast path of our own format decides every line as the slow path does.

DuckDB parses chunks of our JSON lines (``readers/native.py``); it converts more loosely than the
record model (512.5 tokens -> 512, 2 -> true), so the rows it could have bent go to the model.
Here each such value is checked against what the model says, the DuckDB and Polars paths give the
same frames on mixed input, the memory-mapped line splitter cuts exactly where the streaming one
does, and the prefetching thread neither loses nor reorders items nor hides errors.
"""

from __future__ import annotations

import json
import mmap
import threading

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from pipeline.files import line_index
from pipeline.files.lines import LineChunk, _index, iter_file_chunks, iter_line_chunks
from pipeline.files.prefetch import prefetch
from pipeline.files.sources import iter_blocks
from pipeline.ingest.run import IngestOptions, _Dedup, _merge_sorted, ingest_paths, totals
from pipeline.readers import native
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.conftest import record, write_jsonl

# value DuckDB alone would accept or bend -> (stored value, or None when quarantined; reason)
LAX = {
    "fractional count": ({"prompt_tokens": 512.5}, None, "fractional part"),
    "flag 2": ({"chunked_prefill": 2}, None, "valid boolean"),
    "fractional token count": (
        {"token_counts": [1.5, 1, 1, 1], "output_tokens": 4},
        None,
        "fractional part",
    ),
    "count as text": ({"output_tokens": "4"}, ("output_tokens", 4), ""),
    "flag as text": ({"chunked_prefill": "yes"}, ("chunked_prefill", True), ""),
    "count beyond 2^53": ({"prompt_tokens": 2**60 + 1}, ("prompt_tokens", 2**60 + 1), ""),
    "flag false": ({"chunked_prefill": False}, ("chunked_prefill", False), ""),
}


@pytest.mark.parametrize("case", sorted(LAX))
def test_values_duckdb_would_bend_are_decided_by_the_model(tmp_path, case):
    change, stored, reason = LAX[case]
    path = write_jsonl(tmp_path / "lax.jsonl", [record(0), record(1, **change), record(2)])
    layout = Layout(tmp_path / "wh")
    t = totals(ingest_paths([path], layout, IngestOptions()))
    con = connect(layout)
    if stored is None:
        assert (t["ingested"], t["quarantined"]) == (2, 1)
        line, why = con.execute("SELECT line, reason FROM quarantine").fetchone()
        assert line == 2 and reason in why
    else:
        assert (t["ingested"], t["quarantined"]) == (3, 0)
        col, value = stored
        got = con.execute(f"SELECT {col} FROM requests WHERE request_id = 'req-000001'").fetchone()
        assert got == (value,)


def _chunk(lines: list[str]) -> LineChunk:
    return _index(("\n".join(lines) + "\n").encode(), 1)


def test_duckdb_and_polars_paths_give_the_same_rows_and_quarantine():
    lines = [json.dumps(record(i)) for i in range(40)]
    lines[3] = json.dumps(record(3, request_id=123))  # text from a number, on both paths
    lines[5] = json.dumps(record(5, prompt_tokens=100.0))
    lines[7] = ""  # blank: skipped, line numbers kept
    lines[9] = json.dumps(record(9, prompt_tokens=7.5))
    lines[12] = json.dumps(record(12, chunked_prefill="no", token_counts=[1, 2, 1]))
    lines[20] = json.dumps({**record(20), "extra": {"nested": [1, 2]}})
    lines[25] = json.dumps(record(25, token_times=[0.064, None, 0.09, 0.1]))
    chunk = _chunk(lines)
    slow, slow_bad = native._Chunk(chunk).run()
    fast, fast_bad = native._Chunk(chunk, native._Duck()).run()
    assert fast.height == 38 and fast_bad == slow_bad and [b[0] for b in fast_bad] == [10]
    assert_frame_equal(fast, slow)


def test_duckdb_refusing_a_chunk_falls_back_line_exact():
    lines = [json.dumps(record(i)) for i in range(10)]
    lines[4] = '{"request_id": "x", "prompt_tokens": '  # broken JSON: DuckDB refuses the chunk
    chunk = _chunk(lines)
    assert native._Duck().parse(chunk.data, 100) is None
    df, bad = native._Chunk(chunk, native._Duck()).run()
    assert df["source_line"].to_list() == [1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert [(b[0], b[1].split(" ")[0]) for b in bad] == [(5, "not")]


LINE = st.one_of(
    st.text(alphabet="ab{}", min_size=1, max_size=30),
    st.just(""),
    st.just("   "),
    st.text(alphabet="x", min_size=40, max_size=120),  # longer than small chunks
)


@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(LINE, max_size=30),
    chunk=st.integers(8, 64),
    limit_extra=st.integers(0, 80),
    newline_at_end=st.booleans(),
    bom=st.booleans(),
)
def test_mapped_splitter_cuts_where_the_streaming_one_does(
    tmp_path_factory, lines, chunk, limit_extra, newline_at_end, bom
):
    text = "\n".join(lines) + ("\n" if newline_at_end and lines else "")
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    path = tmp_path_factory.mktemp("split") / "f.jsonl"
    path.write_bytes(data)
    limit = chunk + limit_extra  # the mapped path serves limits at or above the chunk size

    def shape(items):
        out = []
        for it in items:
            if isinstance(it, LineChunk):
                out.append(("chunk", it.data, it.starts.tolist(), it.ends.tolist(),
                            it.line_numbers.tolist(), it.n_lines))  # fmt: skip
            else:
                # The head is what the reader holds when it gives up: up to 1 KiB, fewer bytes
                # on the streaming path when its blocks are small.
                out.append((type(it).__name__, it.line_number, it.size))
                heads.append(bytes(it.head))
        return out

    heads: list[bytes] = []
    streamed = shape(iter_line_chunks(iter_blocks(path, block_bytes=7), chunk, limit))
    streamed_heads, heads = heads, []
    assert shape(iter_file_chunks(path, chunk, limit)) == streamed
    assert all(
        m.startswith(s) and len(m) <= 1024 for m, s in zip(heads, streamed_heads, strict=True)
    )


def test_prefetch_keeps_order_raises_in_place_and_stops_early():
    assert list(prefetch(iter(range(1000)), depth=2)) == list(range(1000))

    def failing():
        yield 1
        yield 2
        raise ValueError("bad line")

    got = []
    with pytest.raises(ValueError, match="bad line"):
        for x in prefetch(failing()):
            got.append(x)
    assert got == [1, 2]

    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    gen = prefetch(endless())
    assert next(gen) == 0
    gen.close()  # the consumer stops: the producer thread must end too
    assert not any(t.name == "prefetch" for t in threading.enumerate())
    assert len(produced) <= 3  # one handed over, one waiting in the queue, one blocked


class _Counts:
    """Counts which parser each path of the native reader calls."""

    def __init__(self, monkeypatch):
        self.n = {"chunk": 0, "polars": 0, "whole": 0, "batches": 0}
        self.in_chunk = False
        real_parse, real_polars = native._Duck.parse, native._parse
        real_query, real_convert = native._Duck.query, native.convert

        def parse(duck, data, longest):
            self.n["chunk"] += 1
            self.in_chunk = True
            try:
                return real_parse(duck, data, longest)
            finally:
                self.in_chunk = False

        def polars(data):
            self.n["polars"] += 1
            return real_polars(data)

        def query(duck, path, size):
            if not self.in_chunk:
                self.n["whole"] += 1
            return real_query(duck, path, size)

        def convert(table):
            self.n["batches"] += 1
            return real_convert(table)

        monkeypatch.setattr(native._Duck, "parse", parse)
        monkeypatch.setattr(native._Duck, "query", query)
        monkeypatch.setattr(native, "_parse", polars)
        monkeypatch.setattr(native, "convert", convert)


def test_a_large_file_goes_through_the_whole_file_path(tmp_path, monkeypatch):
    counts = _Counts(monkeypatch)
    monkeypatch.setattr(native, "CHUNK_BYTES", 4096)
    path = write_jsonl(tmp_path / "big.jsonl", [record(i) for i in range(200)])
    layout = Layout(tmp_path / "wh")
    t = totals(ingest_paths([path], layout, IngestOptions()))
    assert (t["ingested"], t["quarantined"]) == (200, 0)
    # One query over the file, read in batches of about a chunk; no chunk ever parsed.
    assert counts.n["whole"] == 1 and counts.n["batches"] > 5
    assert counts.n["chunk"] == 0 and counts.n["polars"] == 0
    got = connect(layout).execute("SELECT min(source_line), max(source_line) FROM requests")
    assert got.fetchone() == (1, 200)


def test_whole_file_path_refused_part_way_goes_on_line_exact(tmp_path, monkeypatch):
    counts = _Counts(monkeypatch)
    monkeypatch.setattr(native, "CHUNK_BYTES", 4096)
    lines = [json.dumps(record(i)) for i in range(300)]
    lines[250] = '{"request_id": "x", "prompt_tokens": '  # DuckDB stops at this line's batch
    lines[120] = json.dumps(record(120, prompt_tokens=7.5))  # a suspect row, before it
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    layout = Layout(tmp_path / "wh")
    t = totals(ingest_paths([path], layout, IngestOptions()))
    assert (t["ingested"], t["quarantined"]) == (298, 2)
    assert counts.n["whole"] == 1 and counts.n["chunk"] > 0  # the chunked path took over
    con = connect(layout)
    bad = con.execute("SELECT line, reason FROM quarantine ORDER BY line").fetchall()
    assert [b[0] for b in bad] == [121, 251] and "fractional" in bad[0][1]
    ids = con.execute("SELECT source_line, request_id FROM requests ORDER BY 1").fetchall()
    expected = [(i + 1, f"req-{i:06d}") for i in range(300) if i not in (120, 250)]
    assert ids == expected


@pytest.mark.parametrize(
    "text",
    ["{r0}\n\n{r1}\n", "{r0}\n   \n{r1}", "\ufeff{r0}\n{r1}\n", " {r0}\n{r1}\n"],
    ids=["blank", "spaces", "bom", "indented"],
)
def test_files_with_blank_lines_or_a_bom_take_the_chunked_path(tmp_path, monkeypatch, text):
    counts = _Counts(monkeypatch)
    r0, r1 = json.dumps(record(0)), json.dumps(record(1))
    path = tmp_path / "odd.jsonl"
    path.write_bytes(text.format(r0=r0, r1=r1).encode())
    layout = Layout(tmp_path / "wh")
    t = totals(ingest_paths([path], layout, IngestOptions()))
    assert (t["ingested"], t["quarantined"]) == (2, 0)
    assert counts.n["whole"] == 0 and counts.n["chunk"] == 1
    lines = connect(layout).execute("SELECT source_line FROM requests ORDER BY 1").fetchall()
    assert lines == ([(1,), (3,)] if "\n\n" in text or "   " in text else [(1,), (2,)])


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.one_of(st.text(alphabet="ab{} ", max_size=30), st.just("")), max_size=30),
    window=st.sampled_from([4096, 8192]),
    newline_at_end=st.booleans(),
    pad=st.integers(0, 9000),
)
def test_line_index_agrees_with_the_chunk_splitter(
    tmp_path_factory, lines, window, newline_at_end, pad
):
    # Padding makes lines cross the scan windows (a window is at least a page).
    text = "\n".join([*lines[:1], "x" * pad, *lines[1:]]) + ("\n" if newline_at_end else "")
    data = text.encode()
    assume(data)  # (an empty file never reaches the index)
    path = tmp_path_factory.mktemp("index") / "f.jsonl"
    path.write_bytes(data)
    whole = _index(data, 1)  # keeps only the non-blank lines, so compare on those
    with (
        pytest.MonkeyPatch.context() as mp,
        open(path, "rb") as f,
        mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm,
    ):
        mp.setattr(line_index, "WINDOW", window)
        index = line_index.index_lines(mm, 10**6)
        assert index is not None
        starts, ends = index.starts, index.ends
        n_lines = len(index)
        loose, longest = index.loose, index.longest
        if b"\n" in data:  # over the line budget: no index
            assert line_index.index_lines(mm, 0) is None
    assert n_lines == whole.n_lines
    keep = np.isin(starts, whole.starts)
    assert starts[keep].tolist() == whole.starts.tolist()
    assert ends[keep].tolist() == whole.ends.tolist()
    heads = [ln[:1] for ln in text.split("\n")[:n_lines]]
    assert loose == any(h in ("", " ") for h in heads)
    assert longest == max(len(ln) for ln in text.split("\n")[:n_lines])


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.integers(0, 60), max_size=40), max_size=25))
def test_dedup_levels_agree_with_a_set(tmp_path_factory, batches):
    """Keys remembered over many batches (levels merged like a binary counter) are found
    exactly as a plain set finds them."""
    dedup = _Dedup(Layout(tmp_path_factory.mktemp("wh")))
    seen: set[int] = set()
    for batch in batches:
        keys = np.array(batch, dtype=np.uint64)
        known = dedup._known(keys)
        assert known.tolist() == [k in seen for k in batch]
        dedup._remember(keys[~known])  # as split() does: only keys not seen before
        seen.update(batch)
    for a, b in zip(dedup.levels, dedup.levels[1:], strict=False):
        assert len(a) > len(b)  # binary-counter shape: a few levels, largest first
    merged = np.concatenate(dedup.levels) if dedup.levels else np.array([], dtype=np.uint64)
    assert sorted(merged.tolist()) == sorted(seen)  # each key once, none lost


def test_merge_sorted_is_the_sorted_union():
    a = np.array([1, 4, 9, 12], dtype=np.uint64)
    b = np.array([0, 4, 10, 12, 30], dtype=np.uint64)
    assert _merge_sorted(a, b).tolist() == [0, 1, 4, 9, 10, 12, 30]
    assert _merge_sorted(a[:0], b[:1]).tolist() == [0]


def test_a_batch_of_only_duplicates_then_more_rows(tmp_path, monkeypatch):
    line = len(json.dumps(record(0))) + 1
    monkeypatch.setattr(native, "CHUNK_BYTES", 10 * line + 5)  # ten records a batch
    recs = [record(i) for i in range(10)] * 2 + [record(i) for i in range(10, 20)]
    path = write_jsonl(tmp_path / "dups.jsonl", recs)
    layout = Layout(tmp_path / "wh")
    t = totals(ingest_paths([path], layout, IngestOptions()))
    assert (t["read"], t["ingested"], t["duplicates"], t["quarantined"]) == (30, 20, 10, 0)


@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(LINE, max_size=30),
    chunk=st.integers(8, 200),
    limit=st.integers(4, 120),
    newline_at_end=st.booleans(),
)
def test_every_line_comes_out_once_and_only_long_ones_are_over_the_limit(
    lines, chunk, limit, newline_at_end
):
    """Against str.split: each non-blank line is either in a chunk (its number, its bytes) or
    reported over the limit (its number, its size), whatever the limit is beside the chunk size.
    A limit below the chunk size once reported the whole rest of the file as one long line."""
    text = "\n".join(lines) + ("\n" if newline_at_end and lines else "")
    blocks = [text.encode()[i : i + 7] for i in range(0, len(text.encode()), 7)]
    got = []
    for it in iter_line_chunks(iter(blocks), chunk, limit):
        if isinstance(it, LineChunk):
            got += [("ok", int(n), it.line(i)) for i, n in enumerate(it.line_numbers)]
        else:
            got.append(("long", it.line_number, it.size))
    want = []
    for n, line in enumerate(text.split("\n"), 1):
        b = line.encode()
        if len(b) > limit:
            want.append(("long", n, len(b)))
        elif b.strip():
            want.append(("ok", n, b))
    assert got == want

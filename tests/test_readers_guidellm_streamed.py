"""The guidellm reader's streamed path gives exactly what the whole-document path gives.

Each file is read twice, once streamed (``STREAM_MIN_BYTES = 0``: the structural scan of
``json_elements`` locates the request arrays, which are parsed a batch of elements at a time)
and once whole (``c.load_json``); every output table must be identical, in the same order. Input
the scan does not handle must make the streamed path step aside so errors do not change.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline.readers import guidellm
from pipeline.readers import json_elements as je
from pipeline.readers.base import InputError, ReadContext, ReaderOutput
from pipeline.readers.vllm_bench import Source

TABLES = ("requests", "quarantine", "arrivals", "run_summaries", "runs")
SHARED = Path(__file__).resolve().parents[2] / "shared" / "real_traces"
REAL = ("guidellm/benchmarks_stripped_v0.3_schema.json", "guidellm_0.8/benchmarks.json")


@pytest.fixture(autouse=True, params=["one-window", "61-byte-windows"])
def window(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every test runs twice: the file in one scan window, and in 61-byte windows with batches
    of ~700 bytes of elements, so quotes, backslash runs, keys and element ends fall across
    window edges and every request array comes in many batches."""
    size = je.WINDOW if request.param == "one-window" else 61
    monkeypatch.setattr(je, "WINDOW", size)
    if size == 61:
        monkeypatch.setattr(je, "BATCH_BYTES", 700)
    return size


def ctx(path: Path) -> ReadContext:
    return ReadContext(path=path, default_run_id="run")


def outputs(path: Path, streamed: bool, monkeypatch: pytest.MonkeyPatch) -> list[ReaderOutput]:
    monkeypatch.setattr(guidellm, "STREAM_MIN_BYTES", 0 if streamed else 1 << 62)
    return list(guidellm.READER.read(ctx(path)))


def tables(batches: list[ReaderOutput]) -> dict[str, pl.DataFrame]:
    out: dict[str, list[pl.DataFrame]] = {t: [] for t in TABLES}
    for b in batches:
        for t in TABLES:
            f = getattr(b, t)
            if f is not None and f.height:
                out[t].append(f)
    return {t: pl.concat(v) if v else pl.DataFrame() for t, v in out.items()}


def streams(path: Path) -> bool:
    """True when the streamed path takes the file (it did not step aside)."""
    plan = guidellm._plan(ctx(path))
    if plan is not None:
        plan.src.close()
    return plan is not None


def assert_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, pl.DataFrame]:
    assert streams(path)
    fast, slow = tables(outputs(path, True, monkeypatch)), tables(outputs(path, False, monkeypatch))
    for t in TABLES:
        assert_frame_equal(fast[t], slow[t], check_exact=True)
    return fast


def request(i: int, **over: object) -> dict:
    """A v2 (0.8) request: nested info.timings, input/output metrics."""
    r: dict = {
        "type_": "generative_request_stats",
        "request_id": f"r{i}",
        "request_args": json.dumps({"body": {"messages": [{"content": f"say {i} [{{,}}]"}]}}),
        "output": f"out {i}\n",
        "info": {
            "timings": {
                "request_start": 1000.0 + i,
                "first_token_iteration": 1000.25 + i,
                "last_token_iteration": 1001.5 + i,
                "request_end": 1001.75 + i,
            },
            "error": None,
        },
        "input_metrics": {"text_tokens": 100 + i},
        "output_metrics": {"text_tokens": 10 + i},
    }
    r.update(over)
    return r


def report(*benches: dict) -> dict:
    return {
        "metadata": {"version": 2, "guidellm_version": "0.8.1"},
        "config": {"spec": {"backend": {"model": "m-8b"}}},
        "benchmarks": list(benches),
    }


def bench(successful: list, errored: list | None = None, incomplete: list | None = None) -> dict:
    return {
        "type_": "generative_benchmark",
        "config": {"strategy": {"rate": 2.0}, "backend": {"kind": "openai_http"}},
        "metrics": {"request_latency": {"successful": {"mean": 1.5, "percentiles": {"p50": 1.4}}}},
        "requests": {
            "successful": successful,
            "errored": errored or [],
            "incomplete": incomplete or [],
            "total": None,
        },
        "start_time": 1000.0,
        "end_time": 1100.0,
        "duration": 100.0,
    }


def write(tmp_path: Path, doc: object, indent: int | None = None, name: str = "b.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc, indent=indent))
    return p


# ---------------------------------------------------------------- real files


@pytest.mark.parametrize("rel", REAL)
def test_real_files_identical(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if not SHARED.is_dir():
        pytest.skip(f"../shared is absent ({SHARED}); it holds the real traces")
    got = assert_same(SHARED / rel, monkeypatch)
    assert got["requests"].height == {REAL[0]: 1, REAL[1]: 160}[rel]


# ---------------------------------------------------------------- hand-made cases


def test_tricky_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Brackets, braces, commas, colons, escaped quotes and backslash runs inside strings and
    keys do not move an element boundary."""
    nasty = 'a\\\\\\"]},"'  # a, two escaped backslashes... then an escaped quote, ]},"
    reqs = [
        request(0, output=nasty, **{'k"]},': "[", "\\\\": '\\"}'}),
        request(1, request_args='{"a": "\\\\\\""}', output="\\" * 7),
        request(2, output='],[{"requests": [], "successful": [1,2]}]'),
    ]
    errs = [request(3, info={"timings": {"request_start": 5.0}, "error": 'boom "]\\\\'})]
    p = write(tmp_path, report(bench(reqs, errs)))
    got = assert_same(p, monkeypatch)["requests"]
    assert got["request_id"].to_list() == ["r0", "r1", "r2", "r3"]
    assert got["source_line"].to_list() == [1, 2, 3, 4]
    assert got["status"].to_list() == ["ok", "ok", "ok", "error"]
    # Two backslashes come back as one on both paths: Polars' json_path_match (info.error)
    # unescapes once more; the streamed path keeps what the whole path always gave.
    assert got["error"].to_list() == [None, None, None, 'boom "]\\']
    assert got["prompt_tokens"].to_list() == [100, 101, 102, 103]
    assert got["output_tokens"].to_list() == [10, 11, 12, 13]
    assert got["arrival_ts"].to_list() == [1000.0, 1001.0, 1002.0, 5.0]
    assert got["first_token_ts"].to_list() == [1000.25, 1001.25, 1002.25, None]


def _reference_structure(text: bytes, max_level: int) -> list[tuple[int, int, int]]:
    """(offset, char, level) of structural characters: a byte-at-a-time scanner to check
    the vectorised one against."""
    out, depth, in_str, i = [], 0, False, 0
    while i < len(text):
        ch = text[i]
        if in_str:
            if ch == 0x5C:
                i += 2
                continue
            in_str = ch != 0x22
        elif ch == 0x22:
            in_str = True
        elif ch in b"{[":
            if depth <= max_level:
                out.append((i, ch, depth))
            depth += 1
        elif ch in b"}]":
            depth -= 1
            if depth <= max_level:
                out.append((i, ch, depth))
        elif ch in b",:" and depth <= max_level:
            out.append((i, ch, depth))
        i += 1
    return out


def test_window_edge_inside_backslash_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every window size from 1 to 40 bytes: edges fall inside runs of 1..8 backslashes before
    a quote (escaped or not), and the scan agrees with a byte-at-a-time scanner."""
    runs = ["\\" * k + '"' + "x" for k in range(9)]  # "\\"*k then a quote: escaped when k odd
    reqs = [
        request(i, output="".join(runs[i:]) + "]},", **{"\\" * i: "\\" * (i + 1)}) for i in range(8)
    ]
    doc = report(bench(reqs[:5], reqs[5:7], reqs[7:]))
    text = json.dumps(doc).encode()
    want = _reference_structure(text, 5)
    for w in range(1, 41):
        st = je.scan(Source(text), 5, window=w)
        assert st is not None
        got = list(zip(st.pos.tolist(), st.char.tolist(), st.level.tolist(), strict=True))
        assert got == want, w
    monkeypatch.setattr(je, "WINDOW", 7)
    got = assert_same(write(tmp_path, doc), monkeypatch)["requests"]
    assert got["request_id"].to_list() == [f"r{i}" for i in range(8)]
    assert got["status"].to_list() == ["ok"] * 5 + ["error"] * 2 + ["cancelled"]


def test_bad_elements_quarantined_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries that are not objects, or lack their times, go to quarantine with the same line,
    reason and raw text (the element as Python's json writes it) as on the whole path."""
    odd = [
        5,
        request(1),
        "text, with ] and }",
        [1, {"a": 2}],
        request(4, info={"timings": {}}),
        None,
        {"request_id": "x", "prompt_tokens": 2.5, "note": "é\u2028"},
    ]
    p = write(tmp_path, report(bench(odd, [request(7)])), indent=2)
    got = assert_same(p, monkeypatch)
    q = got["quarantine"]
    assert q["line"].to_list() == [1, 3, 4, 5, 6, 7]
    assert q["raw"].to_list()[:3] == [
        '{"_not_an_object": 5}',
        '{"_not_an_object": "text, with ] and }"}',
        '{"_not_an_object": [1, {"a": 2}]}',
    ]
    assert q["raw"][5] == json.dumps(odd[6])  # "\u00e9\u2028": escaped as json.dumps does
    assert q["reason"][0].startswith("entry is not an object")
    assert q["reason"][3] == (
        "request start time missing or not a number; first token time missing or not a number"
    )
    assert got["requests"]["source_line"].to_list() == [2, 8]


def test_empty_and_whitespace_arrays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty request arrays (with whitespace inside) give runs and summaries, no requests; line
    numbers go on across benchmarks as before."""
    doc = report(bench([]), bench([request(0), request(1)], [request(2)]), bench([]))
    text = json.dumps(doc).replace('"successful": []', '"successful": [ \n\t ]')
    p = tmp_path / "e.json"
    p.write_text(text)
    got = assert_same(p, monkeypatch)
    assert got["runs"]["run_id"].to_list() == ["run#1", "run#2", "run#3"]
    assert got["requests"]["source_line"].to_list() == [1, 2, 3]
    assert got["requests"]["run_id"].to_list() == ["run#2"] * 3
    assert got["run_summaries"].filter(pl.col("run_id") == "run#1")["metric"].to_list() == [
        "request_latency.successful.mean",
        "request_latency.successful.percentiles.p50",
        "duration",
        "start_time",
        "end_time",
    ]


def test_pretty_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """json.dumps(indent=2): newlines and indentation between elements and tokens."""
    doc = report(bench([request(i) for i in range(30)], [request(30)], [request(31)]))
    doc["benchmarks"].append(bench([request(i) for i in range(40, 45)]))
    got = assert_same(write(tmp_path, doc, indent=2), monkeypatch)["requests"]
    assert got.height == 37
    assert got["source_line"].to_list() == list(range(1, 38))
    assert got["finish_ts"][0] == 1001.5 and got["model"][0] == "m-8b"


def test_values_polars_refuses_take_the_python_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NaN, Infinity and a number too large for a float parse (Python's json accepts them):
    that batch is parsed like the whole path does it, with the same result."""
    reqs = [request(0), request(1, prompt_tokens=float("nan")), request(2)]
    text = json.dumps(report(bench(reqs))).replace('"output": "out 2\\n"', '"output": 1e400')
    p = tmp_path / "nan.json"
    p.write_text(text)
    got = assert_same(p, monkeypatch)
    assert got["requests"]["request_id"].to_list() == ["r0", "r2"]
    assert got["quarantine"]["line"].to_list() == [2]
    assert '"prompt_tokens": "non-finite number nan"' in got["quarantine"]["raw"][0]


def test_columns_come_from_the_first_1000_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key first seen after record 1000 is not a column on either path."""
    reqs = [{"request_id": f"r{i}", "start_time": 1.0 + i} for i in range(1001)]
    reqs.append({"request_id": "late", "start_time": 5.0, "first_token_time": 6.0})
    p = write(tmp_path, {"benchmarks": [{"requests": {"errored": reqs}}]})
    got = assert_same(p, monkeypatch)["requests"]
    assert got.height == 1002 and got["first_token_ts"].null_count() == 1002


# ---------------------------------------------------------------- stepping aside


STEP_ASIDE = (
    "truncated",
    "trailing-comma",
    "stray-comma",
    "control-char",
    "bad-token",
    "not-a-list",
    "two-documents",
)


def test_unusual_input_steps_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Invalid JSON, no benchmarks list, a requests value that is not an array, a stray comma,
    compressed input: the whole-document path reads it, same errors and quarantine."""
    good = json.dumps(report(bench([request(0), request(1)])))
    cases = {
        "truncated": good[:-40],
        "trailing-comma": good.replace('"errored": []', '"errored": [1, ]'),
        "stray-comma": good.replace('"successful": [', '"successful": [,'),
        "control-char": good.replace("out 0", "out\t0"),
        "bad-token": good.replace('"output": "out 0\\n"', '"output": tru'),
        "not-a-list": json.dumps({"benchmarks": {"requests": []}}),
        "requests-object": json.dumps(report(bench({"a": request(0)}))),  # type: ignore[arg-type]
        "two-documents": good + good,
        "duplicate-requests": good.replace('"requests": {', '"requests": {"successful": [1], ', 1),
    }
    for name, text in cases.items():
        p = tmp_path / f"{name}.json"
        p.write_text(text)
        if name in STEP_ASIDE:
            assert not streams(p), name
        results = []
        for streamed in (True, False):
            try:
                results.append(tables(outputs(p, streamed, monkeypatch)))
            except InputError as exc:
                results.append(str(exc))
        if isinstance(results[1], str):
            assert results[0] == results[1], name
        else:
            for t in TABLES:
                assert_frame_equal(results[0][t], results[1][t], check_exact=True)
    # A compressed file is spilled decompressed to a temporary file and streamed like a plain one
    # (it used to be decompressed whole in memory), with the same tables as the whole path.
    # Whatever its size: the size gate ("big enough to stream") cannot read a compressed size.
    gz, plain = tmp_path / "b.json.gz", tmp_path / "b.json"
    gz.write_bytes(gzip.compress(good.encode()))
    plain.write_text(good)
    assert streams(gz)
    spied: list[bool] = []
    real = guidellm._plan

    def spy(c: ReadContext):  # type: ignore[no-untyped-def]
        out = real(c)
        spied.append(out is not None)
        return out

    monkeypatch.setattr(guidellm, "_plan", spy)
    got = tables(outputs(gz, False, monkeypatch))  # the largest size gate: still streamed
    assert spied == [True] and got["requests"].height == 2
    whole = tables(outputs(plain, False, monkeypatch))  # the plain file, read whole
    for t in TABLES:
        assert_frame_equal(
            got[t].drop("source_file", strict=False),
            whole[t].drop("source_file", strict=False),
            check_exact=True,
        )


def test_plain_file_is_streamed_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file is never read whole: the scan reads windows, the elements come in batches, only
    the small rest of the document (everything but the request arrays) is read in pieces."""
    reqs = [request(i, output="word " * 200) for i in range(400)]
    p = write(tmp_path, report(bench(reqs[:300], reqs[300:350], reqs[350:])))
    monkeypatch.setattr(je, "WINDOW", 4096)
    monkeypatch.setattr(je, "BATCH_BYTES", 8192)
    biggest = 0
    real = Source.read

    def spy(self: Source, begin: int, end: int) -> bytes:
        nonlocal biggest
        out = real(self, begin, end)
        biggest = max(biggest, len(out))
        return out

    monkeypatch.setattr(Source, "read", spy)
    got = outputs(p, True, monkeypatch)
    assert sum(b.requests.height for b in got if b.requests is not None) == 400
    assert sum(b.requests is not None for b in got) > 20  # many batches
    assert biggest < p.stat().st_size / 20


def test_random_reports_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded random reports: strings made of quotes, backslash runs, brackets and newlines in
    values and keys, odd entries, compact or indented: both paths agree on every table."""
    rng = random.Random(7)
    bits = ['"', "\\", "\\\\", "]", "}", "{", "[", ",", ":", "\n", "é", "\u2028", " ", "x"]

    def text() -> str:
        return "".join(rng.choice(bits) for _ in range(rng.randint(0, 12)))

    def entry(i: int) -> object:
        r = rng.random()
        if r < 0.08:
            return rng.choice([1, None, text(), [text(), {"a": text()}]])
        extra = {text(): text() for _ in range(rng.randint(0, 3))}
        return request(i, output=text(), request_args=text(), **extra)

    for trial in range(6):
        benches = [
            bench(*[[entry(i) for i in range(rng.randint(0, 12))] for _ in range(3)])
            for _ in range(rng.randint(1, 3))
        ]
        p = write(tmp_path, report(*benches), indent=rng.choice([None, 1]), name=f"r{trial}.json")
        assert_same(p, monkeypatch)

"""A pretty-printed OTLP payload read streamed gives exactly what reading it whole gives.

Each file is read twice: streamed (``STREAM_MIN_BYTES = 0``: the structural scan finds every
``resourceSpans[i].scopeSpans[j].spans`` array and its spans are parsed a batch at a time) and
whole (Python's json on the whole text). Every output table must be identical, in the same
order. What the scan does not model must make the streamed path step aside.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline.readers import json_elements as je
from pipeline.readers import otlp, otlp_streamed
from pipeline.readers.base import InputError, ReadContext, ReaderOutput
from tests.test_readers_formats import span

TABLES = ("requests", "quarantine")
SHARED = Path(__file__).resolve().parents[2] / "shared" / "real_traces"


@pytest.fixture(autouse=True, params=["one-window", "61-byte-windows"])
def window(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test runs with the file in one scan window, and again in 61-byte windows with
    batches of ~700 bytes of spans (keys, quotes and span ends fall across window edges)."""
    if request.param == "61-byte-windows":
        monkeypatch.setattr(je, "WINDOW", 61)
        monkeypatch.setattr(je, "BATCH_BYTES", 700)


def ctx(path: Path, rows: int = 200_000) -> ReadContext:
    return ReadContext(path=path, default_run_id="run", batch_rows=rows)


def tables(path: Path, streamed: bool, mp: pytest.MonkeyPatch, rows: int) -> dict:
    mp.setattr(otlp, "STREAM_MIN_BYTES", 0 if streamed else 1 << 62)
    if not streamed:  # the whole path: also for a compressed file
        mp.setattr(otlp, "compression", lambda _p: None)
    got: list[ReaderOutput] = list(otlp.READER.read(ctx(path, rows)))
    mp.undo()
    out = {}
    for t in TABLES:
        frames = [getattr(b, t) for b in got if getattr(b, t) is not None]
        frames = [f for f in frames if f.height]
        out[t] = pl.concat(frames) if frames else pl.DataFrame()
    return out


def streams(path: Path) -> bool:
    plan = otlp_streamed.plan(ctx(path))
    if plan is not None:
        plan.close()
    return plan is not None


def assert_same(path: Path, rows: int = 200_000) -> dict[str, pl.DataFrame]:
    assert streams(path)
    mp = pytest.MonkeyPatch()
    fast, slow = tables(path, True, mp, rows), tables(path, False, mp, rows)
    for t in TABLES:
        assert_frame_equal(fast[t], slow[t], check_exact=True)
    return fast


def resource(service: str, *scopes: list[dict], key: str = "scopeSpans") -> dict:
    attrs = [{"key": "service.name", "value": {"stringValue": service}}]
    return {
        "resource": {"attributes": attrs},
        key: [{"scope": {"name": f"s{k}"}, "spans": s} for k, s in enumerate(scopes)],
    }


def write(tmp_path: Path, doc: object, name: str = "trace.json") -> Path:
    p = tmp_path / name
    text = json.dumps(doc, indent=2)
    if name.endswith(".gz"):
        p.write_bytes(gzip.compress(text.encode()))
    else:
        p.write_text(text)
    return p


def test_resources_and_scopes_in_file_order(tmp_path: Path) -> None:
    """Two resources (vLLM, SGLang), three scopes, a child span and a bad span: the same rows,
    quarantine and span numbering (``source_line``) as the whole path, at any batch size."""
    child = {"name": "tokenize", "spanId": "ff", "startTimeUnixNano": "1", "attributes": []}
    bad = span(5, **{"gen_ai.usage.prompt_tokens": "many"})
    doc = {
        "resourceSpans": [
            resource("vllm", [span(0), span(1), child], [span(2)]),
            resource("sglang-router", [span(3), bad, span(4)]),
        ]
    }
    p = write(tmp_path, doc)
    for rows in (1, 2, 200_000):
        got = assert_same(p, rows)
        req = got["requests"]
        assert req["request_id"].to_list() == [f"cmpl-{i}" for i in range(5)]
        assert req["source_line"].to_list() == [1, 2, 4, 5, 7]
        assert req["engine"].to_list() == ["vllm"] * 3 + ["sglang"] * 2
        assert got["quarantine"]["line"].to_list() == [6]  # the bad count (the child is skipped)


def test_old_key_tricky_strings_and_gzip(tmp_path: Path) -> None:
    """``instrumentationLibrarySpans`` (OTLP before 0.15); brackets, quotes, backslashes and a
    '"spans": [' inside strings; a gzipped file (always streamed)."""
    model = 'm{2}, "x"'  # kept whole; the escapes of its JSON text stay as written
    odd = span(1, **{"note": 'm "spans": [ {x}, \\" ] \\\\', "gen_ai.response.model": model})
    doc = {"resourceSpans": [resource("vllm", [span(0), odd], key="instrumentationLibrarySpans")]}
    got = assert_same(write(tmp_path, doc))["requests"]
    assert got["model"].to_list() == ["llama", model.replace('"', '\\"')]
    gz = write(tmp_path, doc, "trace.json.gz")
    assert streams(gz)
    assert assert_same(gz)["requests"].equals(got)


def test_steps_aside(tmp_path: Path) -> None:
    """Two payloads in one file, invalid JSON outside the spans, no span arrays: the whole path
    reads these, so their rows and errors stay the same."""
    one = json.dumps({"resourceSpans": [resource("vllm", [span(0)])]}, indent=2)
    p = tmp_path / "two.json"
    p.write_text(one + "\n" + one)
    assert not streams(p)
    assert tables(p, False, pytest.MonkeyPatch(), 10)["requests"].height == 2
    p.write_text(one.replace('"scope": {', '"scope": {"x": tru,', 1))
    assert not streams(p)
    p.write_text(json.dumps({"resourceMetrics": []}, indent=2))
    assert not streams(p)


def test_duplicate_spans_key(tmp_path: Path) -> None:
    """Python's json keeps the last of two ``spans`` keys: streamed, the same one is used (an
    array followed by a string reads no spans; a string followed by an array reads the array)."""
    one = json.dumps({"resourceSpans": [resource("vllm", [span(0)], [span(1)])]}, indent=2)
    p = tmp_path / "dup.json"
    p.write_text(one.replace('"spans": [', '"spans": "x", "spans": [', 1))
    assert assert_same(p)["requests"]["request_id"].to_list() == ["cmpl-0", "cmpl-1"]
    text = json.loads(one)
    text["resourceSpans"][0]["scopeSpans"][0]["zzz"] = 1
    p.write_text(json.dumps(text, indent=2).replace('"zzz": 1', '"spans": "x"'))
    assert assert_same(p)["requests"]["request_id"].to_list() == ["cmpl-1"]


def test_bad_span_names_it(tmp_path: Path) -> None:
    """A span the scan accepts but Python's json rejects (a bare word): an error naming the
    span, after the spans before it were read."""
    text = json.dumps({"resourceSpans": [resource("vllm", [span(0), span(1)])]}, indent=2)
    p = tmp_path / "bad.json"
    p.write_text(text.replace('"kind": 2', '"kind": two', 2).replace('"kind": two', '"kind": 2', 1))
    otlp.STREAM_MIN_BYTES, keep = 0, otlp.STREAM_MIN_BYTES
    try:
        with pytest.raises(InputError, match=r"span 2 of the payload \(byte \d+\) is not valid"):
            list(otlp.READER.read(ctx(p)))
    finally:
        otlp.STREAM_MIN_BYTES = keep


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/real_traces is absent")
def test_real_example_payload() -> None:
    """OpenTelemetry's own example trace (no LLM spans): the same quarantine either way."""
    p = SHARED / "otlp_json" / "opentelemetry-proto_examples_trace.json"
    mp = pytest.MonkeyPatch()
    assert streams(p)
    fast, slow = tables(p, True, mp, 10), tables(p, False, mp, 10)
    assert_frame_equal(fast["quarantine"], slow["quarantine"], check_exact=True)
    assert "none is an LLM request span" in fast["quarantine"]["reason"][0]

"""The llmperf reader's streamed path (a large or compressed ``individual_responses.json``,
read a batch of elements at a time) gives exactly the tables of the whole-document path.

Each file is read twice, streamed (``STREAM_MIN_BYTES = 0``) and whole, in one scan window and
in 61-byte windows with ~700-byte batches (keys, quotes and element ends across window edges).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline.readers import element_frames as ef
from pipeline.readers import json_elements as je
from pipeline.readers import llmperf
from pipeline.readers.base import ReadContext, ReaderOutput

TABLES = ("requests", "quarantine", "runs", "run_summaries")
SHARED = Path(__file__).resolve().parents[2] / "shared" / "real_traces" / "llmperf"


@pytest.fixture(autouse=True, params=["one-window", "61-byte-windows"])
def window(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "61-byte-windows":
        monkeypatch.setattr(je, "WINDOW", 61)
        monkeypatch.setattr(je, "BATCH_BYTES", 700)


def ctx(path: Path) -> ReadContext:
    return ReadContext(path=path, default_run_id="run")


def tables(path: Path, streamed: bool, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(llmperf, "STREAM_MIN_BYTES", 0 if streamed else 1 << 62)
    batches: list[ReaderOutput] = list(llmperf.READER.read(ctx(path)))
    out = {}
    for t in TABLES:
        frames = [f for b in batches if (f := getattr(b, t)) is not None and f.height]
        out[t] = pl.concat(frames) if frames else pl.DataFrame()
    return out | {"batches": len(batches)}


def assert_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    found = ef.located(ctx(path), llmperf._records_array)
    assert found is not None  # the streamed path takes the file
    found[0].src.close()
    fast, slow = tables(path, True, monkeypatch), tables(path, False, monkeypatch)
    for t in TABLES:
        assert_frame_equal(fast[t], slow[t], check_exact=True)
    return fast


def response(i: int, **over: object) -> dict:
    r = {
        "error_code": None,
        "error_msg": "",
        "inter_token_latency_s": 0.02,
        "ttft_s": 0.1 + i,
        "end_to_end_latency_s": 2.0 + i,
        "number_output_tokens": 100,
        "number_input_tokens": 200,
    }
    return r | over


def test_real_individual_responses(monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted(SHARED.glob("individual_*.json")) if SHARED.exists() else []
    if not files:
        pytest.skip(f"no llmperf individual_*.json under {SHARED}")
    for f in files:
        got = assert_same(f, monkeypatch)
        assert got["requests"].height == len(json.loads(f.read_text()))


def test_errors_odd_elements_and_escapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows: list[object] = [response(i) for i in range(40)]
    rows[3] = response(3, error_code=500, error_msg='upstream "timeout" \\ [x]{y},')
    rows[7] = response(7, number_input_tokens="12.5")  # not a whole number: quarantined
    rows[9] = 42  # not an object
    rows[11] = response(11, ttft_s=None)
    rows[13] = {"ttft_s": 1.0}  # a record with other keys
    path = tmp_path / "x_individual_responses.json"
    path.write_text(json.dumps(rows, indent=2))  # spacing the whole path re-dumps differently
    got = assert_same(path, monkeypatch)
    assert got["requests"].height + got["quarantine"].height == 40
    assert sorted(got["quarantine"]["line"].to_list()) == [8, 10, 12, 14]
    assert got["runs"].height == 1


def test_gzip_and_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gz = tmp_path / "y_individual_responses.json.gz"
    gz.write_bytes(gzip.compress(json.dumps([response(i) for i in range(25)]).encode()))
    assert assert_same(gz, monkeypatch)["requests"].height == 25
    empty = tmp_path / "z_individual_responses.json"
    empty.write_text("[]")
    monkeypatch.setattr(llmperf, "STREAM_MIN_BYTES", 0)
    fast = tables(empty, True, monkeypatch)
    slow = tables(empty, False, monkeypatch)
    assert fast["runs"].height == slow["runs"].height == 1
    assert fast["requests"].height == slow["requests"].height == 0

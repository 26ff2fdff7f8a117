"""The vLLM bench reader's columnar fast path gives exactly what the JSON path gives.

Each file is read twice, once with the fast path forced (``COLUMNAR_MIN_BYTES = 0``) and once with
it off; every output table must be identical. Bad input must make the fast path step aside
(``columnar_documents`` returns None) so the JSON path's handling is unchanged.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline.readers import sglang_bench, vllm_bench
from pipeline.readers.base import InputError, ReadContext

TABLES = ("requests", "quarantine", "arrivals", "run_summaries", "runs")


@pytest.fixture(autouse=True, params=["one-window", "61-byte-windows"])
def window(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every test runs twice: the file in one window, and cut into 61-byte windows, so array
    ends, key matches and itls entries fall across window edges and itls comes in many batches."""
    size = vllm_bench.WINDOW if request.param == "one-window" else 61
    monkeypatch.setattr(vllm_bench, "WINDOW", size)
    return size


def detailed(n: int = 200, seed: int = 0, start_times: bool = True) -> dict:
    """A --save-detailed result with failures, multi-token chunks and full-precision floats."""
    rng = np.random.default_rng(seed)
    out_lens = rng.integers(1, 60, n)
    failed = rng.random(n) < 0.05
    failed[3] = True
    out_lens[failed] = 0
    itls, ttfts, lats, errors = [], [], [], []
    for i in range(n):
        if failed[i]:
            itls.append([])
            ttfts.append(0.0)
            lats.append(0.0)
            errors.append("HTTP 500: engine dead")
            continue
        k = max(int(out_lens[i]) - 1, 0)
        if i % 7 == 0:
            k //= 2
        gaps = rng.uniform(0.001, 0.05, k).tolist()
        ttfts.append(float(rng.uniform(0.05, 0.5)))
        itls.append(gaps)
        lats.append(ttfts[-1] + sum(gaps))
        errors.append("")
    res: dict = {
        "date": "20250601-120000",
        "backend": "vllm",
        "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": n,
        "request_rate": "inf",
        "max_concurrency": 8,
        "gpu": "H100",
        "server": {"tp": 2, "flags": [1, "x", None]},
        "duration": 12.5,
        "completed": int((~failed).sum()),
        "request_goodput:": None,
        "input_lens": rng.integers(10, 5000, n).tolist(),
        "output_lens": out_lens.tolist(),
        "ttfts": ttfts,
        "itls": itls,
        "errors": errors,
        "generated_texts": ['he said "itls": [1]]'] * n,
        "mean_ttft_ms": 123.25,
        "p99_itl_ms": 48.5,
    }
    if start_times:
        res["start_times"] = (np.cumsum(rng.exponential(0.1, n)) + 1000.0).tolist()
        res["latencies"] = lats
    return res


def read(path: Path, fast: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, pl.DataFrame]:
    monkeypatch.setattr(vllm_bench, "COLUMNAR_MIN_BYTES", 0 if fast else 1 << 62)
    out: dict[str, list[pl.DataFrame]] = {t: [] for t in TABLES}
    batches = list(vllm_bench.READER.read(ReadContext(path=path, default_run_id="run")))
    if fast and vllm_bench.WINDOW < 100 and uses_fast_path(path):
        assert sum(b.requests is not None for b in batches) > 3  # itls streamed in batches
    for batch in batches:
        for t in TABLES:
            f = getattr(batch, t)
            if f is not None:
                out[t].append(f)
    return {t: pl.concat(v) if v else pl.DataFrame() for t, v in out.items()}


def assert_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, pl.DataFrame]:
    fast = read(path, True, monkeypatch)
    slow = read(path, False, monkeypatch)
    for t in TABLES:
        assert_frame_equal(fast[t], slow[t], check_exact=True)
    return fast


def uses_fast_path(path: Path) -> bool:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return vllm_bench.columnar_documents(data) is not None


@pytest.mark.parametrize("indent", [None, 2])
def test_fast_path_equals_json_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indent: int | None
) -> None:
    p = tmp_path / "vllm.json"
    p.write_text(json.dumps(detailed(), indent=indent))
    assert uses_fast_path(p)
    f = assert_same(p, monkeypatch)
    r = f["requests"]
    assert r.height == 200 and f["quarantine"].height == 0
    assert r.filter(pl.col("request_id") == "3")["status"].item() == "error"
    assert r["token_times"].list.len().sum() > 1000
    assert json.loads(f["runs"]["metadata_json"][0])["server"] == {"tp": 2, "flags": [1, "x", None]}


def test_old_layout_append_and_gzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = detailed(30, 1, start_times=False), detailed(40, 2, start_times=True)
    text = json.dumps(a) + "\n\n" + json.dumps(b, separators=(",", ":")) + "\n"
    p = tmp_path / "append.json.gz"
    p.write_bytes(gzip.compress(text.encode()))
    assert uses_fast_path(p)
    f = assert_same(p, monkeypatch)
    assert f["runs"]["run_id"].to_list() == ["run#1", "run#2"]
    assert (f["requests"].filter(pl.col("run_id") == "run#1")["arrival_ts"] == 0.0).all()
    meta = [json.loads(m) for m in f["runs"]["metadata_json"]]
    assert [m["source_line"] for m in meta] == [1, 3]
    assert [m["arrival_times_known"] for m in meta] == [False, True]


def test_mismatched_lengths_quarantine_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = detailed(50, 3)
    res["input_lens"] = res["input_lens"][:48]  # two entries dropped
    res["itls"] = res["itls"][:49]
    p = tmp_path / "short.json"
    p.write_text(json.dumps(res))
    assert uses_fast_path(p)  # the shared conversion pads short arrays, as on the JSON path
    f = assert_same(p, monkeypatch)
    q = f["quarantine"]
    assert sorted(q["line"].to_list()) == [49, 50]
    assert "input_lens" in q.filter(pl.col("line") == 49)["reason"][0]
    assert f["requests"].height == 48


BAD_EDITS = {
    "string_ttft": lambda r: r["ttfts"].__setitem__(2, "fast"),
    "bool_ttft": lambda r: r["ttfts"].__setitem__(2, True),
    "fraction_count": lambda r: r["output_lens"].__setitem__(4, 2.5),
    "itls_not_list": lambda r: r["itls"].__setitem__(4, "oops"),
    "itls_null_entry": lambda r: r["itls"].__setitem__(4, None),
    "itls_nested": lambda r: r["itls"].__setitem__(4, [[0.1]]),
    "numeric_error": lambda r: r["errors"].__setitem__(6, 5),
    "infinity": lambda r: r["latencies"].__setitem__(7, float("inf")),
    "nan_metric": lambda r: r.__setitem__("mean_ttft_ms", float("nan")),
    "nested_key": lambda r: r.__setitem__("extra", {"ttfts": [1.0, 2.0]}),
    "not_a_list": lambda r: r.__setitem__("start_times", "later"),
}


@pytest.mark.parametrize("edit", sorted(BAD_EDITS))
def test_bad_input_handled_like_json_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: str
) -> None:
    res = detailed(20, 4)
    BAD_EDITS[edit](res)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(res))
    assert_same(p, monkeypatch)


def test_duplicate_key_and_escaped_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = json.dumps(detailed(20, 5))
    dup = text[:-1] + ', "ttfts": [0.5, 0.25]}'  # JSON keeps the last value
    p = tmp_path / "dup.json"
    p.write_text(dup)
    assert not uses_fast_path(p)
    assert_same(p, monkeypatch)
    esc = text[:-1] + r', "note": "see \"ttfts\": [1, 2] and \\"}'
    p.write_text(esc)
    assert_same(p, monkeypatch)


def test_plain_file_is_streamed_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain file is read by windows from disk: the per-token itls (most of the file) never
    whole; only the scalar arrays and the rest of the document are read in one piece."""
    p = tmp_path / "big.json"
    p.write_text(json.dumps(detailed(400, 7)))
    monkeypatch.setattr(vllm_bench, "WINDOW", 1000)
    monkeypatch.setattr(vllm_bench, "COLUMNAR_MIN_BYTES", 0)
    biggest = 0
    real = vllm_bench.Source.read

    def spy(self: vllm_bench.Source, begin: int, end: int) -> bytes:
        nonlocal biggest
        out = real(self, begin, end)
        if begin or end < self.size:  # the JSON path's whole read is the one exception
            biggest = max(biggest, len(out))
        return out

    monkeypatch.setattr(vllm_bench.Source, "read", spy)
    out = list(vllm_bench.READER.read(ReadContext(path=p, default_run_id="run")))
    assert sum(b.requests.height for b in out if b.requests is not None) == 400
    itls_bytes = len(json.dumps(detailed(400, 7)["itls"]))
    assert biggest < itls_bytes / 10


def test_truncated_file_raises_like_json_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = json.dumps(detailed(20, 6))
    p = tmp_path / "cut.json"
    for cut in (text.index('"itls"') + 40, text.index('"ttfts"') + 30, len(text) - 3):
        p.write_text(text[:cut])
        for fast in (True, False):
            with pytest.raises(InputError):
                read(p, fast, monkeypatch)


def test_sglang_output_details_streamed_like_line_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SGLang's bench_serving lines carry the same arrays: a large file is streamed by window
    and gives exactly what the line-by-line path gives (bare Infinity included)."""
    runs = []
    for seed in (8, 9):
        r = detailed(60, seed, start_times=False)
        del r["model_id"]
        r.update(dataset_name="random", server_info={"model_path": "m"})
        runs.append(json.dumps(r).replace('"request_rate": "inf"', '"request_rate": Infinity'))
    p = tmp_path / "sglang.jsonl"
    p.write_text("\n".join(runs) + "\n")

    def tables(fast: bool) -> dict[str, pl.DataFrame]:
        monkeypatch.setattr(vllm_bench, "COLUMNAR_MIN_BYTES", 0 if fast else 1 << 62)
        got = list(sglang_bench.READER.read(ReadContext(path=p, default_run_id="run")))
        if fast and vllm_bench.WINDOW < 100:
            assert sum(b.requests is not None for b in got) > 3
        return {
            t: pl.concat([getattr(b, t) for b in got if getattr(b, t) is not None])
            for t in ("requests", "runs", "run_summaries")
        }

    fast, slow = tables(True), tables(False)
    for t in fast:
        assert_frame_equal(fast[t], slow[t], check_exact=True)
    assert fast["requests"].height == 120
    assert fast["requests"]["run_id"].unique().sort().to_list() == ["run#1", "run#2"]


def test_compressed_file_is_spilled_not_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzipped result is decompressed block by block to an unlinked temporary file and read by
    windows from it, like a plain file (it was decompressed whole into memory): the Source holds
    no bytes, the spill directory is empty afterwards, and the tables equal the plain file's."""
    import tempfile

    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_dir))
    text = json.dumps(detailed(300, 5))
    plain, gz = tmp_path / "r.json", tmp_path / "r.json.gz"
    plain.write_text(text)
    gz.write_bytes(gzip.compress(text.encode()))
    held = []
    real_init = vllm_bench.Source.__init__

    def spy(self: vllm_bench.Source, *a: object, **k: object) -> None:
        real_init(self, *a, **k)  # type: ignore[arg-type]
        held.append((self.data is None, self.size))

    monkeypatch.setattr(vllm_bench.Source, "__init__", spy)
    monkeypatch.setattr(vllm_bench, "COLUMNAR_MIN_BYTES", 0)
    list(vllm_bench.READER.read(ReadContext(path=gz, default_run_id="run")))
    assert held == [(True, len(text.encode()))]  # descriptor-backed, the decompressed size
    assert list(spill_dir.iterdir()) == []  # unlinked at once: nothing left behind
    from_gz, from_plain = read(gz, True, monkeypatch), read(plain, True, monkeypatch)
    for t in TABLES:
        assert_frame_equal(
            from_gz[t].drop("source_file", strict=False),
            from_plain[t].drop("source_file", strict=False),
            check_exact=True,
        )

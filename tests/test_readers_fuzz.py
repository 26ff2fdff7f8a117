"""Hypothesis fuzzing of every reader with mutated real files (and synthetic detailed runs).

Record-level mutations (dropped keys, wrong types, swapped units, nulls) keep the number of
records, so requests + quarantine (or arrivals + quarantine) must equal it; byte-level damage
(truncation, garbage) must give frames or InputError, never another exception.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.readers import registry
from pipeline.readers.base import InputError, ReadContext, ReaderOutput

ROOT = Path(__file__).resolve().parents[2] / "shared" / "real_traces"
needs_real = pytest.mark.skipif(not ROOT.is_dir(), reason=f"real traces not present at {ROOT}")
FUZZ = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**19), 10**19),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def run(name: str, path: Path) -> dict[str, int] | None:
    """Counts per table, or None when the reader raised InputError. Anything else fails."""
    counts = {"requests": 0, "quarantine": 0, "arrivals": 0}
    try:
        for batch in registry.by_name(name).read(ReadContext(path=path, default_run_id="f")):
            assert isinstance(batch, ReaderOutput)
            for k in counts:
                frame = getattr(batch, k)
                if frame is not None:
                    assert isinstance(frame, pl.DataFrame)
                    counts[k] += frame.height
    except InputError:
        return None
    return counts


def mutate(rec: dict, data: st.DataObject) -> dict:
    rec = dict(rec)
    keys = sorted(rec)
    if not keys:
        return rec
    for _ in range(data.draw(st.integers(1, 3))):
        k = data.draw(st.sampled_from(keys))
        action = data.draw(st.sampled_from(["drop", "odd", "scale"]))
        if action == "drop":
            rec.pop(k, None)
        elif action == "odd":
            rec[k] = data.draw(ODD)
        elif isinstance(rec.get(k), int | float) and not isinstance(rec.get(k), bool):
            rec[k] = rec[k] * 1000  # swapped units
    return rec


# reader, file, one JSON record per line?
JSONL = [
    ("aiperf", "aiperf/profile_export.jsonl"),
    ("mooncake", "mooncake/synthetic_trace.head.jsonl"),
]


@needs_real
@pytest.mark.parametrize(("name", "rel"), JSONL)
@FUZZ
@given(data=st.data())
def test_jsonl_record_mutations(name: str, rel: str, data: st.DataObject, tmp_path: Path) -> None:
    lines = (ROOT / rel).read_text().splitlines()[:40]
    recs = [json.loads(x) for x in lines]
    idx = data.draw(st.sets(st.integers(0, len(recs) - 1), max_size=6))
    out = [json.dumps(mutate(r, data)) if i in idx else json.dumps(r) for i, r in enumerate(recs)]
    if data.draw(st.booleans()):
        out[-1] = out[-1][: data.draw(st.integers(0, len(out[-1])))]  # truncated last line
    p = tmp_path / "f.jsonl"
    p.write_text("\n".join(out) + "\n")
    counts = run(name, p)
    assert counts is not None
    kept = counts["requests"] + counts["arrivals"] + counts["quarantine"]
    assert kept == sum(1 for x in out if x.strip())


@needs_real
@pytest.mark.parametrize("which", ["anyscale_70b", "bedrock_70b"])
@FUZZ
@given(data=st.data())
def test_llmperf_mutations(which: str, data: st.DataObject, tmp_path: Path) -> None:
    recs = json.loads((ROOT / f"llmperf/individual_{which}.json").read_text())[:30]
    idx = data.draw(st.sets(st.integers(0, 29), max_size=6))
    recs = [mutate(r, data) if i in idx else r for i, r in enumerate(recs)]
    if data.draw(st.booleans()):
        recs[0] = data.draw(ODD)  # a non-object element
    p = tmp_path / "i.json"
    p.write_text(json.dumps(recs))
    counts = run("llmperf", p)
    assert counts is not None and counts["requests"] + counts["quarantine"] == 30


CSVS = [
    ("azure_llm_trace", "azure_llm_2023/AzureLLMInferenceTrace_code.head.csv"),
    ("splitwise", "splitwise_sim/test_trace.csv"),
]


@needs_real
@pytest.mark.parametrize(("name", "rel"), CSVS)
@FUZZ
@given(data=st.data())
def test_csv_line_mutations(name: str, rel: str, data: st.DataObject, tmp_path: Path) -> None:
    lines = (ROOT / rel).read_text().splitlines()[:30]
    body = lines[1:]
    for i in data.draw(st.sets(st.integers(0, len(body) - 1), max_size=4)):
        cells = body[i].split(",")
        j = data.draw(st.integers(0, len(cells) - 1))
        cells[j] = data.draw(st.text(alphabet="abc-1.9 :", max_size=6))
        if data.draw(st.booleans()):
            cells = cells[:-1]  # dropped field
        body[i] = ",".join(cells) or "x"
    p = tmp_path / "f.csv"
    p.write_text("\n".join([lines[0], *body]) + "\n")
    counts = run(name, p)
    assert counts is not None
    assert counts["arrivals"] + counts["quarantine"] == len(body)


WHOLE = [
    ("vllm_bench", "vllm_bench_serve/nv-action_serving_llama8B_tp1_qps_inf.json"),
    ("sglang_bench", "sglang_bench_serving/datacrunch_h200_llama_3_3_70b_online_output.jsonl"),
    ("guidellm", "guidellm/benchmarks_stripped_v0.3_schema.json"),
    ("aiperf_aggregate", "aiperf/profile_export_aiperf.json"),
    ("aiperf_aggregate", "aiperf/profile_export_aiperf.csv"),
    ("llmperf", "llmperf/summary_bedrock_70b.json"),
    ("otlp_llm_spans", "otlp_json/opentelemetry-proto_examples_trace.json"),
    ("otlp_llm_spans", "otlp_json/opentelemetry-proto_examples_metrics.json"),
    ("servegen", "servegen/language_m-large_chunk-11-dataset.json"),
    ("mooncake", "mooncake/conversation_trace.head.jsonl"),
]


@needs_real
@pytest.mark.parametrize(("name", "rel"), WHOLE)
@FUZZ
@given(data=st.data())
def test_byte_damage(name: str, rel: str, data: st.DataObject, tmp_path: Path) -> None:
    raw = (ROOT / rel).read_bytes()[:20000]
    cut = data.draw(st.integers(0, len(raw)))
    junk = data.draw(st.binary(max_size=20))
    at = data.draw(st.integers(0, cut))
    p = tmp_path / ("f" + Path(rel).suffix)
    p.write_bytes(raw[:at] + junk + raw[at:cut])
    run(name, p)  # frames or InputError; any other exception fails the test


@FUZZ
@given(data=st.data())
def test_vllm_detailed_mutations(data: st.DataObject, tmp_path: Path) -> None:
    from test_readers_formats import bench_result

    res = bench_result(12, data.draw(st.integers(0, 5)))
    for _ in range(data.draw(st.integers(1, 4))):
        key = data.draw(st.sampled_from(["input_lens", "output_lens", "ttfts", "itls", "errors"]))
        i = data.draw(st.integers(0, 11))
        res[key][i] = data.draw(ODD)
    p = tmp_path / "d.json"
    p.write_text(json.dumps(res))
    counts = run("vllm_bench", p)
    assert counts is not None and counts["requests"] + counts["quarantine"] == 12

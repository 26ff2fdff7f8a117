"""The mapping reader reads CSV, JSON lines and Parquet in batches: the same rows, line numbers
and quarantine whatever the batch size, so memory is bounded by a batch, not by the file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline.readers import json_elements as je
from pipeline.readers import mapping as mapping_reader
from pipeline.readers.base import ReadContext
from pipeline.readers.mapping import reader_for_mapping

MAPPING = """
[time]
unit = "ms"
[fields]
request_id = "id"
arrival_ts = "t"
ttft = "ttft"
prompt_tokens = "p"
output_tokens = "o"
itl = { column = "gaps", unit = "ms" }
"""

# Row 4 (line 5 of the CSV) has a bad arrival time, row 7 (line 8) a bad prompt count.
ROWS = [
    ("a", "1000", "100", "10", "3", "[5.0, 5.0]"),
    ("b", "1010", "120", "11", "2", "[7.5]"),
    ("c", "1020", "130", "12", "1", "[]"),
    ("d", "oops", "140", "13", "2", "[1.0]"),
    ("e", "1040", "150", "14", "2", "[2.0]"),
    ("f", "1050", "160", "15", "2", "[3.0]"),
    ("g", "1060", "170", "x", "2", "[4.0]"),
    ("h", "1070", "180", "17", "3", "[1.0, 2.0]"),
]


def _csv_text() -> str:
    lines = ["id,t,ttft,p,o,gaps"]
    lines += [",".join(r[:5]) + f',"{r[5]}"' for r in ROWS]
    return "\n".join(lines) + "\n"


def _read(mapping: Path, data: Path, batch_rows: int) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    outs = list(reader_for_mapping(mapping).read(ReadContext(data, "d", batch_rows=batch_rows)))
    req = pl.concat([o.requests for o in outs if o.requests is not None])
    qs = [o.quarantine for o in outs if o.quarantine is not None]
    q = pl.concat(qs) if qs else pl.DataFrame()
    return req, q, len(outs)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    out: dict[str, tuple[Path, Path]] = {}
    csv = tmp_path / "t.csv"
    csv.write_text(_csv_text())
    gz = tmp_path / "t.csv.gz"
    gz.write_bytes(gzip.compress(_csv_text().encode()))
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        "\n".join(
            f'{{"id": "{r[0]}", "t": "{r[1]}", "ttft": {r[2]}, "p": "{r[3]}", "o": {r[4]}, '
            f'"gaps": {r[5]}}}'
            for r in ROWS
        )
        + "\n"
    )
    parquet = tmp_path / "t.parquet"
    pl.DataFrame(
        {k: [r[i] for r in ROWS] for i, k in enumerate(["id", "t", "ttft", "p", "o", "gaps"])}
    ).write_parquet(parquet, row_group_size=3)
    pgz = tmp_path / "t.parquet.gz"
    pgz.write_bytes(gzip.compress(parquet.read_bytes()))
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    doc = json.dumps({"meta": {"rows": 8}, "data": {"rows": records}}, indent=1)
    doc_path = tmp_path / "t.json"
    doc_path.write_text(doc)
    doc_gz = tmp_path / "t.json.gz"
    doc_gz.write_bytes(gzip.compress(doc.encode()))
    for name, data in (
        ("csv", csv),
        ("csv.gz", gz),
        ("jsonl", jsonl),
        ("parquet", parquet),
        ("parquet.gz", pgz),
        ("json", doc_path),
        ("json.gz", doc_gz),
    ):
        m = tmp_path / f"{name}.toml"
        fmt = name.split(".")[0]
        records_key = 'records = "data.rows"\n' if fmt == "json" else ""
        m.write_text(f'format = "{fmt}"\n{records_key}' + MAPPING)
        out[name] = (m, data)
    return out


@pytest.mark.parametrize("name", ["csv", "csv.gz", "jsonl", "parquet", "parquet.gz", "json.gz"])
@pytest.mark.parametrize("batch_rows", [1, 3, 1000])
def test_batches_give_the_same_rows(files, name: str, batch_rows: int) -> None:
    mapping, data = files[name]
    req, q, n_out = _read(mapping, data, batch_rows)
    assert req["request_id"].to_list() == ["a", "b", "c", "e", "f", "h"]
    # CSV lines count the header; JSON lines and Parquet rows start at 1.
    first = 2 if name.startswith("csv") else 1
    assert req["source_line"].to_list() == [first + i for i in (0, 1, 2, 4, 5, 7)]
    assert sorted(q["line"].to_list()) == [first + 3, first + 6]
    assert req["arrival_ts"].to_list() == pytest.approx([1.0, 1.01, 1.02, 1.04, 1.05, 1.07])
    h = req.row(5, named=True)
    assert h["token_times"] == pytest.approx([0.18, 0.181, 0.183])
    if batch_rows == 1 and name != "jsonl":  # JSON lines are cut by bytes read (iter_line_batches)
        # (a compressed JSON document is always streamed, a batch of elements at a time)
        assert n_out == len(ROWS)  # one output per batch: nothing held for the whole file
    if batch_rows == 1000:
        assert n_out == 1


def test_header_only_csv_still_checks_the_columns(tmp_path: Path) -> None:
    m = tmp_path / "m.toml"
    m.write_text('format = "csv"\n' + MAPPING)
    data = tmp_path / "h.csv"
    data.write_text("id,t,ttft,p,o,gaps\n")
    req, q, n_out = _read(m, data, 10)
    assert (req.height, q.height, n_out) == (0, 0, 1)


@pytest.mark.parametrize("windows", [False, True])
def test_json_document_streamed_as_read_whole(
    files, windows: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JSON document is streamed (structural scan, batches of elements) with the same rows,
    line numbers and quarantine (raw re-dumped as Python's json writes it) as parsed whole."""
    mapping, data = files["json"]
    if windows:  # scan windows and element batches far smaller than the file
        monkeypatch.setattr(je, "WINDOW", 37)
        monkeypatch.setattr(je, "BATCH_BYTES", 90)
    got = {}
    for streamed in (True, False):
        monkeypatch.setattr(mapping_reader, "STREAM_MIN_BYTES", 0 if streamed else 1 << 62)
        got[streamed] = _read(mapping, data, 2)
    # batches of two elements (of one when 90 bytes hold only one) against one whole frame
    assert got[True][2] == (8 if windows else 4) and got[False][2] == 1
    assert_frame_equal(got[True][0], got[False][0], check_exact=True)
    assert_frame_equal(got[True][1], got[False][1], check_exact=True)
    assert got[True][0]["source_line"].to_list() == [1, 2, 3, 5, 6, 8]
    assert got[True][1]["raw"][0].startswith('{"id": "d", "t": "oops"')

"""Declarative mapping reader: a TOML file says which input column is which canonical field.

Works for CSV, JSON (an array of records, or one under ``records = "a.b"``), JSON lines and
Parquet. See ``docs/mapping.md``. Example::

    format = "csv"
    [time]                       # how timestamp columns are written
    clock = "unix"               # unix | relative | datetime
    unit = "ms"                  # s | ms | us | ns (numbers)
    # datetime_format = "%Y-%m-%d %H:%M:%S%.f"   (clock = "datetime"; UTC unless an offset)
    [fields]
    request_id = "id"
    arrival_ts = "start_ms"
    finish_ts = "end_ms"
    ttft = { column = "ttft", unit = "s" }       # durations are relative to arrival
    prompt_tokens = "input_tokens"
    output_tokens = "output_tokens"
    [status_values]              # optional: raw value -> ok | error | cancelled
    ok = ["200", "success"]

Timestamps (``arrival_ts``, ``scheduled_ts``, ``first_token_ts``, ``finish_ts``) follow ``[time]``
unless a field table overrides ``unit`` / ``clock`` / ``datetime_format``. Durations (``ttft``,
``e2e``, ``queue``, ``prefill``, ``decode``) add to arrival (decode: to the first token).
``token_times`` / ``itl`` name list columns (seconds since arrival / gaps after the first token).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.files.sources import compression, spilled
from pipeline.readers import element_frames as ef
from pipeline.readers.arrival_traces import (
    ArrivalMapping,
    ArrivalMappingReader,
    MappingFileError,
    load_arrival_mapping,
)
from pipeline.readers.base import (
    CANONICAL_SCHEMA,
    Capabilities,
    InputError,
    ReadContext,
    ReaderOutput,
)
from pipeline.readers.columns import bad_count, cum_token_times, num, num_list, parse_datetime_utc
from pipeline.readers.frames import empty_quarantine, records_frame, requests_frame, split_valid
from pipeline.readers.json_elements import ElementArray
from pipeline.readers.json_text import load_json
from pipeline.readers.lines import iter_line_batches, parse_ndjson, rows_per_batch
from pipeline.readers.sniff import has_suffix
from pipeline.readers.units import UNIT_SECONDS
from pipeline.readers.vllm_bench import COLUMNAR_MIN_BYTES, Source

PRIORITY = 1000  # never sniffs: used only when a mapping file is given
STREAM_MIN_BYTES = COLUMNAR_MIN_BYTES  # JSON documents this large (or compressed) are streamed
TIMESTAMPS = ("arrival_ts", "scheduled_ts", "first_token_ts", "finish_ts")
DURATIONS = ("ttft", "e2e", "queue", "prefill", "decode")
LISTS = ("token_times", "itl", "token_counts")
FORMATS = ("csv", "json", "jsonl", "parquet")
DIRECT = tuple(
    n for n in CANONICAL_SCHEMA if n not in (*TIMESTAMPS, "token_times", "token_counts", "clock")
)


class MappingError(InputError):
    """The mapping file itself is wrong."""


@dataclass
class FieldSpec:
    column: str
    unit: str | None = None
    clock: str | None = None
    datetime_format: str | None = None


@dataclass
class Mapping:
    path: Path
    format: str | None
    records: str | None
    clock: str
    unit: str
    datetime_format: str | None
    fields: dict[str, FieldSpec]
    status_values: dict[str, list[str]] = field(default_factory=dict)
    csv_separator: str = ","


def load_mapping(path: Path) -> Mapping | ArrivalMapping:
    """A request mapping, or with ``target = "arrivals"`` an arrival-only one (the vocabulary the
    shipped BurstGPT / Splitwise / Mooncake / Azure definitions use, readers/arrival_formats)."""
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise MappingError(f"mapping file {path}: {exc}") from exc
    target = raw.get("target", "requests")
    if target == "arrivals":
        try:
            return load_arrival_mapping(Path(path), raw)
        except MappingFileError as exc:
            raise MappingError(str(exc)) from exc
    if target != "requests":
        raise MappingError(f'mapping {path}: target must be "requests" or "arrivals"')
    time = raw.get("time", {})
    fmt = raw.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise MappingError(f"mapping {path}: format must be one of {', '.join(FORMATS)}")
    clock = time.get("clock", "unix")
    if clock not in ("unix", "relative", "datetime"):
        raise MappingError(f"mapping {path}: [time] clock must be unix, relative or datetime")
    unit = time.get("unit", "s")
    if unit not in UNIT_SECONDS:
        raise MappingError(f"mapping {path}: unknown unit {unit!r} (use s, ms, us or ns)")
    fields: dict[str, FieldSpec] = {}
    known = set(DIRECT) | set(TIMESTAMPS) | set(DURATIONS) | set(LISTS)
    for name, spec in (raw.get("fields") or {}).items():
        if name not in known:
            raise MappingError(
                f"mapping {path}: unknown field {name!r}; known: {', '.join(sorted(known))}"
            )
        if isinstance(spec, str):
            fields[name] = FieldSpec(spec)
        elif isinstance(spec, dict) and isinstance(spec.get("column"), str):
            u = spec.get("unit")
            if u is not None and u not in UNIT_SECONDS:
                raise MappingError(f"mapping {path}: field {name}: unknown unit {u!r}")
            fields[name] = FieldSpec(
                spec["column"], u, spec.get("clock"), spec.get("datetime_format")
            )
        else:
            raise MappingError(f"mapping {path}: field {name} must be a column name or a table")
    for required in ("arrival_ts", "prompt_tokens", "output_tokens"):
        if required not in fields:
            raise MappingError(f"mapping {path}: [fields] must map {required}")
    return Mapping(
        path=Path(path),
        format=fmt,
        records=raw.get("records"),
        clock=clock,
        unit=unit,
        datetime_format=time.get("datetime_format"),
        fields=fields,
        status_values={k: [str(x) for x in v] for k, v in (raw.get("status_values") or {}).items()},
        csv_separator=raw.get("csv_separator", ","),
    )


def _input_format(m: Mapping, path: Path) -> str:
    if m.format:
        return m.format
    for f in FORMATS:
        if has_suffix(path, "." + f):
            return f
    if has_suffix(path, ".ndjson"):
        return "jsonl"
    raise InputError(f"cannot tell the input format of {path.name}; set format in the mapping")


def _records_array(src: Source, keys: list[str]) -> tuple[ElementArray, dict] | None:
    """The mapping's records array and its columns, when the structural scan can stream it."""
    arr = ef.array_at(src, keys)
    schema = ef.sample_schema(arr) if arr is not None else None
    return (arr, schema) if arr is not None and schema is not None else None


def _csv_frame(df: pl.DataFrame) -> pl.DataFrame:
    """A CSV batch with ``_line`` (the row's line number when no field spans lines) and ``_raw``."""
    return df.with_columns(
        pl.col("_line").cast(pl.Int64, strict=False),
        pl.concat_str(pl.all().exclude("_line").fill_null(""), separator=",").alias("_raw"),
    )


def _parquet_batches(ctx: ReadContext) -> Iterator[pl.DataFrame]:
    """Row groups read one batch at a time (pyarrow), with ``_line`` and ``_raw``; a compressed
    file is decompressed to a temporary file first, never into memory."""
    try:
        with spilled(ctx.path) as path:
            pf = pq.ParquetFile(path)
            start = 1
            yielded = False
            for rb in pf.iter_batches(batch_size=max(1, ctx.batch_rows)):
                df = pl.from_arrow(rb)
                assert isinstance(df, pl.DataFrame)
                yield _parquet_frame(df, start)
                start += df.height
                yielded = True
            if not yielded:
                yield _parquet_frame(pl.from_arrow(pf.schema_arrow.empty_table()), 1)  # type: ignore[arg-type]
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"not a readable Parquet file: {exc}") from exc


def _parquet_frame(df: pl.DataFrame, start: int) -> pl.DataFrame:
    return df.with_row_index("_line", offset=start).with_columns(
        pl.col("_line").cast(pl.Int64, strict=False),
        pl.struct(pl.all()).struct.json_encode().alias("_raw"),
    )


class MappingReader:
    name = "mapping"
    description = (
        "Declarative mapping (--mapping FILE.toml) for CSV / JSON / JSON lines / Parquet: which "
        "column is which canonical field, with unit (s/ms/us/ns) and clock (unix, relative or a "
        "datetime format). Never sniffed; see docs/mapping.md."
    )
    capabilities = Capabilities(
        per_request=True, per_token=True, arrivals_only=False, gpu_model_present=False
    )

    def __init__(self, mapping: Mapping | ArrivalMapping | None = None) -> None:
        self.mapping = mapping

    def sniff(self, path: Path, head: bytes) -> bool:
        return False

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        m = self.mapping
        if m is None:
            mp = getattr(ctx, "mapping", None)
            if mp is None:
                raise InputError("the mapping reader needs a mapping file (--mapping FILE.toml)")
            m = load_mapping(Path(mp))
        if isinstance(m, ArrivalMapping):
            yield from ArrivalMappingReader(m).read(ctx)
            return
        fmt = _input_format(m, ctx.path)
        for df, pre_q, streamed in self._frames(m, fmt, ctx):
            out = self._convert(m, fmt, ctx, df, pre_q)
            if streamed and out.quarantine is not None and out.quarantine.height:
                out.quarantine = ef.redump_raw(out.quarantine, df)  # raw as the whole path has it
            yield out

    # -- input

    def _frames(
        self, m: Mapping, fmt: str, ctx: ReadContext
    ) -> Iterator[tuple[pl.DataFrame, pl.DataFrame, bool]]:
        """(records, records already quarantined, streamed JSON elements) in batches of about
        ``ctx.batch_rows``, so memory does not grow with the file: a CSV, JSON lines or Parquet
        file, compressed or not, is never read whole, nor is a JSON document of
        ``STREAM_MIN_BYTES`` or more (or compressed) whose records array the structural scan
        finds; a smaller one is parsed whole."""
        empty = empty_quarantine()
        if fmt == "parquet":
            for df in _parquet_batches(ctx):
                yield df, empty, False
        elif fmt == "csv":
            for df in self._csv_batches(m, ctx):
                yield df, empty, False
        elif fmt == "jsonl":
            cols = sorted({s.column for s in m.fields.values()})
            for nums, texts in iter_line_batches(ctx):
                yield *parse_ndjson(nums, texts, cols), False
        else:
            big = compression(ctx.path) is not None or ctx.path.stat().st_size >= STREAM_MIN_BYTES
            keys = m.records.split(".") if m.records else []
            found = ef.located(ctx, lambda src: _records_array(src, keys)) if big else None
            if found is not None:
                arr, schema = found
                try:
                    for first, chunk, is_obj in arr.batches(max_rows=ctx.batch_rows):
                        df = ef.batch_frame(chunk, is_obj, schema, lambda: load_json(ctx))
                        del chunk
                        lines = pl.int_range(first + 1, first + 1 + df.height, eager=True)
                        yield df.with_columns(lines.cast(pl.Int64).alias("_line")), empty, True
                finally:
                    arr.src.close()
                return
            doc: Any = load_json(ctx)
            if m.records:
                for part in m.records.split("."):
                    doc = doc.get(part) if isinstance(doc, dict) else None
            if not isinstance(doc, list):
                raise InputError(
                    f"JSON input: {m.records or 'the document'} is not an array of records"
                )
            yield records_frame(doc), empty, False

    def _csv_batches(self, m: Mapping, ctx: ReadContext) -> Iterator[pl.DataFrame]:
        opts: dict[str, Any] = {
            "separator": m.csv_separator,
            "infer_schema": False,  # every column as text: the conversion parses and checks
            "truncate_ragged_lines": True,
        }
        try:
            # Polars' streaming engine reads the file in morsels; batches of batch_rows (fewer for
            # long rows) keep the peak near one batch whatever the file's size. A compressed file
            # is decompressed to a temporary file first (it was read whole into memory).
            with spilled(ctx.path) as path:
                lf = pl.scan_csv(path, **opts).with_row_index("_line", offset=2)
                rows = 0
                for df in lf.collect_batches(chunk_size=rows_per_batch(ctx)):
                    rows += df.height
                    if df.height:
                        yield _csv_frame(df)
                if not rows:  # header only: no rows, but the mapped columns are still checked
                    yield _csv_frame(lf.head(0).collect())
        except pl.exceptions.PolarsError as exc:
            raise InputError(f"not a readable CSV file: {exc}") from exc

    # -- conversion

    def _time(self, m: Mapping, name: str, spec: FieldSpec) -> tuple[pl.Expr, str]:
        clock = spec.clock or m.clock
        col = pl.col(spec.column)
        if clock == "datetime":
            fmt = spec.datetime_format or m.datetime_format
            if fmt:
                text = col.cast(pl.Utf8).str.strip_chars()
                dt = pl.coalesce(
                    text.str.to_datetime(fmt, strict=False, time_unit="us", time_zone="UTC"),
                    text.str.to_datetime(fmt, strict=False, time_unit="us").dt.replace_time_zone(
                        "UTC"
                    ),
                )
            else:
                dt = parse_datetime_utc(col)
            return dt.dt.epoch("us").cast(pl.Float64) / 1e6, "unix"
        scale = UNIT_SECONDS[spec.unit or m.unit]
        return num(col) * scale, clock

    def _convert(
        self, m: Mapping, fmt: str, ctx: ReadContext, df: pl.DataFrame, pre_q: pl.DataFrame
    ) -> ReaderOutput:
        missing = sorted({s.column for s in m.fields.values()} - set(df.columns))
        if df.height and missing and fmt != "jsonl":
            raise InputError(f"columns named in the mapping are not in the input: {missing}")
        for col in missing:
            df = df.with_columns(pl.lit(None, pl.Utf8).alias(col))
        exprs: dict[str, pl.Expr] = {}
        clocks = set()
        for name in TIMESTAMPS:
            if name in m.fields:
                e, clk = self._time(m, name, m.fields[name])
                exprs[name] = e
                clocks.add(clk)
        if len(clocks) > 1:
            raise MappingError(
                f"mapping {m.path}: timestamps on different clocks ({', '.join(sorted(clocks))})"
            )
        clock = clocks.pop() if clocks else "relative"
        arrival = exprs["arrival_ts"]
        dur = {
            n: num(pl.col(s.column)) * UNIT_SECONDS[s.unit or m.unit]
            for n, s in m.fields.items()
            if n in DURATIONS
        }
        if "first_token_ts" not in exprs and "ttft" in dur:
            exprs["first_token_ts"] = arrival + dur["ttft"]
        if "scheduled_ts" not in exprs and "queue" in dur:
            exprs["scheduled_ts"] = arrival + dur["queue"]
        if "scheduled_ts" not in exprs and "prefill" in dur and "first_token_ts" in exprs:
            exprs["scheduled_ts"] = exprs["first_token_ts"] - dur["prefill"]
        if "finish_ts" not in exprs and "e2e" in dur:
            exprs["finish_ts"] = arrival + dur["e2e"]
        if "finish_ts" not in exprs and "decode" in dur and "first_token_ts" in exprs:
            exprs["finish_ts"] = exprs["first_token_ts"] + dur["decode"]
        if "token_times" in m.fields:
            s = m.fields["token_times"]
            exprs["token_times"] = num_list(pl.col(s.column)) * UNIT_SECONDS[s.unit or m.unit]
        elif "itl" in m.fields and "first_token_ts" in exprs:
            s = m.fields["itl"]
            gaps = num_list(pl.col(s.column)) * UNIT_SECONDS[s.unit or m.unit]
            exprs["token_times"] = cum_token_times(exprs["first_token_ts"] - arrival, gaps)
        if "token_counts" in m.fields:
            exprs["token_counts"] = num_list(pl.col(m.fields["token_counts"].column), int_only=True)
        for name in DIRECT:
            if name in m.fields:
                exprs[name] = pl.col(m.fields[name].column)
        if m.status_values and "status" in m.fields:
            st = pl.col(m.fields["status"].column).cast(pl.Utf8)
            mapped = pl.lit(None, pl.Utf8)
            for target, raws in m.status_values.items():
                mapped = pl.when(st.is_in(raws)).then(pl.lit(target)).otherwise(mapped)
            exprs["status"] = mapped
        x = df.with_columns(**{f"_{k}": v for k, v in exprs.items()})
        checks = [
            (pl.col("_arrival_ts").is_null(), "arrival time missing or not in the mapped unit"),
            (bad_count(num(pl.col("_prompt_tokens"))), "prompt_tokens is not a count"),
            (bad_count(num(pl.col("_output_tokens"))), "output_tokens is not a count"),
        ]
        if "status" in exprs:
            checks.append(
                (
                    ~pl.col("_status").is_in(["ok", "error", "cancelled"]),
                    "status value is not mapped to ok/error/cancelled",
                )
            )
        for name in ("first_token_ts", "finish_ts", "scheduled_ts"):
            if name in exprs:
                src = m.fields.get(name)
                col = src.column if src else None
                if col:
                    checks.append(
                        (
                            pl.col(col).is_not_null() & pl.col(f"_{name}").is_null(),
                            f"{name} ({col}) is not a time in the mapped unit/format",
                        )
                    )
        good, q = split_valid(x, checks)
        rid = (
            pl.col("_request_id").cast(pl.Utf8)
            if "request_id" in exprs
            else (pl.col("_line") - 1).cast(pl.Utf8)
        )
        out = good.select(
            *[pl.col(f"_{k}").alias(k) for k in exprs if k not in ("request_id", "run_id")],
            rid.alias("request_id"),
            (
                pl.col("_run_id").cast(pl.Utf8) if "run_id" in exprs else pl.lit(ctx.default_run_id)
            ).alias("run_id"),
            pl.lit(clock).alias("clock"),
            pl.col("_line").alias("source_line"),
        )
        if "output_tokens" in exprs:
            out = out.with_columns(num(pl.col("output_tokens")).cast(pl.Int64, strict=False))
        if "prompt_tokens" in exprs:
            out = out.with_columns(num(pl.col("prompt_tokens")).cast(pl.Int64, strict=False))
        if "status" not in exprs:
            out = out.with_columns(pl.lit("ok").alias("status"))
        quarantine = pl.concat([pre_q, q])
        return ReaderOutput(
            requests=requests_frame(out), quarantine=quarantine if quarantine.height else None
        )


def reader_for_mapping(path: Path | str) -> MappingReader:
    """A reader bound to one mapping file (until ReadContext carries the mapping path)."""
    return MappingReader(load_mapping(Path(path)))


READER = MappingReader()

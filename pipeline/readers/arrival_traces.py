"""Arrival-only traces as mapping definitions: data, not code.

BurstGPT, Splitwise, Mooncake and the Azure traces differ only in which column is which, how the
timestamp is written and how the file is recognised, so each is a TOML file in
``arrival_formats/`` (the vocabulary of a ``--mapping`` file, docs/mapping.md, with
``target = "arrivals"`` and a ``[sniff]`` table) read by one reader: CSV lines split in bounded
batches (``_nfields`` catches ragged lines) or JSON lines parsed by Polars; the timestamp on a
relative / unix clock in a unit, or a UTC date-time; token counts checked; ``t_arrival`` rebased
to the trace's first arrival. A user's own ``--mapping`` file with ``target = "arrivals"`` runs
through the same reader.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from pipeline.readers.base import Capabilities, InputError, ReadContext, ReaderOutput
from pipeline.readers.columns import bad_count, num, num_list, parse_datetime_utc
from pipeline.readers.frames import ARRIVALS_SCHEMA, cast_to_schema, file_quarantine, split_valid
from pipeline.readers.lines import iter_line_batches, parse_ndjson
from pipeline.readers.sniff import csv_header, first_line
from pipeline.readers.units import UNIT_SECONDS

DEFINITIONS = Path(__file__).with_name("arrival_formats")
FIELDS = ("arrival_ts", "prompt_tokens", "output_tokens", "request_id", "prefix_hash_ids")
REQUIRED = ("arrival_ts", "prompt_tokens", "output_tokens")


def split_csv(texts_df: pl.DataFrame, names: Sequence[str]) -> pl.DataFrame:
    """Split a ``_raw`` column of simple CSV lines (no quoted commas) into text columns.

    ``_nfields`` holds the field count so callers can quarantine ragged lines.
    """
    n = len(names)
    parts = pl.col("_raw").str.split_exact(",", n - 1).struct.rename_fields(list(names))
    return texts_df.with_columns(
        (pl.col("_raw").str.count_matches(",") + 1).alias("_nfields"), parts.alias("_parts")
    ).unnest("_parts")


class ArrivalClock:
    """Origin of ``t_arrival``: the earliest arrival of the first batch (traces are time-sorted)."""

    def __init__(self) -> None:
        self.origin: float | None = None

    def rebase(self, t: pl.Series) -> pl.Series:
        if self.origin is None:
            m = t.min()
            self.origin = float(m) if m is not None else None  # type: ignore[arg-type]
        return t - (self.origin or 0.0)


def arrivals_frame(reader: str, ctx: ReadContext, df: pl.DataFrame) -> pl.DataFrame:
    """Conform a frame with request_id, source_line, t_arrival and optional token columns."""
    df = df.with_columns(
        pl.lit(ctx.default_run_id).alias("run_id"),
        pl.lit(reader).alias("source_format"),
        pl.lit(str(ctx.path)).alias("source_file"),
    )
    return cast_to_schema(df, ARRIVALS_SCHEMA)


@dataclass(frozen=True)
class ArrivalMapping:
    """One arrival-only format: how to recognise it and which column is which."""

    name: str
    format: str  # csv | jsonl
    fields: dict[str, str]  # canonical name -> input column
    clock: str = "relative"  # relative | unix | datetime
    unit: str = "s"
    description: str = ""
    priority: int = 50
    headers: tuple[tuple[str, ...], ...] = ()  # csv: the header layouts it reads (by name)
    keys: tuple[str, ...] = ()  # jsonl: keys the first line holds
    # (header prefix, why): files recognised as this tool's but holding no arrivals
    skips: tuple[tuple[tuple[str, ...], str], ...] = field(default=())


class MappingFileError(InputError):
    """An arrival mapping file itself is wrong."""


def load_arrival_mapping(path: Path, raw: dict | None = None) -> ArrivalMapping:
    """Parse and check an arrival mapping (``raw``: its TOML already read)."""
    if raw is None:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise MappingFileError(f"mapping file {path}: {exc}") from exc

    def bad(msg: str) -> MappingFileError:
        return MappingFileError(f"mapping {path}: {msg}")

    fmt = raw.get("format")
    if fmt not in ("csv", "jsonl"):
        raise bad('target = "arrivals" reads format = "csv" or "jsonl"')
    fields = raw.get("fields") or {}
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise bad(f"unknown arrival field(s) {unknown}; known: {', '.join(FIELDS)}")
    missing = [f for f in REQUIRED if not isinstance(fields.get(f), str)]
    if missing:
        raise bad(f"[fields] must map {', '.join(missing)} (column names)")
    time = raw.get("time") or {}
    clock, unit = time.get("clock", "relative"), time.get("unit", "s")
    if clock not in ("relative", "unix", "datetime"):
        raise bad("[time] clock must be relative, unix or datetime")
    if unit not in UNIT_SECONDS:
        raise bad(f"unknown unit {unit!r} (use s, ms, us or ns)")
    sniff = raw.get("sniff") or {}
    return ArrivalMapping(
        name=str(raw.get("name") or "mapping"),
        format=fmt,
        fields={k: str(v) for k, v in fields.items()},
        clock=clock,
        unit=unit,
        description=str(raw.get("description") or ""),
        priority=int(raw.get("priority", 50)),
        headers=tuple(tuple(h) for h in sniff.get("headers", ())),
        keys=tuple(sniff.get("keys", ())),
        skips=tuple((tuple(s["header_prefix"]), str(s["reason"])) for s in raw.get("skip", ())),
    )


class ArrivalMappingReader:
    """The one reader of arrival-only traces, bound to one :class:`ArrivalMapping`."""

    capabilities = Capabilities(
        per_request=False, per_token=False, arrivals_only=True, gpu_model_present=False
    )

    def __init__(self, mapping: ArrivalMapping) -> None:
        self.mapping = mapping
        self.name, self.description = mapping.name, mapping.description

    def sniff(self, path: Path, head: bytes) -> bool:
        m = self.mapping
        if m.format == "csv":
            h = tuple(csv_header(head))
            return h in m.headers or any(h[: len(p)] == p for p, _ in m.skips)
        line = first_line(head)
        return bool(m.keys) and line.startswith("{") and all(f'"{k}"' in line for k in m.keys)

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        m = self.mapping
        header: tuple[str, ...] = ()
        if m.format == "csv":
            from pipeline.files.sources import read_head

            header = tuple(csv_header(read_head(ctx.path)))
            for prefix, reason in m.skips:
                if header[: len(prefix)] == prefix:
                    yield file_quarantine(reason, ",".join(header))
                    return
            if m.headers and header not in m.headers:
                raise InputError(f"{m.name} header not recognised: {','.join(header)}")
            absent = sorted(set(m.fields.values()) - set(header))
            if absent:
                raise InputError(f"columns named in the mapping are not in the header: {absent}")
        clock = ArrivalClock()
        for nums, texts in iter_line_batches(ctx, skip_header=m.format == "csv"):
            yield self._convert(m, ctx, nums, texts, header, clock)

    def _convert(  # internal columns start with "_" so that no input column can shadow them
        self,
        m: ArrivalMapping,
        ctx: ReadContext,
        nums: pl.Series,
        texts: pl.Series,
        header: tuple[str, ...],
        clock: ArrivalClock,
    ) -> ReaderOutput:
        f = m.fields
        checks: list[tuple[pl.Expr, str]] = []
        if m.format == "csv":
            df = split_csv(pl.DataFrame({"_line": nums, "_raw": texts}), header)
            q0 = None
            checks.append((pl.col("_nfields") != len(header), f"expected {len(header)} fields"))
        else:
            df, q0 = parse_ndjson(nums, texts, sorted(set(f.values())))
        t_col = pl.col(f["arrival_ts"])
        cols = [
            num(pl.col(f["prompt_tokens"])).alias("_p"),
            num(pl.col(f["output_tokens"])).alias("_o"),
        ]
        if m.clock == "datetime":
            cols.append(parse_datetime_utc(t_col).alias("_arrival_at"))
        else:
            cols.append((num(t_col) * UNIT_SECONDS[m.unit]).alias("_t"))
        if "request_id" in f:
            cols.append(pl.col(f["request_id"]).str.strip_chars().alias("_rid"))
            checks.append((pl.col("_rid").fill_null("") == "", f"{f['request_id']} is empty"))
        if "prefix_hash_ids" in f:
            cols.append(num_list(pl.col(f["prefix_hash_ids"]), int_only=True).alias("_h"))
        df = df.with_columns(cols)
        if m.clock == "datetime":
            checks.append(
                (pl.col("_arrival_at").is_null(), f"{f['arrival_ts']} is not a date-time")
            )
        else:
            checks.append(
                (
                    pl.col("_t").is_null() | ~pl.col("_t").is_finite(),
                    f"{f['arrival_ts']} is not a number",
                )
            )
        checks += [
            (bad_count(pl.col("_p")), f"{f['prompt_tokens']} is not a whole number >= 0"),
            (bad_count(pl.col("_o")), f"{f['output_tokens']} is not a whole number >= 0"),
        ]
        if "prefix_hash_ids" in f:
            checks.append(
                (
                    pl.col(f["prefix_hash_ids"]).is_not_null() & pl.col("_h").is_null(),
                    f"{f['prefix_hash_ids']} is not a list of integers",
                )
            )
        good, q = split_valid(df, checks)
        if m.clock == "datetime":
            good = good.with_columns(
                (pl.col("_arrival_at").dt.epoch("us").cast(pl.Float64) / 1e6).alias("_t")
            )
        out = good.with_columns(clock.rebase(good["_t"]).alias("t_arrival")).select(
            (pl.col("_rid") if "request_id" in f else (pl.col("_line") - 1).cast(pl.Utf8)).alias(
                "request_id"
            ),
            pl.col("_line").alias("source_line"),
            "t_arrival",
            *([pl.col("_arrival_at").alias("arrival_at")] if m.clock == "datetime" else []),
            pl.col("_p").cast(pl.Int64, strict=False).alias("prompt_tokens"),
            pl.col("_o").cast(pl.Int64, strict=False).alias("output_tokens"),
            *([pl.col("_h").alias("prefix_hash_ids")] if "prefix_hash_ids" in f else []),
        )
        quarantine = pl.concat([q0, q]) if q0 is not None and q0.height else q
        return ReaderOutput(
            arrivals=arrivals_frame(m.name, ctx, out),
            quarantine=quarantine if quarantine.height else None,
        )


# The shipped definitions, one reader each (the registry reads READERS and their priorities).
_SHIPPED = [load_arrival_mapping(p) for p in sorted(DEFINITIONS.glob("*.toml"))]
READERS = tuple(ArrivalMappingReader(m) for m in _SHIPPED)
PRIORITIES = {m.name: m.priority for m in _SHIPPED}

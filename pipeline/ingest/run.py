"""Ingest files into the warehouse: detect, read, validate, deduplicate, commit atomically.

Counts always add up, per file: ``read = ingested + quarantined + duplicates + arrivals +
excluded`` (excluded: records the tool marks as outside its measurement, e.g. warmup). A file
that cannot be read at all (binary, unknown format, a reader failure) counts as one quarantined
record with line 0; a truncated compressed file keeps the records before the damage and adds one
quarantined record for the lost tail.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import hashlib
import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import polars as pl

from pipeline.files.sources import (
    HEAD_BYTES,
    discover,
    is_binary,
    iter_blocks,
    read_head,
    sha256_file,
)
from pipeline.ingest import metadata
from pipeline.ingest.validate import validate
from pipeline.readers.base import InputError, ReadContext, Reader, ReaderOutput
from pipeline.readers.base import file_run_id as default_run_id
from pipeline.readers.companions import companion_reason
from pipeline.readers.registry import by_name, detect
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.writer import StagedWrite, recover

_TAGS = itertools.count()


def _blank(path: Path, size: int) -> bool:
    """An empty file, or one of blank lines only (after decompression, BOM removed)."""
    if size == 0:
        return True
    try:
        head = read_head(path)
    except InputError:
        return False
    if head.strip():
        return False
    return len(head) < HEAD_BYTES or not any(block.strip() for block in iter_blocks(path))


class _AlreadyIngested(Exception):
    """The file's content hash turned out to be committed already."""


COUNT_KEYS = (
    "read", "ingested", "quarantined", "duplicates", "arrivals", "excluded", "tokens", "summaries",
)  # fmt: skip
_HASH_SEED = 0x5EED


@dataclass
class FileResult:
    path: Path
    # ingested | quarantined (every record refused) | already | empty | skipped (a companion)
    status: str
    format: str | None = None
    sha256: str | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0))
    message: str = ""
    excluded: dict[str, int] = field(default_factory=dict)  # reason -> records (warmup ...)


@dataclass
class IngestOptions:
    fmt: str | None = None
    sets: dict[str, object] = field(default_factory=dict)
    max_line_bytes: int = 32 * 1024 * 1024
    mapping: Path | None = None
    manifest: Path | None = None  # a run manifest for every file (else the one beside each)
    # Read files already ingested again and replace their rows (corrected --set / manifest
    # metadata), atomically: the new manifest generation is the commit point.
    reingest: bool = False


def _key_hash(df: pl.DataFrame) -> np.ndarray:
    return df.select(pl.struct("run_id", "request_id").hash(seed=_HASH_SEED)).to_series().to_numpy()


def _merge_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The union of two sorted arrays of unique keys, sorted, in linear time: a stable sort of
    two sorted runs is one merge (timsort finds the runs). ``np.union1d`` hashed and sorted
    everything again: 1.5 s of a 1,000,000-request ingest."""
    merged = np.sort(np.concatenate((a, b)), kind="stable")
    if len(merged) < 2:
        return merged
    keep = np.empty(len(merged), dtype=bool)
    keep[0] = True
    np.not_equal(merged[1:], merged[:-1], out=keep[1:])
    return merged[keep]


class _Dedup:
    """Remembers (run_id, request_id) keys seen in this file and already in the warehouse.

    Keys are 64-bit hashes in a few sorted numpy arrays of doubling sizes (merged like a binary
    counter), so membership is a handful of binary searches and adding a batch costs amortised
    O(log n) per key: no Python object per key, no re-sorting of everything per batch.
    """

    # A run's lock is held from reading its stored keys until this file commits, so two workers
    # whose files share a run cannot both keep the same request. Files holding several runs in
    # opposite orders could wait on each other: after this long, go on without the lock.
    RUN_LOCK_TIMEOUT_S = 600.0

    def __init__(self, layout: Layout):
        self.layout = layout
        self.levels: list[np.ndarray] = []
        self.runs_loaded: set[str] = set()
        self.held = contextlib.ExitStack()
        self.unlocked: list[str] = []  # runs whose lock timed out (dedup across workers inexact)
        self.ignore: set[str] = set()  # committed files of the file being re-ingested

    def close(self) -> None:
        """Release the run locks (after the commit)."""
        self.held.close()

    def _remember(self, keys: np.ndarray) -> None:
        if len(keys) == 0:
            # An empty level broke the next search (index -1 of nothing): a batch made only of
            # duplicates used to fail the whole file (found by the property test).
            return
        self.levels.append(np.unique(keys))
        while len(self.levels) > 1 and len(self.levels[-1]) >= len(self.levels[-2]):
            top = self.levels.pop()
            self.levels[-1] = _merge_sorted(self.levels[-1], top)

    def _known(self, keys: np.ndarray) -> np.ndarray:
        # Searched in sorted order: each search starts near the last one (half the time of
        # searching hashes in arrival order, measured on a million-key level).
        order = np.argsort(keys)
        ordered = keys[order]
        hit = np.zeros(len(keys), dtype=bool)
        for level in self.levels:
            idx = np.minimum(np.searchsorted(level, ordered), len(level) - 1)
            hit |= level[idx] == ordered
        found = np.empty(len(keys), dtype=bool)
        found[order] = hit
        return found

    def _load_run(self, run_ids: list[str]) -> None:
        new = [r for r in run_ids if r not in self.runs_loaded]
        if not new:
            return
        self.runs_loaded.update(new)
        for run in new:
            name = "run-" + hashlib.sha1(run.encode()).hexdigest()[:16]
            got = self.held.enter_context(self.layout.lock(name, timeout=self.RUN_LOCK_TIMEOUT_S))
            if not got:
                self.unlocked.append(run)
        files = [
            str(p) for p in self.layout.committed_files("requests") if str(p) not in self.ignore
        ]
        if not files:
            return
        existing = (
            duckdb.connect()
            .sql(
                "SELECT run_id, request_id FROM read_parquet(?) WHERE list_contains(?, run_id)",
                params=[files, new],
            )
            .pl()
        )
        if existing.height:
            self._remember(_key_hash(existing))

    def split(self, df: pl.DataFrame) -> tuple[pl.DataFrame, int]:
        """Rows whose key is new, and how many duplicates were dropped."""
        if df.height == 0:
            return df, 0
        self._load_run(df["run_id"].unique().to_list())
        keys = _key_hash(df)
        first = df.select(pl.struct("run_id", "request_id").is_first_distinct()).to_series()
        fresh = first.to_numpy() & ~self._known(keys)
        self._remember(keys[fresh])
        dropped = int((~fresh).sum())
        return (df.filter(pl.Series(fresh)) if dropped else df), dropped


def _quarantine_frame(q: pl.DataFrame, source_file: str, fmt: str, sha: str) -> pl.DataFrame:
    return q.select(
        source_file=pl.lit(source_file),
        source_format=pl.lit(fmt),
        line=pl.col("line").cast(pl.Int64),
        reason=pl.col("reason"),
        raw=pl.col("raw").str.slice(0, 64 * 1024),
        file_sha256=pl.lit(sha),
    )


def _with_source(df: pl.DataFrame | None, source_file: str, fmt: str) -> pl.DataFrame | None:
    if df is None or df.height == 0:
        return None
    return df.with_columns(source_file=pl.lit(source_file), source_format=pl.lit(fmt))


def _merge_metadata(runs: pl.DataFrame, tables: dict[str, dict[str, object]]) -> pl.DataFrame:
    """Add a manifest's tables ([disaggregation]) to each run's metadata_json."""
    merged = []
    for text in runs["metadata_json"].to_list():
        meta = json.loads(text) if text else {}
        merged.append(json.dumps({**meta, **tables}, sort_keys=True))
    return runs.with_columns(pl.Series("metadata_json", merged, dtype=pl.Utf8))


def _arrivals(df: pl.DataFrame | None, source_file: str, fmt: str) -> pl.DataFrame | None:
    df = _with_source(df, source_file, fmt)
    if df is None:
        return None
    day = pl.col("arrival_at").dt.strftime("%Y-%m-%d").fill_null("unknown")
    return df.with_columns(day=day)


class Ingestor:
    def __init__(
        self,
        layout: Layout,
        options: IngestOptions,
        on_batch: Callable[[int], None] | None = None,
    ):
        self.layout = layout
        self.options = options
        self.on_batch = on_batch or (lambda n: None)
        layout.ensure()

    # -- file level ----------------------------------------------------------------------
    def known_sha(self) -> dict[tuple[str, int, int], str]:
        return {
            (m.get("path", ""), m.get("size", -1), m.get("mtime_ns", -1)): m["sha256"]
            for m in self.layout.manifests()
        }

    def ingest_file(self, path: Path, known: dict | None = None) -> FileResult:
        st = path.stat()
        ident = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        sha = (known or {}).get(ident)
        result = FileResult(path=path, status="already", sha256=sha)
        if not self.options.fmt:
            try:
                reason = companion_reason(path, read_head(path))
            except InputError:
                reason = None
            if reason is not None:
                result.status, result.message = "skipped", f"not a log: {reason}"
                return result
        if _blank(path, st.st_size):
            # Nothing to ingest and nothing to remember: every empty file has the same hash, so
            # a manifest would make the next empty file "already ingested".
            result.status, result.message = "empty", "empty file (no records), nothing to ingest"
            return result
        if (
            sha is not None
            and self.layout.manifest_file(sha).exists()
            and not self.options.reingest
        ):
            result.message = "already ingested (same content hash)"
            return result
        # A new file is hashed on another thread while it is read (the hash names the committed
        # files and makes re-ingest a no-op); the rows are staged under a private tag meanwhile.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            digest = pool.submit(lambda: sha or sha256_file(path))
            tag = f"t{os.getpid()}-{next(_TAGS)}"
            with self.layout.lock(tag):  # keeps recover() away from our staging folder
                return self._ingest_staged(path, digest, tag, ident, result)

    def _already(self) -> bool:
        """The hash is known and names a committed file: no need to read on."""
        if self.options.reingest:
            return False
        d = self._digest
        return d.done() and d.exception() is None and self.layout.manifest_file(d.result()).exists()

    def _ingest_staged(
        self,
        path: Path,
        digest: concurrent.futures.Future,
        tag: str,
        ident: tuple,
        result: FileResult,
    ) -> FileResult:
        source = str(path)
        staged = StagedWrite(self.layout, tag=tag)
        self._digest = digest
        counts = result.counts
        fmt = self.options.fmt or "unknown"
        self._counts = dict.fromkeys(COUNT_KEYS, 0)
        self._excluded: dict[str, int] = {}
        self._dedup: _Dedup | None = None
        try:
            try:
                head = read_head(path)
            except InputError as exc:
                head, result.message = None, str(exc)
            reader: Reader | None = None
            if head is not None and len(head) == 0:
                result.status, result.message = "empty", "empty file, nothing to ingest"
            elif head is None:
                self._file_problem(staged, source, fmt, f"cannot read file: {result.message}")
            elif is_binary(head):
                self._file_problem(
                    staged,
                    source,
                    fmt,
                    "binary file (mostly control bytes in its first 64 KiB), not a text log",
                )
            else:
                reader = by_name(self.options.fmt) if self.options.fmt else detect(path, head)
                if reader is None:
                    self._file_problem(
                        staged,
                        source,
                        fmt,
                        "unrecognised format; force one with --reader NAME "
                        "(`pipeline formats` lists them) or describe it with a mapping file",
                    )
            if reader is not None and head is not None:
                fmt = reader.name
                self._read_all(reader, path, head, ident[1], staged, fmt)
            sha = result.sha256 = digest.result()
            # Commit under the content's lock: a worker ingesting the same bytes under another
            # name, or a recovery of a killed run of them, is done before we look.
            with self.layout.lock(sha[:16], blocking=True):
                previous = self.layout.manifest(sha)
                if previous is not None and not self.options.reingest:
                    raise _AlreadyIngested
                kept = set(previous["files"]) if previous else set()
                generation = int(previous.get("generation", 0)) + 1 if previous else 0
                for orphan in self.layout.data_files_of(sha[:16]):
                    if str(orphan.relative_to(self.layout.root)) not in kept:
                        orphan.unlink(missing_ok=True)  # left by a killed run of this file
                counts.update({k: counts.get(k, 0) + v for k, v in self._counts.items()})
                result.excluded = dict(self._excluded)
                if result.status != "empty":
                    landed = counts["ingested"] + counts["arrivals"] + counts["summaries"]
                    # Every record refused: say so rather than "ingested" (the manifest still
                    # records the file, so a re-run does not read it again).
                    result.status = (
                        "ingested" if landed or not counts["quarantined"] else ("quarantined")
                    )
                result.format = fmt
                staged.commit(
                    {
                        "sha256": sha,
                        "path": ident[0],
                        "size": ident[1],
                        "mtime_ns": ident[2],
                        "format": fmt,
                        "counts": counts,
                        "status": result.status,
                        "ingested_at": dt.datetime.now(dt.UTC).isoformat(),
                        "generation": generation,
                    },
                    sha,
                    generation=generation,
                )
                # The new manifest is committed: the previous generation's files go.
                for rel in kept - set(self.layout.manifest(sha)["files"]):
                    (self.layout.root / rel).unlink(missing_ok=True)
        except _AlreadyIngested:
            staged.abort()
            result.status, result.format = "already", None
            result.counts = dict.fromkeys(COUNT_KEYS, 0)
            result.message = "already ingested (same content hash)"
        except BaseException:
            staged.abort()
            raise
        finally:
            if self._dedup is not None:  # run locks are held until the commit is done
                if self._dedup.unlocked:
                    result.message = (
                        "run lock timed out, duplicates across concurrent workers possible for: "
                        + ", ".join(self._dedup.unlocked[:3])
                    )
                self._dedup.close()
        return result

    def _sha(self) -> str:
        """The file's content hash (waits for the hashing thread)."""
        return self._digest.result()

    def _file_problem(self, staged: StagedWrite, source: str, fmt: str, reason: str):
        q = pl.DataFrame(
            {"line": [0], "reason": [reason], "raw": [None]},
            schema={"line": pl.Int64, "reason": pl.Utf8, "raw": pl.Utf8},
        )
        staged.add("quarantine", _quarantine_frame(q, source, fmt, self._sha()))
        self._counts.update(read=1, quarantined=1)

    def _read_all(
        self, reader: Reader, path: Path, head: bytes, size: int, staged: StagedWrite, fmt: str
    ):
        source = str(path)
        self._reader = reader
        c = dict.fromkeys(COUNT_KEYS, 0)
        ctx = ReadContext(
            path=path,
            default_run_id=default_run_id(path, head, size),
            max_line_bytes=self.options.max_line_bytes,
            mapping=self.options.mapping,
        )
        fill = {**metadata.run_manifest(path, self.options.manifest), **self.options.sets}
        self._tables = metadata.manifest_tables(path, self.options.manifest)
        self._runs_seen = False
        self._run_ids: set[str] = set()
        dedup = self._dedup = _Dedup(self.layout)
        if self.options.reingest:  # this file's own earlier rows are not duplicates of it
            known = self.layout.manifest(self._digest.result())
            dedup.ignore = {str(self.layout.root / f) for f in (known or {}).get("files", [])}
        last_line = 0
        try:
            for out in reader.read(ctx):
                last_line = max(last_line, self._batch(out, ctx, fill, dedup, staged, c, fmt))
                if self._already():  # a renamed copy of a file already in: stop reading it
                    raise _AlreadyIngested
        except InputError as exc:
            self._add_quarantine(staged, c, source, fmt, last_line + 1, f"input ends early: {exc}")
        except _AlreadyIngested:
            raise
        except Exception as exc:  # a reader bug must not lose the file nor show a traceback
            staged.reset()
            c = dict.fromkeys(COUNT_KEYS, 0)
            self._add_quarantine(
                staged,
                c,
                source,
                fmt,
                0,
                f"reader {fmt!r} failed on this file ({type(exc).__name__}: {exc}); "
                "please report it with the file",
            )
        if self._tables and not self._runs_seen and c["ingested"]:
            # The reader wrote no runs row: one per run id the file's rows name carries the
            # tables (our JSONL names its own run ids: a generated DistServe trace's manifest
            # went to the file's default id, which no request had).
            from pipeline.readers.frames import runs_frame

            ids = sorted(self._run_ids) or [ctx.default_run_id]
            row = runs_frame(fmt, ctx, [{"run_id": i, "metadata": self._tables} for i in ids])
            staged.add("runs", _with_source(row, source, fmt))
        self._counts = c

    def _add_quarantine(self, staged, c, source, fmt, line, reason) -> None:
        q = pl.DataFrame(
            {"line": [line], "reason": [reason], "raw": [None]},
            schema={"line": pl.Int64, "reason": pl.Utf8, "raw": pl.Utf8},
        )
        staged.add("quarantine", _quarantine_frame(q, source, fmt, self._sha()))
        c["read"] += 1
        c["quarantined"] += 1

    def _batch(
        self,
        out: ReaderOutput,
        ctx: ReadContext,
        fill: dict[str, object],
        dedup: _Dedup,
        staged: StagedWrite,
        c: dict[str, int],
        fmt: str,
    ) -> int:
        source = str(ctx.path)
        last_line = 0
        if out.quarantine is not None and out.quarantine.height:
            staged.add("quarantine", _quarantine_frame(out.quarantine, source, fmt, self._sha()))
            c["read"] += out.quarantine.height
            c["quarantined"] += out.quarantine.height
            last_line = int(out.quarantine["line"].max() or 0)
        if out.requests is not None and out.requests.height:
            req = out.requests.with_columns(pl.col("run_id").fill_null(ctx.default_run_id))
            req = metadata.apply_metadata(req, fill)
            c["read"] += req.height
            last_line = max(last_line, int(req["source_line"].max() or 0))
            req, dups = dedup.split(req)
            c["duplicates"] += dups
            v = validate(req, fmt, source, getattr(self._reader, "required_fields", ()))
            staged.add("requests", v.requests)
            if self._tables:  # the runs the manifest's tables describe: those the rows name
                self._run_ids.update(v.requests["run_id"].unique().to_list())
            if v.rejected.height:  # the hash is only awaited when a row needs it
                staged.add("quarantine", _quarantine_frame(v.rejected, source, fmt, self._sha()))
            c["ingested"] += v.requests.height
            c["tokens"] += v.emissions
            c["quarantined"] += v.rejected.height
            self.on_batch(req.height)
        if out.excluded is not None and out.excluded.height:
            c["read"] += out.excluded.height
            c["excluded"] += out.excluded.height
            last_line = max(last_line, int(out.excluded["line"].max() or 0))
            for why, n in out.excluded.group_by("reason").len().iter_rows():
                self._excluded[why] = self._excluded.get(why, 0) + n
        if out.arrivals is not None and out.arrivals.height:
            staged.add("arrivals", _arrivals(out.arrivals, source, fmt))
            c["read"] += out.arrivals.height
            c["arrivals"] += out.arrivals.height
        runs = out.runs
        if self._tables and runs is not None and runs.height:
            runs = _merge_metadata(runs, self._tables)
            self._runs_seen = True
        staged.add("runs", _with_source(runs, source, fmt))
        if out.run_summaries is not None:
            staged.add("run_summaries", _with_source(out.run_summaries, source, fmt))
            c["summaries"] += out.run_summaries.height
        return last_line


# Files in a log folder that are documentation or generator ground truth, not logs.
_NOT_LOGS = (".md", ".rst", ".pdf", ".png", ".jpg", ".html", ".truth.json")


def input_files(paths: list[Path]) -> list[Path]:
    """Input files under paths; run manifests and documentation are not inputs."""
    return [
        p
        for p in discover(paths)
        if not metadata.is_manifest(p) and not p.name.lower().endswith(_NOT_LOGS)
    ]


def ingest_paths(
    paths: list[Path],
    layout: Layout,
    options: IngestOptions | None = None,
    on_file: Callable[[FileResult], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[FileResult]:
    ing = Ingestor(layout, options or IngestOptions(), on_batch)
    recover(layout)
    known = ing.known_sha()
    results = []
    for p in input_files(paths):
        r = ing.ingest_file(p, known)
        results.append(r)
        if on_file:
            on_file(r)
    return results


def totals(results: list[FileResult]) -> dict[str, int]:
    t = dict.fromkeys(COUNT_KEYS, 0)
    for r in results:
        if r.status in ("ingested", "empty", "quarantined"):
            for k in COUNT_KEYS:
                t[k] += r.counts.get(k, 0)
    t["files"] = len(results)
    t["already"] = sum(r.status == "already" for r in results)
    t["skipped"] = sum(r.status == "skipped" for r in results)
    return t

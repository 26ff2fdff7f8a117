"""Stage one input file's rows as Parquet, then move them into the warehouse and commit."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import threading

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.schema.tables import PARTITIONED, arrow_schema
from pipeline.warehouse.arrow import to_arrow
from pipeline.warehouse.layout import Layout

# Tests set this to die by SIGKILL at a named step of a commit, to prove a re-run recovers.
_CRASH_ENV = "PIPELINE_TEST_CRASH_AT"

# Snappy over byte-stream-split floats: measured on 22,613 requests with 4.9 M token times
# (bench trace), snappy 86 ms / 47.6 MiB against zstd-1 168 ms / 45.1 MiB. Once the floats are
# split into byte streams there is little left for zstd to find, and on two cores the encoder's
# CPU is ingest's time.
COMPRESSION = "snappy"
COMPRESSION_LEVEL = None


class StagedWrite:
    """One ParquetWriter per (table, day) under _staging/<sha16>; row groups per batch.

    Parquet encoding runs on a background thread (pyarrow releases the GIL) so it overlaps with
    parsing the next batch. At most QUEUE batches wait, so memory stays bounded.
    """

    QUEUE = 2

    def __init__(self, layout: Layout, sha: str | None = None, tag: str | None = None):
        """Stage under _staging/<tag> (default: the first 16 hex digits of ``sha``).

        The content hash may be unknown while staging (ingest hashes the file on another
        thread): the final file names, part-<sha16>-<n>, are given at commit.
        """
        self.layout = layout
        self.sha = sha
        self.tag = tag or (sha or "")[:16]
        if not self.tag:
            raise ValueError("StagedWrite needs a sha or a tag")
        self.dir = layout.staging_dir / self.tag
        self._thread: threading.Thread | None = None
        self.reset()

    def reset(self) -> None:
        """Drop everything staged so far and start again empty."""
        self._stop_thread(raise_error=False)
        for writer, _ in getattr(self, "_writers", {}).values():
            writer.close()
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        self._writers: dict[tuple[str, str | None], tuple[pq.ParquetWriter, str]] = {}
        self.rows: dict[str, int] = {}
        self._queue: queue.Queue = queue.Queue(maxsize=self.QUEUE)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="parquet-writer", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._add_now(*item)
                except BaseException as exc:  # surfaced on the caller's thread
                    self._error = exc

    def _stop_thread(self, raise_error: bool = True) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if raise_error and self._error is not None:
            raise self._error

    def add(self, table: str, df: pl.DataFrame | None) -> None:
        if df is None or df.height == 0:
            return
        if self._error is not None:
            raise self._error
        self.rows[table] = self.rows.get(table, 0) + df.height
        self._queue.put((table, df))

    def _add_now(self, table: str, df: pl.DataFrame) -> None:
        if table in PARTITIONED:
            days = df["day"].unique()
            if len(days) == 1:  # the common case; partition_by would copy every column
                self._write(table, str(days[0]), df)
                return
            for (day,), part in df.partition_by("day", as_dict=True, maintain_order=True).items():
                self._write(table, str(day), part)
        else:
            self._write(table, None, df)

    def _write(self, table: str, day: str | None, df: pl.DataFrame) -> None:
        key = (table, day)
        if key not in self._writers:
            rel = self.layout.relative_dir(table, day)  # a folder; the file is named at commit
            path = self.dir / rel / "staged.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(path, arrow_schema(table), **_encoding(table))
            self._writers[key] = (writer, rel)
        writer, _ = self._writers[key]
        writer.write_table(to_arrow(df, table), row_group_size=1 << 20)

    def commit(
        self, manifest_entry: dict, sha: str | None = None, generation: int = 0
    ) -> list[str]:
        """Move staged files into place, then write the manifest entry (the commit point).

        The caller holds the lock of ``sha[:16]`` (its orphans and ours share file names).
        """
        sha = sha or self.sha
        if sha is None:
            raise ValueError("commit needs the content hash")
        self._stop_thread()
        moves = []
        for writer, folder in self._writers.values():
            writer.close()
            # A re-ingest writes a new generation beside the committed one (other file names),
            # so readers see the old manifest's files or the new one's, never a mix.
            moves.append((folder, f"{folder}/{self.layout.part_name(sha, generation)}"))
        rels = [rel for _, rel in moves]
        crash_point("before_commit")
        for i, (folder, rel) in enumerate(moves):
            if i == 1:
                crash_point("mid_rename")
            dest = self.layout.root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = self.dir / folder / "staged.parquet"
            with open(src, "rb") as f:
                os.fsync(f.fileno())
            os.replace(src, dest)
        crash_point("before_manifest")
        self.layout.write_manifest(sha, {**manifest_entry, "files": sorted(rels)})
        crash_point("after_manifest")
        shutil.rmtree(self.dir, ignore_errors=True)
        return rels

    def abort(self) -> None:
        self._stop_thread(raise_error=False)
        for writer, _ in self._writers.values():
            with contextlib.suppress(Exception):
                writer.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _encoding(table: str) -> dict:
    """Dictionary-encode strings (ids repeat per token); byte-stream-split floats (timings
    compress ~3x better and write faster than dictionary pages)."""
    schema = arrow_schema(table)
    strings = [f.name for f in schema if pa.types.is_string(f.type)]
    # A list's values are the leaf column "<name>.list.element": options keyed by the list's own
    # name do not reach it (token times were written PLAIN until 2026-12-07: 456 MiB against
    # 295 MiB byte-stream-split, and slower, for 60 M replayed times).
    floats = [f.name for f in schema if pa.types.is_floating(f.type)] + [
        f"{f.name}.list.element"
        for f in schema
        if pa.types.is_list(f.type) and pa.types.is_floating(f.type.value_type)
    ]
    return {
        "compression": COMPRESSION,
        "compression_level": COMPRESSION_LEVEL,
        "use_dictionary": strings,
        "column_encoding": dict.fromkeys(floats, "BYTE_STREAM_SPLIT"),
    }


def crash_point(name: str) -> None:
    """Die by SIGKILL here when the test environment names this step (recovery tests)."""
    if os.environ.get(_CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def empty_table(table: str) -> pa.Table:
    return arrow_schema(table).empty_table()


def recover(layout: Layout) -> int:
    """Delete what killed writers (ingest, replay write-back) left behind: staged folders and
    data files no manifest lists, unless their writer is still alive (holds its lock). The
    recovery step of the one commit protocol; returns the data files removed."""
    removed = 0
    for sha16, files in layout.orphans().items():
        with layout.lock(sha16) as got:
            # Re-check under the lock: a live worker may have committed this file since we
            # listed the orphans, and files its manifest now lists must not be deleted.
            if not got:
                continue
            listed = {
                str(layout.root / rel)
                for m in (
                    json.loads(p.read_text()) for p in layout.manifest_dir.glob(f"{sha16}*.json")
                )
                for rel in m.get("files", [])
            }
            for f in files:
                if str(f) not in listed:
                    f.unlink(missing_ok=True)
                    removed += 1
    if layout.staging_dir.exists():
        for d in layout.staging_dir.iterdir():
            with layout.lock(d.name) as got:
                if got:
                    shutil.rmtree(d, ignore_errors=True)
    return removed

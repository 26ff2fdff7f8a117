"""Where things live in the warehouse, and the manifest that says what is committed.

::

    warehouse/
      requests/day=2026-11-02/part-<sha16>-<n>.parquet   Hive-partitioned by arrival day
      tokens/day=.../ arrivals/day=.../                   likewise
      quarantine/ runs/ run_summaries/                    unpartitioned
      _manifest/<sha256>.json   one per ingested input file: its counts and the data files it wrote
      _staging/ _locks/         in-flight work; never read by queries

A data file is visible only once its input's manifest entry exists (the commit point), so a killed
ingest never shows half a file, and a re-run replaces whatever the killed one left.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.schema.tables import PARTITIONED, TABLES

DEFAULT_WAREHOUSE = "warehouse"
PART_RE = re.compile(r"^part-([0-9a-f]{16})-\d+\.parquet$")


def warehouse_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    return Path(explicit or os.environ.get("PIPELINE_WAREHOUSE") or DEFAULT_WAREHOUSE)


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def manifest_dir(self) -> Path:
        return self.root / "_manifest"

    @property
    def staging_dir(self) -> Path:
        return self.root / "_staging"

    @property
    def locks_dir(self) -> Path:
        return self.root / "_locks"

    def table_dir(self, table: str) -> Path:
        return self.root / table

    def ensure(self) -> None:
        for d in (self.manifest_dir, self.staging_dir, self.locks_dir):
            d.mkdir(parents=True, exist_ok=True)

    def part_name(self, sha: str, n: int) -> str:
        return f"part-{sha[:16]}-{n}.parquet"

    def relative_dir(self, table: str, day: str | None) -> str:
        return f"{table}/day={day}" if table in PARTITIONED else table

    # -- manifest -----------------------------------------------------------------------
    def manifest_file(self, sha: str) -> Path:
        return self.manifest_dir / f"{sha}.json"

    def manifest(self, sha: str) -> dict | None:
        """The committed entry of one file's content, or None."""
        try:
            return json.loads(self.manifest_file(sha).read_text())
        except (OSError, ValueError):
            return None

    def manifests(self) -> list[dict]:
        if not self.manifest_dir.exists():
            return []
        out = []
        for p in sorted(self.manifest_dir.glob("*.json")):
            try:
                out.append(json.loads(p.read_text()))
            except (OSError, ValueError):
                continue  # a manifest is written by rename, so a partial one cannot exist
        return out

    def committed_files(self, table: str) -> list[Path]:
        files = [
            self.root / rel
            for m in self.manifests()
            for rel in m.get("files", [])
            if rel.split("/", 1)[0] == table
        ]
        return sorted(files)

    def write_manifest(self, sha: str, entry: dict) -> None:
        """The commit point: atomic rename of a fully written, fsynced file."""
        tmp = self.manifest_dir / f".{sha}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(entry, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.manifest_file(sha))
        fsync_dir(self.manifest_dir)

    # -- locks and recovery ---------------------------------------------------------------
    @contextmanager
    def lock(
        self, name: str, blocking: bool = False, timeout: float | None = None
    ) -> Iterator[bool]:
        """An flock on _locks/<name>.lock; yields False if another process holds it (after
        waiting up to ``timeout`` seconds when given, forever when ``blocking``).

        The kernel drops the lock when its holder dies, so a SIGKILLed ingest never leaves a
        stale lock behind.
        """
        self.locks_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.locks_dir / f"{name}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            if not _flock(fd, blocking, timeout):
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def data_files_of(self, sha16: str) -> list[Path]:
        return [
            p
            for table in TABLES
            if self.table_dir(table).exists()
            for p in self.table_dir(table).rglob(f"part-{sha16}-*.parquet")
        ]

    def orphans(self) -> dict[str, list[Path]]:
        """Data files no manifest lists (left by a killed ingest, or a re-ingest's previous
        generation after a crash), by sha16."""
        listed = {str(self.root / rel) for m in self.manifests() for rel in m.get("files", [])}
        found: dict[str, list[Path]] = {}
        for table in TABLES:
            d = self.table_dir(table)
            if not d.exists():
                continue
            for p in d.rglob("part-*.parquet"):
                m = PART_RE.match(p.name)
                if m and str(p) not in listed:
                    found.setdefault(m.group(1), []).append(p)
        return found


def _flock(fd: int, blocking: bool, timeout: float | None) -> bool:
    if blocking and timeout is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    deadline = time.monotonic() + (timeout or 0.0)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

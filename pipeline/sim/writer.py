"""Write simulated requests as our JSON-lines format (RequestRecord), in bounded memory.

Rows are rendered in chunks by Polars (``write_ndjson``, in Rust) and appended to the file, so a
million requests with per-token times never sit in memory as text at once. A ``.gz`` or ``.zst``
suffix compresses the stream.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa
import zstandard

from pipeline.sim.records import request_frame
from pipeline.sim.result import SimResult

if TYPE_CHECKING:
    from pipeline.sim.cluster import PoolResult

CHUNK = 20_000


@contextmanager
def open_output(path: Path) -> Iterator[IO[bytes]]:
    """Open ``path`` for binary writing, compressing for .gz / .zst suffixes."""
    if path.suffix == ".gz":
        # No name or mtime in the header: the same trace gives the same bytes.
        with (
            open(path, "wb") as raw,
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as fh,
        ):
            yield fh
    elif path.suffix in (".zst", ".zstd"):
        with open(path, "wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as fh:
            yield fh
    else:
        with open(path, "wb") as fh:
            yield fh


def _round(x: np.ndarray) -> np.ndarray:
    return np.round(x, 6)  # microseconds: finer than any real log, coarse enough to stay short


def write_jsonl(
    path: Path,
    result: SimResult | PoolResult,
    *,
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    cached: np.ndarray,
    start_unix: float,
    metadata: dict[str, Any],
    token_times: bool = True,
    chunk: int = CHUNK,
) -> int:
    """Write one record per request; returns the number of bytes written. One server's result:
    in request order. A pool's: server by server (``server`` sim-0, sim-1, ...), each in its own
    order, request ids global."""
    if isinstance(result, SimResult):
        parts = [(result, np.arange(len(arrival)), metadata)]
    else:
        parts = [
            (r, ids, metadata | {"server": f"sim-{s}"})
            for s, (r, ids) in enumerate(zip(result.servers, result.ids, strict=True))
        ]
    written = 0
    with open_output(path) as fh:
        for r, ids, meta in parts:
            written += _write(
                fh, r, ids, arrival[ids], prompt[ids], output[ids], cached[ids], start_unix,
                meta, token_times, chunk,
            )  # fmt: skip
    return written


def _write(
    fh: IO[bytes],
    result: SimResult,
    ids: np.ndarray,
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    cached: np.ndarray,
    start_unix: float,
    metadata: dict[str, Any],
    token_times: bool,
    chunk: int,
) -> int:
    n = len(arrival)
    written = 0
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        frame = _frame(result, ids, lo, hi, arrival, prompt, output, cached, start_unix, metadata)
        if token_times:
            offsets, times = result.token_times(lo, hi)
            rel = _round(times - np.repeat(arrival[lo:hi], np.diff(offsets)))
            lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int64()), pa.array(rel))
            frame = frame.with_columns(pl.Series("token_times", lists))
        buf = io.BytesIO()
        frame.write_ndjson(buf)
        data = buf.getvalue()
        fh.write(data)
        written += len(data)
    return written


def _frame(
    result: SimResult,
    ids: np.ndarray,
    lo: int,
    hi: int,
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    cached: np.ndarray,
    start_unix: float,
    metadata: dict[str, Any],
) -> pl.DataFrame:
    return request_frame(
        [f"req-{i:07d}" for i in ids[lo:hi]],
        metadata,
        prompt=prompt[lo:hi],
        cached=cached[lo:hi],
        output=output[lo:hi],
        clock="unix",
        t0=start_unix,
        arrival=arrival[lo:hi],
        scheduled=result.scheduled[lo:hi],
        first_token=result.first_token[lo:hi],
        finish=result.finish[lo:hi],
        digits=6,
    )

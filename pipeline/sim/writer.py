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

from pipeline.sim.disaggregated import DisaggregatedResult
from pipeline.sim.records import request_frame
from pipeline.sim.result import SimResult, since

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
    result: SimResult | PoolResult | DisaggregatedResult,
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
    order, request ids global. A disaggregated deployment's: decode server by decode server,
    then the one-token requests (``server`` as in ``metadata``: a log of one endpoint)."""
    written = 0
    with open_output(path) as fh:
        for g, meta, tokens in _chunks(result, output, metadata, token_times, chunk):
            frame = request_frame(
                [f"req-{i:07d}" for i in g],
                meta,
                prompt=prompt[g],
                cached=cached[g],
                output=output[g],
                clock="unix",
                t0=start_unix,
                arrival=arrival[g],
                scheduled=result.scheduled[g],
                first_token=result.first_token[g],
                finish=result.finish[g],
                digits=6,
            )
            if tokens is not None:
                offsets, times = tokens
                rel = _round(since(times, offsets, arrival[g]))
                lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int64()), pa.array(rel))
                frame = frame.with_columns(pl.Series("token_times", lists))
            buf = io.BytesIO()
            frame.write_ndjson(buf)
            data = buf.getvalue()
            fh.write(data)
            written += len(data)
    return written


Tokens = tuple[np.ndarray, np.ndarray] | None


def _chunks(
    result: SimResult | PoolResult | DisaggregatedResult,
    output: np.ndarray,
    metadata: dict[str, Any],
    token_times: bool,
    chunk: int,
) -> Iterator[tuple[np.ndarray, dict[str, Any], Tokens]]:
    """(global indices, record metadata, CSR token times or None) in chunks of ``chunk``."""
    if isinstance(result, DisaggregatedResult):
        for g, offs, times in result.token_chunks(output, chunk):
            yield g, metadata, (offs, times) if token_times else None
        return
    if isinstance(result, SimResult):
        parts = [(result, np.arange(result.n_requests), metadata)]
    else:
        parts = [
            (r, ids, metadata | {"server": f"sim-{s}"})
            for s, (r, ids) in enumerate(zip(result.servers, result.ids, strict=True))
        ]
    for r, ids, meta in parts:
        for lo in range(0, len(ids), chunk):
            hi = min(lo + chunk, len(ids))
            yield ids[lo:hi], meta, r.token_times(lo, hi) if token_times else None

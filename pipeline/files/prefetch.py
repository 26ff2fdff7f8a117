"""Run an iterator one item ahead on a background thread.

A reader whose parsing releases the GIL (DuckDB, Polars, numpy) can then parse the next chunk
while ingest validates and dedups the current one; on two cores that is most of the gap
between one busy core and two.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


def prefetch(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """Yield what ``items`` yields, producing up to ``depth`` items ahead on another thread.

    The producer's exceptions are raised here, at the point its item would have come. Closing
    this generator early (the consumer stopped) stops the producer at its next item.
    """
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((_DONE, None))
        except BaseException as exc:  # handed to the consumer, raised on its thread
            put((_DONE, exc))

    thread = threading.Thread(target=work, name="prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, error = q.get()
            if error is not None:
                raise error
            if item is _DONE:
                return
            yield item
    finally:
        stop.set()
        thread.join()
        close = getattr(items, "close", None)
        if close is not None:
            close()  # the producer is done with it: release its files now

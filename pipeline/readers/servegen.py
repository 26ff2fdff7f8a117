"""Alibaba ServeGen workload files: recognised, not ingested.

``chunk-<client>-trace.csv`` (headerless ``window_start_s,rate,cv,dist,p1,p2``) holds per-client
arrival-rate statistics over 600-s windows and ``chunk-<client>-dataset.json`` token-length PMFs
per 6-h window. Neither lists requests: turning them into arrivals means sampling a synthetic
workload, which is the simulator's job, not the ingester's. The file yields one quarantine row
that says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from pipeline.readers.base import Capabilities, ReadContext, ReaderOutput
from pipeline.readers.frames import file_quarantine
from pipeline.readers.sniff import first_line, head_text

PRIORITY = 60
_NUM = r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
_TRACE_LINE = re.compile(rf"^{_NUM},{_NUM},{_NUM},[A-Za-z_]*,{_NUM},{_NUM}$")
_DATASET = re.compile(r'^\{\s*"\d+"\s*:\s*\{\s*"input_tokens"\s*:')


class ServegenReader:
    name = "servegen"
    description = (
        "Alibaba ServeGen per-client window statistics (chunk-*-trace.csv: arrival rate/CV/"
        "distribution per 600-s window; chunk-*-dataset.json: token-length PMFs): recognised "
        "and skipped with a quarantine row, since they hold no per-request data."
    )
    capabilities = Capabilities(
        per_request=False, per_token=False, arrivals_only=True, gpu_model_present=False
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head_text(head)
        if _DATASET.match(text):
            return True
        lines = [ln.strip() for ln in text.split("\n")[:50] if ln.strip()]
        if len(lines) > 1 and not head.endswith(b"\n"):
            lines = lines[:-1]  # the head may cut the last line
        return bool(lines) and all(_TRACE_LINE.match(ln) for ln in lines)

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        from pipeline.files.sources import read_head

        head = read_head(ctx.path, 4096)
        if _DATASET.match(head_text(head)):
            reason = (
                "ServeGen dataset JSON: per-window input/output token-length distributions "
                "(Python-literal PMFs), not requests: not ingested. Sample a workload from it "
                "with ServeGen and ingest that instead."
            )
        else:
            reason = (
                "ServeGen trace CSV: per-client arrival statistics per 600-s window "
                "(window_start_s, rate, cv, distribution, params), not individual requests: "
                "not ingested. Sample arrivals from it with ServeGen and ingest those instead."
            )
        yield file_quarantine(reason, first_line(head))


READER = ServegenReader()

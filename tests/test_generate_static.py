"""`pipeline generate --batching static`: the trace keeps the rules of request-level batching,
checked on the written file from the policy's definition (not against the simulator)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
from click.testing import CliRunner

from pipeline.cli import main


def test_static_trace_keeps_request_level_batching(tmp_path) -> None:
    out = tmp_path / "static.jsonl"
    args = ["generate", "--out", str(out), "-n", "400", "--batching", "static", "--seed", "3",
            "--max-seq-len", "2048", "--max-num-seqs", "8", "--no-token-times"]  # fmt: skip
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    truth = json.loads(out.with_name("static.jsonl.truth.json").read_text())
    assert (truth["batching"], truth["static_batch"], truth["static_reserve"]) == (
        "static",
        8,
        2048,
    )
    df = pl.read_ndjson(out).sort("arrival_ts")
    assert df.height == 400 and df["server"].unique().to_list() == ["sim-0"]
    assert (df["max_num_seqs"].unique().to_list(), df["chunked_prefill"].unique().to_list()) == (
        [8],
        [False],
    )
    assert int((df["prompt_tokens"] + df["output_tokens"]).max()) <= 2048  # within the reserve
    batches = (
        df.group_by("scheduled_ts")
        .agg(
            pl.len().alias("size"),
            pl.col("first_token_ts").n_unique().alias("firsts"),
            pl.col("finish_ts").max().alias("done"),
        )
        .sort("scheduled_ts")
    )
    start, size, done = (batches[c].to_numpy() for c in ("scheduled_ts", "size", "done"))
    assert size.max() == 8 and size.min() >= 1
    # A batch prefills together: one first-token time per batch.
    assert (batches["firsts"] == 1).all()
    # The server takes the next batch only once the last one has finished.
    assert np.all(start[1:] >= done[:-1] - 1e-6)
    # It takes every request waiting then, up to the batch size: a batch smaller than 8 left
    # nobody waiting behind it.
    arrival = df["arrival_ts"].to_numpy()
    taken = np.cumsum(size)
    waiting = np.searchsorted(arrival, start, side="right") - np.concatenate([[0], taken[:-1]])
    assert np.all(size == np.minimum(waiting, 8))
    # Static batching is busy far more than continuous batching at the same share of capacity:
    # partial batches last as long as their longest request.
    assert truth["summary"]["busy_fraction"] > 0.6

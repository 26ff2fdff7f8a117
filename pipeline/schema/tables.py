"""Arrow schemas of the warehouse tables, with the unit and meaning of every column.

Each table is declared once here; the Parquet writer, the JSON documentation in ``schemas/`` and the
docs are all generated from these declarations. Definitions follow ``docs/metrics.md``.
"""

from __future__ import annotations

import pyarrow as pa

from pipeline.schema import deployment
from pipeline.schema.column import I32, I64, TS, Column, F, S
from pipeline.schema.derived import DERIVED

# The partition column: written as a Hive directory (day=YYYY-MM-DD), not inside the files.
PARTITION = Column("day", S, "", "UTC date of arrival (YYYY-MM-DD) or 'unknown'; Hive partition.")

REQUESTS: tuple[Column, ...] = (
    Column("request_id", S, "", "Request id, unique within its run.", nullable=False),
    Column("run_id", S, "", "Benchmark run or serving session.", nullable=False),
    Column(
        "source_format", S, "", "Reader that produced the row (native, vllm_bench, ...).", False
    ),
    Column("source_file", S, "", "Path of the input file.", nullable=False),
    Column("source_line", I64, "", "1-based line (or record index) in the input file."),
    Column("server", S, "", "Engine instance that served it."),
    *deployment.request_columns(),
    Column("prompt_tokens", I64, "tokens", "Input tokens; null if the log does not record them."),
    Column("cached_tokens", I64, "tokens", "Prompt tokens served from a prefix cache."),
    Column("output_tokens", I64, "tokens", "Generated tokens; null if the log does not say."),
    Column(
        "clock",
        S,
        "",
        "Clock of t_arrival: 'unix', 'relative' (one origin per run) or 'request' (the log has no "
        "arrival times: each request's stamps count from its own start; views show t_arrival "
        "null).",
        nullable=False,
    ),
    Column(
        "t_arrival", F, "s", "Arrival on the run's clock (null in views: clock 'request').", False
    ),
    Column("arrival_at", TS, "UTC", "Absolute arrival time; null when the log has no wall clock."),
    Column("queue_s", F, "s", "scheduled - arrival."),
    Column("prefill_s", F, "s", "first_token - scheduled."),
    Column("ttft_s", F, "s", "first_token - arrival."),
    Column("decode_s", F, "s", "finish - first_token."),
    Column("tpot_s", F, "s/token", "decode / (output_tokens - 1), when output_tokens > 1."),
    Column("e2e_s", F, "s", "finish - arrival."),
    Column("n_emissions", I32, "", "Rows this request has in `tokens` (0 if none logged)."),
    Column(
        "token_times",
        pa.list_(F),
        "s",
        "Emission times of each token or chunk since arrival; the `tokens` view unnests it.",
    ),
    Column(
        "token_counts",
        pa.list_(I32),
        "tokens",
        "Tokens per emission as logged; null: one each if emissions = output_tokens, else unknown.",
    ),
    Column("status", S, "", "'ok', 'error' or 'cancelled'.", nullable=False),
    Column("error", S, "", "Error message."),
)

TOKENS: tuple[Column, ...] = (
    Column("request_id", S, "", "Request id.", nullable=False),
    Column("run_id", S, "", "Run id.", nullable=False),
    Column("token_index", I32, "", "0-based index of the emission (token or chunk).", False),
    Column("t_s", F, "s", "Emission time since the request's arrival.", nullable=False),
    Column("n_tokens", I32, "tokens", "Tokens in this emission (1 per token); null if unknown."),
    Column("gap_s", F, "s", "Time since the previous emission (ITL); null for the first."),
)

QUARANTINE: tuple[Column, ...] = (
    Column("source_file", S, "", "Input file.", nullable=False),
    Column("source_format", S, "", "Reader that rejected the record.", nullable=False),
    Column("line", I64, "", "1-based line (or record index); 0 for the whole file."),
    Column("reason", S, "", "Why the record was not ingested.", nullable=False),
    Column("raw", S, "", "The raw record (first 64 KiB)."),
    Column("file_sha256", S, "", "Content hash of the input file.", nullable=False),
)

RUNS: tuple[Column, ...] = (
    Column("run_id", S, "", "Run id.", nullable=False),
    Column("source_format", S, "", "Reader.", nullable=False),
    Column("source_file", S, "", "Input file.", nullable=False),
    Column("model", S, "", "Model."),
    Column("backend", S, "", "Backend or engine the tool drove."),
    Column("request_rate", F, "req/s", "Target request rate (inf = all at once)."),
    Column("max_concurrency", I64, "requests", "Client concurrency limit."),
    Column("started_at", TS, "UTC", "Run start."),
    Column("metadata_json", S, "", "Other run metadata and engine arguments, as JSON."),
)

ARRIVALS: tuple[Column, ...] = (
    Column("run_id", S, "", "Trace id.", nullable=False),
    Column("source_format", S, "", "Reader.", nullable=False),
    Column("source_file", S, "", "Input file.", nullable=False),
    Column("source_line", I64, "", "1-based line."),
    Column("request_id", S, "", "Request id within the trace.", nullable=False),
    Column("t_arrival", F, "s", "Arrival, seconds since the trace's first arrival.", False),
    Column("arrival_at", TS, "UTC", "Absolute arrival, when the trace has one."),
    Column("prompt_tokens", I64, "tokens", "Input tokens."),
    Column("output_tokens", I64, "tokens", "Output tokens."),
    Column("prefix_hash_ids", pa.list_(I64), "", "Prefix-cache block hash ids (Mooncake)."),
)

RUN_SUMMARIES: tuple[Column, ...] = (
    Column("run_id", S, "", "Run id.", nullable=False),
    Column("source_format", S, "", "Reader.", nullable=False),
    Column("source_file", S, "", "Input file.", nullable=False),
    Column("metric", S, "", "The tool's own metric name, as written.", nullable=False),
    Column("value", F, "", "Its value, in the tool's own unit (see metric name).", False),
)

# Stored tables: Parquet files in the warehouse.
TABLES: dict[str, tuple[Column, ...]] = {
    "requests": REQUESTS,
    "quarantine": QUARANTINE,
    "runs": RUNS,
    "arrivals": ARRIVALS,
    "run_summaries": RUN_SUMMARIES,
    # What `pipeline replay` simulated: the same contract as requests / runs, in tables of their
    # own, so that no observed view, query, fit or report ever reads a simulated row.
    "replay_requests": REQUESTS,
    "replay_runs": RUNS,
}
# Derived tables (cost_models, calibration, attribution, ...): declared in schema/derived.py,
# one Parquet file each, checked against the declaration when written (warehouse/derived.py).

# Views computed from stored tables (same contract for every engine). `tokens` is one row per
# emission, unnested from requests.token_times at query time: storing the lists instead of one
# row per token keeps ingest close to the speed of a plain JSON -> Parquet copy.
VIEWS: dict[str, tuple[Column, ...]] = {"tokens": TOKENS, "replay_tokens": TOKENS}
# Tables partitioned by arrival day; the others are small and unpartitioned.
PARTITIONED = frozenset({"requests", "arrivals", "replay_requests"})


def arrow_schema(table: str) -> pa.Schema:
    """The Arrow schema of a table's Parquet files (without the partition column)."""
    return pa.schema(
        [
            pa.field(c.name, c.type, nullable=c.nullable, metadata={"unit": c.unit, "doc": c.doc})
            for c in {**TABLES, **DERIVED}[table]
        ]
    )


def describe_table(table: str) -> list[dict[str, str | bool]]:
    """Columns as plain dicts, for docs and the exported schema files."""
    if table in VIEWS:
        cols = [*VIEWS[table], PARTITION]
    elif table in DERIVED:
        cols = list(DERIVED[table])
    else:
        cols = list(TABLES[table]) + ([PARTITION] if table in PARTITIONED else [])
    return [
        {"name": c.name, "type": str(c.type), "unit": c.unit, "nullable": c.nullable, "doc": c.doc}
        for c in cols
    ]

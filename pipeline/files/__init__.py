"""Opening inputs and splitting them into lines: below the readers and ingest, which both use it.

``sources``: plain, gzip and zstd files as byte blocks, their heads and content hashes;
``lines``: newline-delimited chunks with overlong and truncated lines flagged. Nothing here
knows a log format.
"""

"""The Parquet warehouse: layout, atomic commits, and the DuckDB views over it."""

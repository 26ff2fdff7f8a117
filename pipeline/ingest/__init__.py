"""Ingest: files -> readers -> validation -> atomic warehouse commits."""

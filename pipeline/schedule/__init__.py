"""Scheduled runs: ingest new logs, fit, report; a tiny cron parser and the loop that drives it."""

"""Errors a user can cause: one clear line with what to do, never a traceback.

Exit codes (see README): 0 success; 1 a check the user asked for failed (``ingest --strict`` with
quarantined records); 2 usage error (bad option, unknown query, missing file); 3 data error (nothing
to work on, e.g. an empty warehouse or too little data to fit).
"""

from __future__ import annotations

import click

EXIT_OK, EXIT_FAILED_CHECK, EXIT_USAGE, EXIT_DATA = 0, 1, 2, 3


class UserError(click.ClickException):
    exit_code = EXIT_USAGE


class DataError(click.ClickException):
    exit_code = EXIT_DATA

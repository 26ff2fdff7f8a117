"""The ``pipeline`` command line: one sub-command per module in :mod:`pipeline.commands`.

Exit codes are listed in :mod:`pipeline.errors` and the README.
"""

from __future__ import annotations

import gc
import importlib
import pkgutil

import click

import pipeline.commands
from pipeline import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="pipeline")
def main() -> None:
    """Why did users wait for the first token, and why is generation slow?

    \b
    Typical session:
      pipeline ingest logs/ --set gpu=H100-SXM --set gpu_count=1
      pipeline query --list
      pipeline query latency_percentiles
      pipeline fit
      pipeline report --out reports/
    """


def _register() -> None:
    for info in sorted(pkgutil.iter_modules(pipeline.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"pipeline.commands.{info.name}")
        cmd = getattr(module, "command", None)
        if isinstance(cmd, click.Command):
            main.add_command(cmd)


_register()
# The commands' imports (Polars, DuckDB, numba, Altair ...) leave a few hundred thousand objects
# that live until exit. Frozen, the cyclic collector stops walking them on every full pass: that
# walking was 1.0 s of a 1,000,000-request ingest's main thread (py-spy).
gc.freeze()

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


class _Commands(click.Group):
    """Sub-commands imported when named: `pipeline ingest` loads ingest's dependencies, not the
    report's Altair or the simulator (0.90 s -> 0.55 s of start-up, measured with
    ``python -X importtime``). Every module of pipeline.commands with a ``command`` is one."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = sorted(m.name for m in pkgutil.iter_modules(pipeline.commands.__path__))
        return [n for n in names if self.get_command(ctx, n) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name.startswith("_") or not cmd_name.isidentifier():
            return None
        try:
            module = importlib.import_module(f"pipeline.commands.{cmd_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"pipeline.commands.{cmd_name}":
                return None  # no such command: click says so and lists the others
            raise
        cmd = getattr(module, "command", None)
        if not isinstance(cmd, click.Command) or cmd.name != cmd_name:
            return None
        self.add_command(cmd)
        # The command's imports (Polars, DuckDB, numba, Altair ...) leave a few hundred thousand
        # objects that live until exit. Frozen, the cyclic collector stops walking them on
        # every full pass: that walking was 1.0 s of a 1,000,000-request ingest's main thread
        # (py-spy).
        gc.freeze()
        return cmd


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
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


def all_commands() -> dict[str, click.Command]:
    """Every sub-command, imported (for help listings and tests; ``main`` loads them lazily)."""
    ctx = click.Context(main)
    return {n: c for n in main.list_commands(ctx) if (c := main.get_command(ctx, n)) is not None}

"""``pipeline replay``: serve a recorded or public workload again under a what-if configuration.

    workload = load_workload(SOURCE, layout)          # run id, arrivals trace id, or file
    scenario = resolve(load_config(path), workload, fits)
    result = simulate(scenario, workload)             # pipeline.sim.cluster on the one engine
    write(layout, result, run_id, key)                # replay_requests / replay_runs / replay_steps

See docs/replay.md.
"""

from pipeline.replay.compare import compare
from pipeline.replay.config import WhatIf
from pipeline.replay.config import load as load_config
from pipeline.replay.run import ReplayResult, Scenario, resolve, run_id_for, run_key, simulate
from pipeline.replay.workload import Workload, load_workload
from pipeline.replay.write import write

__all__ = [
    "ReplayResult",
    "Scenario",
    "WhatIf",
    "Workload",
    "compare",
    "load_config",
    "load_workload",
    "resolve",
    "run_id_for",
    "run_key",
    "simulate",
    "write",
]

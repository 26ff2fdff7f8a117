"""``pipeline replay``: serve a recorded or public workload again under a what-if configuration.

    workload = load_workload(SOURCE, layout)          # run id, arrivals trace id, or file
    scenario = resolve(load_config(path), workload, fits)
    result = simulate_scenario(scenario, workload)    # on pipeline.sim: the one engine
    write(layout, result, run_id, key)                # replay_requests / replay_runs / replay_steps

See docs/replay.md.
"""

from pipeline.replay.config import WhatIf
from pipeline.replay.config import load as load_config
from pipeline.replay.result import ReplayResult, simulate_scenario
from pipeline.replay.scenario import Scenario, replay_run_id, resolve, run_key
from pipeline.replay.versus_observed import compare
from pipeline.replay.workload import RecordedWorkload, load_workload
from pipeline.replay.write import write

__all__ = [
    "RecordedWorkload",
    "ReplayResult",
    "Scenario",
    "WhatIf",
    "compare",
    "load_config",
    "load_workload",
    "replay_run_id",
    "resolve",
    "run_key",
    "simulate_scenario",
    "write",
]

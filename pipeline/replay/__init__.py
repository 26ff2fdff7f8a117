"""``pipeline replay``: serve a recorded or public workload again under a what-if configuration.

    workload = load_workload(SOURCE, layout)          # run id, arrivals trace id, or file
    scenario = resolve_scenario(load_whatif(path), workload, fits)
    result = simulate_scenario(scenario, workload)    # on pipeline.sim: the one engine
    write_replay(layout, result, run_id, key)         # replay_requests / replay_runs / replay_steps

See docs/replay.md.
"""

from pipeline.replay.config import WhatIf, load_whatif
from pipeline.replay.result import ReplayResult, simulate_scenario
from pipeline.replay.scenario import Scenario, replay_run_id, resolve_scenario, run_key
from pipeline.replay.versus_observed import compare_with_observed
from pipeline.replay.workload import RecordedWorkload, load_workload
from pipeline.replay.write import write_replay

__all__ = [
    "RecordedWorkload",
    "ReplayResult",
    "Scenario",
    "WhatIf",
    "compare_with_observed",
    "load_whatif",
    "load_workload",
    "replay_run_id",
    "resolve_scenario",
    "run_key",
    "simulate_scenario",
    "write_replay",
]

"""Calibration by replay: fit the step costs and the unlogged scheduler facts of a deployment so
that replaying its recorded arrivals reproduces its recorded TTFT and TPOT.

The model is the simulator's (``pipeline.sim``): a scheduler (:data:`SCHEDULERS`) stepping a
:class:`~pipeline.physics.StepCost`. Its few parameters are shared by every run of a deployment
(nothing per run or per rate) and bounded by physics:

- ``mfu``, ``mbu`` in (0, 1]: achieved fractions of the GPU's peak FLOP/s and HBM bandwidth;
- ``overlap`` in [0, 1]: the share of min(compute, memory) hidden under the max;
- ``step_overhead_s``, ``seq_overhead_s`` >= 0: fixed seconds per step and per sequence in it
  (scheduling, sampling, detokenising and streaming: CPU work real servers do every step);
- ``kv_tokens``: KV-cache slots. Taken as recorded when the log's run metadata has it (vLLM's
  ``num_gpu_blocks * block_size``); otherwise the peak the log itself shows in use (requests
  between their first token and their finish hold prompt + generated tokens) times 1 + a fitted
  margin in [-0.2, 1]. Below the peak, because a server at capacity preempts: the log still
  counts a preempted request as holding its tokens (DistServe's vLLM at 4 req/s plateaus at
  ~53k tokens while its log's peak reads 56k). A log that never came near its capacity only
  bounds it below (by the peak), and says so.
- ``kv_link_share`` in (0, 1], disaggregated deployments only: the share of the manifest's
  ``kv_bandwidth_gbps`` a decode instance's KV pulls achieve (:func:`kv_pull_seconds`).

The objective compares replayed with recorded requests one by one: the mean absolute log ratio of
per-request TTFT and TPOT plus the p50 / p90 of both per run (robust least squares, so that a few
requests the model cannot explain do not steer it). Nelder-Mead minimises it from two physical
starts (:func:`_fit`). The 95 % intervals are the wider of the Jacobian's at the optimum and a
delete-a-block jackknife's over stretches of time (:func:`_jackknife`). A parameter at a bound,
or one whose interval spans more than its own size, is reported as such and never printed as a
fitted value.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, make_dataclass, replace
from types import SimpleNamespace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import minimize

from pipeline import catalog
from pipeline.physics import StepCost
from pipeline.schema import deployment as deployment_key
from pipeline.schema.latency import latencies
from pipeline.sim.cluster import Pool
from pipeline.sim.config import VLLM_V0_WATERMARK, EngineConfig, kv_capacity_tokens
from pipeline.sim.disaggregated import distserve_configs, pull_seconds, simulate_disaggregated
from pipeline.sim.engine import simulate

F64 = NDArray[np.float64]

SCHEDULERS = ("vllm-v0", "vllm-v1", "sglang")  # the fit chooses among these if none recorded
SCHEDULER_DOC = {
    "vllm-v0": "vLLM V0: prefill steps run alone, decodes wait; recompute preemption",
    "vllm-v1": "vLLM V1: chunked prefill sharing each step's token budget with the decodes",
    "sglang": "SGLang default: chunked prefill batches run alone (no mixed chunks), then decodes",
    "distserve": "DistServe: a prefill instance batching prompts, KV transfer, a decode instance",
}
PARAMS = (
    "mfu", "mbu", "overlap", "step_overhead_s", "seq_overhead_s", "kv_margin", "kv_link_share",
)  # fmt: skip
# kv_margin may go 20 % below the log's peak: at capacity that peak overstates what was held
# (a preempted request still counts between its first token and its finish, and tokens are
# spread at each request's mean rate). DistServe's reference is a sizing, not a peak: 0 there.
KV_BELOW_PEAK = -0.2
# kv_link_share (disaggregated only): the achieved share of the manifest's kv_bandwidth_gbps.
# DistServe's decode instance pulls each prompt's KV between its steps, so the pull holds up
# the decode batch; a link rated by its peak (NVLink's 300 GB/s each way) is not what a
# block-by-block copy achieves. Colocated deployments move no KV: it stays at 1, not fitted.
LOWER = np.array([0.02, 0.02, 0.0, 0.0, 0.0, KV_BELOW_PEAK, 0.01])
UPPER = np.array([1.0, 1.0, 1.0, 0.1, 0.01, 1.0, 1.0])
START = np.array([0.5, 0.7, 0.5, 5e-3, 2e-4, 0.05, 0.5])
# A second start at the roofline (full overlap, small overheads). The cost is rugged and the
# simplex settles in the basin it starts in: on the twelve sample traces (true overlap 1) START
# alone ended at MBU 0.74-0.98 with 65-200 us per sequence against the truth's 0.60-0.79 and
# 6-29 us, at twice the cost of this start's optimum, while the truth itself replays exactly.
# Both are searched on half the budget each (the same time as one start); the lower cost wins.
STARTS = (START, np.array([0.5, 0.7, 1.0, 2e-3, 2e-5, 0.05, 0.5]))
SCALE = np.array([0.1, 0.1, 0.2, 3e-3, 2e-4, 0.05, 0.1])
KV, LINK = PARAMS.index("kv_margin"), PARAMS.index("kv_link_share")
PERCENTILES = (50.0, 90.0)


def _disagg(self: Any) -> dict[str, float]:
    return dict(self.disaggregation or ())


def _label(self: Any) -> str:
    eng = " ".join(x for x in (self.engine, self.engine_version) if x)
    return f"{self.model} on {self.gpu_count} x {self.gpu}" + (f" ({eng})" if eng else "")


# What makes two runs the same server: the deployment key's parts (pipeline/schema/deployment.py,
# generated so that a new part needs no edit here), plus a disaggregated deployment's
# [disaggregation] keys from its run manifest, as sorted pairs.
Deployment = make_dataclass(
    "Deployment",
    [
        (p.name, Any) if p.required else (p.name, Any, field(default=p.default))
        for p in deployment_key.KEY
    ]
    + [("disaggregation", Any, field(default=None))],
    frozen=True,
    namespace={"disagg": _disagg, "label": _label},
)
Deployment.__doc__ = "One deployment: the key's parts, then its [disaggregation] keys."
Deployment.__module__ = __name__  # so that worker processes can pickle it (validate's folds)


@dataclass
class Run:
    """One recorded run: per-request arrays, arrivals relative to the run's first."""

    run_id: str
    arrival: F64
    prompt: NDArray[np.int64]
    output: NDArray[np.int64]
    ttft: F64
    e2e: F64
    kv_tokens: int | None = None  # KV-cache slots as the run's metadata records them
    # Requests whose outcomes the fit may see (None: all). The others are replayed as load (their
    # arrival and lengths) but never scored, and their ttft / e2e are NaN: a run fitted on its
    # first half still has the second half's arrivals sharing the batches of the first's tail.
    scored: NDArray[np.bool_] | None = None

    def __post_init__(self) -> None:
        o = np.argsort(self.arrival, kind="stable")
        self.arrival = self.arrival[o] - self.arrival[o][0]
        self.prompt, self.output = self.prompt[o], self.output[o]
        self.ttft, self.e2e = self.ttft[o], self.e2e[o]
        seen = np.ones(len(o), bool) if self.scored is None else np.asarray(self.scored, bool)[o]
        self.scored = seen
        self.ttft, self.e2e = np.where(seen, self.ttft, np.nan), np.where(seen, self.e2e, np.nan)

    @property
    def n(self) -> int:
        return len(self.arrival)

    def seen(self) -> Run:
        """The scored requests alone (for what is computed from outcomes, e.g. the KV peak)."""
        if self.scored.all():
            return self
        m = self.scored
        return replace(
            self,
            arrival=self.arrival[m],
            prompt=self.prompt[m],
            output=self.output[m],
            ttft=self.ttft[m],
            e2e=self.e2e[m],
            scored=None,
        )


def tpot_of(ttft: F64, e2e: F64, output: NDArray[np.int64]) -> F64:
    """TPOT (docs/metrics.md, schema/latency.py) of the requests that have one (output > 1);
    times are relative to arrival, so first token = TTFT and finish = E2E."""
    tpot = latencies(np.zeros_like(ttft), ttft, e2e, output)["tpot_s"]
    return tpot[output > 1]


def recorded_scheduler(dep: Deployment) -> str | None:
    """The scheduler the log's engine and version imply, or None when they do not say."""
    if dep.disaggregation:
        return "distserve"
    if (dep.engine or "").lower() == "sglang":
        return "sglang"
    if (dep.engine or "").lower() == "sim" and dep.chunked_prefill:
        return "vllm-v1"  # `pipeline generate`: chunks share each step with the decodes
    if (dep.engine or "").lower() != "vllm":
        return None
    v = _version(dep.engine_version)
    if v is not None and v >= (0, 10):  # V0 was removed in 0.10; V1 default since 0.8
        return "vllm-v1"
    if v is not None and v < (0, 6):  # before V1 existed; chunked prefill opt-in
        return "vllm-v1" if dep.chunked_prefill else "vllm-v0"
    if dep.chunked_prefill is not None and v is not None:
        return "vllm-v1" if dep.chunked_prefill else "vllm-v0"
    return None


def _version(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    parts = text.lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return None


def engine_config(scheduler: str, dep: Deployment, kv_tokens: int, longest: int) -> EngineConfig:
    """The scheduler's limits: as recorded, else the engine's defaults (docs/calibration.md)."""
    seqs = dep.max_num_seqs or 256
    if scheduler == "vllm-v0":
        # V0 without chunking needs a budget >= the longest sequence; its default is
        # max(max_model_len, 2048), and a recompute re-prefills prompt + generated tokens.
        budget = max(dep.max_batched_tokens or 2048, longest)
        return EngineConfig(
            kv_capacity_tokens=kv_tokens,
            max_num_seqs=seqs,
            max_batched_tokens=budget,
            chunked_prefill=False,
            mixed_prefill=False,
            admission_watermark=VLLM_V0_WATERMARK,
        )
    if scheduler == "vllm-v1":
        budget = max(dep.max_batched_tokens or 8192, seqs)
        return EngineConfig(
            kv_capacity_tokens=kv_tokens,
            max_num_seqs=seqs,
            max_batched_tokens=budget,
            chunked_prefill=True,
        )
    if scheduler == "sglang":
        # SGLang's chunked_prefill_size (8192 on large GPUs) bounds a prefill batch; its
        # default scheduler runs prefill batches alone (--enable-mixed-chunk is off).
        return EngineConfig(
            kv_capacity_tokens=kv_tokens,
            max_num_seqs=seqs,
            max_batched_tokens=max(dep.max_batched_tokens or 8192, seqs),
            chunked_prefill=True,
            prefill_first=True,
        )
    raise ValueError(f"unknown scheduler {scheduler!r}; known: {', '.join(SCHEDULER_DOC)}")


def observed_peak_kv(run: Run, samples: int = 2000) -> float:
    """Most KV tokens the log shows in use at once: requests between first token and finish hold
    prompt + tokens generated so far (generated at their own mean rate). Vectorised over a grid
    of finish times, where the total peaks (it only falls when a request leaves)."""
    first = run.arrival + run.ttft
    fin = run.arrival + run.e2e
    rate = np.where(run.e2e > run.ttft, (run.output - 1) / np.maximum(run.e2e - run.ttft, 1e-12), 0)
    grid = np.quantile(fin, np.linspace(0.0, 1.0, min(samples, run.n)))
    peak = 0.0
    for lo in range(0, len(grid), 256):  # bounded memory: 256 x n at a time
        t = grid[lo : lo + 256, None] - 1e-9
        live = (t >= first[None, :]) & (t < fin[None, :])
        kv = np.where(live, run.prompt[None, :] + 1 + (t - first[None, :]) * rate[None, :], 0.0)
        peak = max(peak, float(kv.sum(axis=1).max()))
    return peak


@dataclass
class Calibration:
    deployment: Deployment
    scheduler: str
    scheduler_source: str  # recorded | inferred
    values: dict[str, float]
    ci: dict[str, tuple[float, float] | None]
    status: dict[str, str]
    kv_tokens: int
    kv_status: str  # recorded | fitted | lower bound
    loss: float
    runs: int
    requests: int
    seconds: float
    alternatives: dict[str, float] = field(default_factory=dict)  # scheduler -> loss

    def step_cost(self) -> StepCost:
        return step_cost(self.deployment, self.values)

    def replay(self, run: Run) -> tuple[F64, F64]:
        """Replayed (ttft, e2e) of every request of ``run``, in the run's order."""
        kv = run.kv_tokens or self.kv_tokens
        return simulate_run(self.values, self.deployment, self.scheduler, run, kv, _longest([run]))


def step_cost(dep: Deployment, v: dict[str, float], tp: int | None = None) -> StepCost:
    """The step costs of calibrated parameters ``v`` (mfu, mbu, overlap, overheads)."""
    return StepCost(
        catalog.model(dep.model),
        catalog.gpu(dep.gpu),
        tp=tp or dep.gpu_count,
        weight_dtype=dep.weight_dtype,
        kv_dtype=dep.kv_dtype,
        mfu=v["mfu"],
        mbu=v["mbu"],
        overlap=v["overlap"],
        step_overhead=v["step_overhead_s"],
        seq_overhead=v["seq_overhead_s"],
    )


def _longest(runs: list[Run]) -> int:
    return int(max(int((r.prompt + r.output).max()) for r in runs))


def _simulate(cost: StepCost, cfg: EngineConfig, run: Run) -> tuple[F64, F64]:
    res = simulate(run.arrival, run.prompt, run.output, cfg, cost)
    return res.first_token - run.arrival, res.finish - run.arrival


def simulate_run(
    v: dict[str, float], dep: Deployment, scheduler: str, run: Run, kv: int, longest: int
) -> tuple[F64, F64]:
    """Replay one run under ``scheduler`` with parameters ``v``: per-request (ttft, e2e)."""
    if scheduler == "distserve":
        return _simulate_disaggregated(v, dep, run, kv, longest)
    cfg = engine_config(scheduler, dep, max(kv, longest + 16), longest)
    return _simulate(step_cost(dep, v), cfg, run)


def kv_pull_seconds(dep: Deployment, prompt: NDArray[np.int64], share: float) -> F64:
    """Seconds a disaggregated decode instance spends pulling each prompt's KV: the manifest's
    ``kv_latency_s`` + bytes / (``share`` x ``kv_bandwidth_gbps``)."""
    d = dep.disagg()
    bw = float(d.get("kv_bandwidth_gbps", 25.0)) * 1e9 * share
    return pull_seconds(
        catalog.model(dep.model), dep.kv_dtype, prompt, bw, float(d.get("kv_latency_s", 1e-3))
    )


def _simulate_disaggregated(
    v: dict[str, float], dep: Deployment, run: Run, kv: int, longest: int
) -> tuple[F64, F64]:
    """DistServe: prompts batch on the prefill instance (prefill-only steps, which emit the first
    token); the decode instance then admits each with its prompt cached, pulling the prompt's KV
    across the link (:func:`kv_pull_seconds`) inside the step that admits it: DistServe's decode
    loop awaits each migration before its next step, so the pull holds up the whole batch, not
    only the request. That step computes the first token's KV and emits the second, then the
    request decodes with the others (continuous batching). The same efficiencies and overheads
    price both instances; their tensor parallelism differs."""
    d = dep.disagg()
    ptp, dtp = int(d.get("prefill_tp", dep.gpu_count)), int(d.get("decode_tp", dep.gpu_count))
    model, gpu = catalog.model(dep.model), catalog.gpu(dep.gpu)
    p_kv = kv_capacity_tokens(
        model, gpu, tp=ptp, weight_dtype=dep.weight_dtype, kv_dtype=dep.kv_dtype
    )
    p_cfg, d_cfg = distserve_configs(
        d, p_kv, kv, int(run.prompt.max()), longest, dep.max_num_seqs, dep.max_batched_tokens
    )
    res = simulate_disaggregated(
        run.arrival,
        run.prompt,
        run.output,
        Pool(p_cfg, step_cost(dep, v, ptp)),
        Pool(d_cfg, step_cost(dep, v, dtp)),
        kv_pull_seconds(dep, run.prompt, v.get("kv_link_share", 1.0)),
    )
    first, fin = res.first_token, res.finish
    return first - run.arrival, fin - run.arrival


QUANTILES = (10.0, 25.0, 50.0, 75.0, 90.0)  # of each run's TTFT and TPOT, matched in the cost
RHO_SCALE = 0.1  # soft-L1: quadratic within 10 % log error, linear beyond


def _groups(
    x: F64, runs: list[Run], dep: Deployment, scheduler: str, peak: float, longest: int
) -> list[tuple[float, F64]]:
    """(weight, log errors) groups: per run, every request's TTFT and TPOT and the run's
    quantiles of both; each group weighs 1/its size, so each run and each view counts alike."""
    v = dict(zip(PARAMS, x, strict=True))
    out: list[tuple[float, F64]] = []
    for r in runs:
        kv = r.kv_tokens or int(peak * (1.0 + v["kv_margin"]))
        try:
            ttft, e2e = simulate_run(v, dep, scheduler, r, kv, longest)
        except RuntimeError:
            # The scheduler stalls (a KV cache too small for what it admitted): this corner of
            # the box cannot have produced the log; price it as 100x too slow, not as a crash.
            ttft, e2e = r.ttft * 100.0, r.e2e * 100.0
        m = r.scored
        if not m.any():  # a window of a jackknife fold can hold only unscored requests
            continue
        ttft, e2e, obs_ttft, obs_e2e, output = ttft[m], e2e[m], r.ttft[m], r.e2e[m], r.output[m]
        tpot, obs_tpot = tpot_of(ttft, e2e, output), tpot_of(obs_ttft, obs_e2e, output)
        per_ttft = np.log(np.maximum(ttft, 1e-6) / np.maximum(obs_ttft, 1e-6))
        out.append((1.0 / len(ttft), per_ttft))
        out.append((1.0 / len(QUANTILES), _quantile_errors(ttft, obs_ttft)))
        if len(tpot):
            per_tpot = np.log(np.maximum(tpot, 1e-7) / np.maximum(obs_tpot, 1e-7))
            out.append((1.0 / len(tpot), per_tpot))
            out.append((1.0 / len(QUANTILES), _quantile_errors(tpot, obs_tpot)))
    return out


def _quantile_errors(sim: F64, obs: F64) -> F64:
    a = np.maximum(np.percentile(sim, QUANTILES), 1e-7)
    b = np.maximum(np.percentile(obs, QUANTILES), 1e-7)
    return np.log(a / b)


def _cost(groups: list[tuple[float, F64]]) -> float:
    """Robust cost: sum over groups of weight x sum of soft-L1(error / RHO_SCALE)."""
    total = 0.0
    for w, e in groups:
        u = (e / RHO_SCALE) ** 2
        total += w * float(np.sum(2.0 * (np.sqrt(1.0 + u) - 1.0)))
    return total * RHO_SCALE**2


def _residuals(
    x: F64, runs: list[Run], dep: Deployment, scheduler: str, peak: float, longest: int
) -> F64:
    """The groups as one weighted residual vector (sqrt(weight) x error): for the Jacobian."""
    return np.concatenate(
        [math.sqrt(w) * e for w, e in _groups(x, runs, dep, scheduler, peak, longest)]
    )


def calibrate(
    runs: list[Run],
    dep: Deployment,
    scheduler: str | None = None,
    max_evals: int | None = None,
    intervals: bool = True,
) -> Calibration:
    """Fit ``dep``'s parameters to its ``runs`` by replaying them (see the module docstring).

    ``intervals=False`` skips the jackknife (:func:`_jackknife`): the values are the same, the
    intervals the Jacobian's alone (for callers that use the values only, e.g. validate's folds).
    """
    if not runs:
        raise ValueError("calibration needs at least one run with arrival times")
    max_evals = max_evals or evaluation_budget(runs)
    catalog.model(dep.model), catalog.gpu(dep.gpu)  # raise early with the catalog's message
    t0 = time.perf_counter()
    source = "given" if scheduler else "recorded"
    choices = [scheduler] if scheduler else [recorded_scheduler(dep)]
    if choices[0] is None:
        # The engine's own schedulers when the log names it (its version is what is missing).
        engine = (dep.engine or "").lower()
        choices = [x for x in SCHEDULERS if x.startswith(engine)] if engine else []
        choices = choices or list(SCHEDULERS)
        if dep.chunked_prefill is not None:  # a recorded chunking flag rules out the others
            keep = [x for x in choices if (x != "vllm-v0") == dep.chunked_prefill]
            choices = keep or choices
        source = "inferred"
    if len(choices) == 1:
        fits = {choices[0]: _fit_starts(runs, dep, choices[0], max_evals)}
        best = choices[0]
    else:
        # The coarse search for every candidate; the fine one for those within CLOSE of the
        # best coarse loss (two schedulers can differ by less than a coarse pass resolves: a
        # vLLM V1 trace's first half was 0.0089 for V1 against 0.0084 for SGLang after it).
        fits = {s: _fit_starts(runs, dep, s, max_evals, stages=("coarse",)) for s in choices}
        lead = min(f[0].cost for f in fits.values())
        for s in [s for s in choices if fits[s][0].cost <= CLOSE * lead]:
            fits[s] = _fit(runs, dep, s, max_evals, stages=("fine",), x_start=fits[s][0].x)
        best = min(fits, key=lambda s: fits[s][0].cost)
    res, peak, kv_fixed = fits[best]
    values, ci, status = _summarise(res, kv_fixed)
    # The KV capacity is chosen from the Jacobian's verdict, as it was before the jackknife:
    # the intervals say how well the data pins each value; they do not change the model.
    kv_verdict = dict(status)
    kv_tokens = int(peak * (1.0 + values["kv_margin"]))
    if kv_fixed:
        kv_status = "recorded"
        kv_tokens = int(runs[0].kv_tokens or 0)
    elif best == "distserve" and kv_verdict["kv_margin"] != "fitted":
        kv_status = kv_verdict["kv_margin"]  # a bound of the sizing range, or not identifiable
    elif kv_verdict["kv_margin"] == "at bound" and values["kv_margin"] <= LOWER[KV] + 1e-9:
        kv_status = "at bound"  # 20 % below the log's peak: the model wants it smaller still
    elif kv_verdict["kv_margin"] in ("not identifiable", "at bound"):
        # The log never came near its capacity: it is at least its peak. Replaying more load
        # than the log saw needs a number, so the catalog's vLLM-style sizing is used when
        # larger (first half -> second half of a sample trace was +600 % TTFT with the bound).
        kv_status = "lower bound"
        kv_tokens = max(int(peak), _catalog_kv(dep))
    else:
        kv_status = "fitted"
    if intervals:
        folds = _jackknife(runs, dep, best, peak, max_evals)
        ci, status = _widen(res, folds, ci, status)
    return Calibration(
        deployment=dep,
        scheduler=best,
        scheduler_source=source,
        values=values,
        ci=ci,
        status=status,
        kv_tokens=kv_tokens,
        kv_status=kv_status,
        loss=float(res.cost),
        runs=len(runs),
        requests=int(sum(int(r.scored.sum()) for r in runs)),  # whose outcomes it saw
        seconds=time.perf_counter() - t0,
        alternatives={s: float(f[0].cost) for s, f in fits.items()},
    )


CLOSE = 1.25  # candidate schedulers within this factor of the best coarse loss are refined
WINDOW = 2_000  # requests per run in the coarse search (the earliest: a contiguous window)
# Replayed requests the coarse search may spend, as evaluations = this / requests it replays,
# within EVALS: small logs get the evaluations a rugged 6-7 parameter cost needs (DistServe's
# 900 disaggregated requests: cost 0.096 after 360, 0.074 after 600), large ones stay within
# ~30 s on 2 cores (a 2,000-request window costs ~12 ms to replay).
REPLAY_BUDGET = 600_000
EVALS = (360, 1000)


def evaluation_budget(runs: list[Run]) -> int:
    """Nelder-Mead evaluations for ``runs``: REPLAY_BUDGET over the coarse pass's requests."""
    n = sum(min(r.n, WINDOW) for r in runs)
    return int(min(max(REPLAY_BUDGET // max(n, 1), EVALS[0]), EVALS[1]))


def _window(run: Run, n: int) -> Run:
    if run.n <= n:
        return run
    return replace(
        run,
        arrival=run.arrival[:n],
        prompt=run.prompt[:n],
        output=run.output[:n],
        ttft=run.ttft[:n],
        e2e=run.e2e[:n],
        scored=run.scored[:n],
    )


def _catalog_kv(dep: Deployment) -> int:
    """vLLM-style KV sizing of one replica (HBM x 0.9 - weights - activations), 0 if none fits."""
    try:
        return kv_capacity_tokens(
            catalog.model(dep.model),
            catalog.gpu(dep.gpu),
            tp=dep.gpu_count,
            weight_dtype=dep.weight_dtype,
            kv_dtype=dep.kv_dtype,
        )
    except ValueError:
        return 0


def _kv_reference(runs: list[Run], dep: Deployment, scheduler: str) -> float:
    """KV capacity = reference x (1 + margin), margin in [0, 1] fitted.

    Colocated: the reference is the peak the log shows in use (a lower bound: the server held
    it). Disaggregated: a request between its first token and its finish may still wait for the
    decode instance with its KV on the prefill side, so the log's peak bounds nothing there; the
    reference is half the decode instance's vLLM-style sizing at gpu_memory_utilization 0.95
    (the catalog's HBM minus weights and activations), so the fit ranges over 50-100 % of it."""
    if scheduler != "distserve":
        return max(observed_peak_kv(r.seen()) for r in runs)
    d = dep.disagg()
    cap = kv_capacity_tokens(
        catalog.model(dep.model),
        catalog.gpu(dep.gpu),
        tp=int(d.get("decode_tp", dep.gpu_count)),
        weight_dtype=dep.weight_dtype,
        kv_dtype=dep.kv_dtype,
        gpu_memory_utilization=0.95,
    )
    return cap / 2.0


def _fit_starts(
    runs: list[Run], dep: Deployment, scheduler: str, max_evals: int, stages=("coarse", "fine")
) -> tuple[Any, float, bool]:
    """:func:`_fit` from each of STARTS, sharing the evaluation budget (a calibration takes as
    long as with one start); the one with the lowest cost."""
    evals = max(max_evals // len(STARTS), 1)
    fits = [_fit(runs, dep, scheduler, evals, stages, x_start=x0) for x0 in STARTS]
    return min(fits, key=lambda f: f[0].cost)


def _fit(
    runs: list[Run],
    dep: Deployment,
    scheduler: str,
    max_evals: int,
    stages: tuple[str, ...] = ("coarse", "fine"),
    x_start: F64 | None = None,
    peak: float | None = None,
    jacobian: bool = True,
) -> tuple[Any, float, bool]:
    """Nelder-Mead on the robust cost, in z = x / SCALE, clipped to the box.

    A replayed schedule is piecewise constant in the parameters (a 2 % change moves a step
    across an arrival), so the cost is rugged at small scales: gradient steps from finite
    differences stall where the simplex still finds its way. A coarse pass (simplex 30 % of each
    parameter's typical size, at most WINDOW requests per run) is refined on every request
    (simplex 10 %); the Jacobian of the residuals at the optimum (central differences, 2 %)
    gives the Jacobian intervals (:func:`calibrate` widens them by :func:`_jackknife`'s)."""
    kv_fixed = all(r.kv_tokens for r in runs)
    peak = _kv_reference(runs, dep, scheduler) if peak is None else peak
    longest = _longest(runs)
    lower, upper = LOWER.copy(), UPPER.copy()
    if scheduler == "distserve":
        lower[KV] = 0.0  # the reference is a sizing (50-100 % of it), not a peak held
    free = np.ones(len(PARAMS), bool)
    if kv_fixed:  # recorded: the margin is not a parameter
        free[KV] = False
    if scheduler != "distserve":  # no KV crosses a link: the share is not a parameter
        free[LINK] = False
        lower[LINK] = upper[LINK]
    lo, hi = lower / SCALE, upper / SCALE
    z_fixed = np.clip((START if x_start is None else x_start) / SCALE, lo, hi)
    if kv_fixed:
        z_fixed[KV] = lo[KV]

    def x_of(zf: F64) -> F64:
        z = z_fixed.copy()
        z[free] = zf
        return np.clip(z, lo, hi) * SCALE

    def cost_on(rs: list[Run]):
        def cost(zf: F64) -> float:
            z = z_fixed.copy()
            z[free] = zf
            outside = float(np.sum((z - np.clip(z, lo, hi)) ** 2))
            return _cost(_groups(x_of(zf), rs, dep, scheduler, peak, longest)) + 10 * outside

        return cost

    def simplex(z0: F64, frac: float) -> F64:
        steps = np.eye(len(z0)) * frac * np.maximum(np.abs(z0), 0.5)
        return np.vstack([z0, z0 + steps])

    coarse = [_window(r, WINDOW) for r in runs]
    z = z_fixed[free]
    budget = max(max_evals, 2 * (free.sum() + 1))
    # The fine pass replays every request: past WINDOW per run it gets proportionally fewer
    # evaluations (at least 40), which keeps 10,000 requests within ~30 s on 2 cores.
    share = min(1.0, sum(r.n for r in coarse) / sum(r.n for r in runs))
    fine = max(40, int(budget // 3 * share))
    plan = {"coarse": (coarse, 0.3, budget * 2 // 3), "fine": (runs, 0.1, fine)}
    for stage in stages:
        rs, frac, evals = plan[stage]
        cost = cost_on(rs)
        z, best, left = _simplex_search(cost, z, frac, int(evals), simplex)
        if stage == "coarse" and free[KV]:
            k = int(free[:KV].sum())  # the margin's position among the free parameters
            zk = _kv_profile(cost, z, k, best, lo[KV], hi[KV], simplex)
            if not np.array_equal(zk, z):  # a capacity of its own: settle the others there
                z, best, _ = _simplex_search(cost, zk, frac, max(left, int(evals) // 4), simplex)
    x = x_of(z)
    if not jacobian:
        return SimpleNamespace(x=x, cost=best), peak, kv_fixed
    args = (runs, dep, scheduler, peak, longest)
    f0 = _residuals(x, *args)
    jac = np.zeros((len(f0), len(PARAMS)))
    for k in np.flatnonzero(free):
        h = 0.02 * SCALE[k]
        up, dn = x.copy(), x.copy()
        up[k], dn[k] = min(x[k] + h, upper[k]), max(x[k] - h, lower[k])
        if up[k] > dn[k]:
            jac[:, k] = (_residuals(up, *args) - _residuals(dn, *args)) / (up[k] - dn[k])
    cost = _cost(_groups(x, *args))
    res = SimpleNamespace(x=x, fun=f0, jac=jac, cost=cost, lower=lower, upper=upper)
    if kv_fixed:
        res.upper = upper.copy()
        res.upper[KV] = lower[KV]
    return res, peak, kv_fixed


def _simplex_search(cost: Any, z: F64, frac: float, evals: int, simplex: Any) -> tuple:
    """Nelder-Mead, restarted from its best vertex with a fresh simplex while that still gains
    (a simplex collapses in a rugged cost long before the budget is spent; DistServe's
    disaggregated runs sat at a cost of 0.33 after one pass, 0.27 after a restart).
    Returns (z, cost, evaluations left)."""
    best = float(cost(z))
    left = evals
    while left >= 2 * len(z) + 2:
        r = minimize(
            cost,
            z,
            method="Nelder-Mead",
            options={"initial_simplex": simplex(z, frac), "maxfev": int(left), "xatol": 1e-3,
                     "fatol": 1e-5},
        )  # fmt: skip
        left -= int(r.nfev)
        gain = best - float(r.fun)
        if gain > 0:
            z, best = r.x, float(r.fun)
        if gain <= 1e-3 * max(best, 1e-12):
            break
    return z, best, left


KV_STEPS = (-0.15, -0.1, -0.05, 0.05, 0.1)  # kv_margin offsets tried around the coarse optimum
KV_EVALS = 40  # evaluations re-fitting the other parameters at each


def _kv_profile(cost: Any, z: F64, k: int, best: float, lo: float, hi: float, simplex: Any) -> F64:
    """Profile the KV capacity: at a few margins around the coarse optimum, re-fit the other
    parameters from there (a short, small simplex) and keep the best.

    KV capacity and decode speed trade off at saturation (fewer requests in flight, each
    faster, gives the same throughput), and a capacity step moves whole requests across the
    admission cliff, so a simplex over all the parameters stalls at the margin it started from:
    DistServe's vLLM at 4 req/s stayed at +5 % over its log's peak (TPOT +12 / +19 % at
    p50 / p90) where -5 % gives +1 / +2 % with TTFT within 4 %. ``k``: the margin's position
    in the free parameters ``z``."""
    scale = SCALE[KV]
    m0 = z[k] * scale
    tried = {round(min(max(m0 + d, lo * scale), hi * scale), 6) for d in KV_STEPS} - {round(m0, 6)}
    others = np.delete(z, k)
    for m in sorted(tried):
        zm = m / scale

        def at(zo: F64, zm: float = zm) -> float:
            return float(cost(np.insert(zo, k, zm)))

        r = minimize(
            at,
            others,
            method="Nelder-Mead",
            options={"initial_simplex": simplex(others, 0.1), "maxfev": KV_EVALS},
        )
        if r.fun < best:
            best, z = float(r.fun), np.insert(r.x, k, zm)
    return z


FOLDS = 5  # jackknife blocks: each run's scored requests in five contiguous stretches of time


def _jackknife(
    runs: list[Run], dep: Deployment, scheduler: str, peak: float, max_evals: int
) -> F64:
    """Refits with one block of requests left unscored, shape (FOLDS, len(PARAMS)).

    Why: the Jacobian's intervals treat every request's error as independent, but requests that
    shared a queue share their errors, and the rugged cost has valleys a 2 % difference cannot
    see; on a synthetic log whose true parameters replay it exactly they were +-0.02 % around
    values up to 43 % off the truth. Dropping a block of time (every run's k-th fifth of its
    scored requests; they stay in the replay as load) and refitting from both starts on half
    the budget measures how far the data (and the search) move the answer: the delete-a-group
    jackknife (Efron & Tibshirani, *An Introduction to the Bootstrap*, ch. 11). A block is
    minutes of serving, far longer than a queue's busy period, so blocks are close to
    independent. The blocks are cut separately inside and after the coarse pass's window (a
    run's first WINDOW requests), so every fold's coarse pass still scores four fifths of it
    (one contiguous fifth of a 10,000-request run left the window with nothing to score)."""
    out = np.empty((FOLDS, len(PARAMS)))
    for k in range(FOLDS):
        folded = []
        for r in runs:
            scored = np.flatnonzero(r.scored)
            head, tail = scored[scored < WINDOW], scored[scored >= WINDOW]
            idx = np.concatenate(
                [np.array_split(head, FOLDS)[k], np.array_split(tail, FOLDS)[k]]
            ).astype(np.int64)
            keep = r.scored.copy()
            keep[idx] = False
            folded.append(replace(r, scored=keep) if keep.any() else r)
        evals = max(max_evals // len(STARTS) // 2, 1)
        fits = [
            _fit(folded, dep, scheduler, evals, x_start=x0, peak=peak, jacobian=False)[0]
            for x0 in STARTS
        ]
        out[k] = min(fits, key=lambda f: f.cost).x
    return out


def _widen(res: Any, folds: F64, ci: dict, status: dict) -> tuple[dict, dict]:
    """The wider of the Jacobian's and the jackknife's 95 % intervals, and the verdicts again:
    a parameter whose interval spans more than its own size is not identifiable."""
    g = len(folds)
    se = np.sqrt((g - 1) / g * np.sum((folds - folds.mean(axis=0)) ** 2, axis=0))
    ci, status = dict(ci), dict(status)
    for i, name in enumerate(PARAMS):
        if ci.get(name) is None:
            continue
        x, lo, hi = float(res.x[i]), float(res.lower[i]), float(res.upper[i])
        j = (max(lo, x - 1.96 * float(se[i])), min(hi, x + 1.96 * float(se[i])))
        ci[name] = (min(ci[name][0], j[0]), max(ci[name][1], j[1]))
        if status[name] == "fitted" and 1.96 * se[i] > max(abs(x), 1e-12):
            status[name] = "not identifiable"
    return ci, status


def _summarise(res: Any, kv_fixed: bool) -> tuple[dict, dict, dict]:
    x = res.x
    m, p = len(res.fun), int(np.sum(res.upper > res.lower))  # p: the parameters fitted
    jac = res.jac
    try:
        s2 = float(np.sum(res.fun**2)) / max(m - p, 1)
        cov = np.linalg.pinv(jac.T @ jac) * s2
        se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    except np.linalg.LinAlgError:
        se = np.full(len(x), np.inf)
    values, ci, status = {}, {}, {}
    for i, name in enumerate(PARAMS):
        values[name] = float(x[i])
        lo, hi = res.lower[i], res.upper[i]
        if name == "kv_margin" and kv_fixed:
            ci[name], status[name] = None, "recorded"
            continue
        if lo == hi:  # frozen: not a parameter of this deployment (kv_link_share colocated)
            ci[name], status[name] = None, "not used"
            continue
        width = (hi - lo) * 1e-3
        at_bound = x[i] - lo <= width or hi - x[i] <= width
        ci[name] = (float(max(lo, x[i] - 1.96 * se[i])), float(min(hi, x[i] + 1.96 * se[i])))
        if at_bound:
            status[name] = "at bound"
        elif (
            not np.isfinite(se[i]) or 1.96 * se[i] > max(abs(x[i]), 1e-12) or not np.any(jac[:, i])
        ):
            status[name] = "not identifiable"
        else:
            status[name] = "fitted"
    return values, ci, status


# ---------------------------------------------------------------- metrics of one run


METRICS = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90", "e2e_p50", "e2e_p90", "throughput_tok_s")


def run_metrics(arrival: F64, ttft: F64, e2e: F64, output: NDArray[np.int64], mask=None) -> dict:
    """p50/p90 TTFT, TPOT, E2E (s) and output tokens/s over ``mask``'s requests."""
    m = np.ones(len(arrival), bool) if mask is None else mask
    a, t, e, o = arrival[m], ttft[m], e2e[m], output[m]
    tp = tpot_of(t, e, o)
    span = float((a + e).max() - a.min()) if len(a) else float("nan")
    out = {}
    for q in PERCENTILES:
        out[f"ttft_p{q:.0f}"] = float(np.percentile(t, q))
        out[f"tpot_p{q:.0f}"] = float(np.percentile(tp, q)) if len(tp) else float("nan")
        out[f"e2e_p{q:.0f}"] = float(np.percentile(e, q))
    out["throughput_tok_s"] = float(o.sum()) / span if span > 0 else float("nan")
    return out

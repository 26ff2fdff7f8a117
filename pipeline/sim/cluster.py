"""Several servers behind a router, on top of the one engine (:mod:`pipeline.sim.engine`).

A *pool* is ``replicas`` identical servers (each one :class:`EngineConfig` and cost model) and a
routing policy:

- ``round-robin``: request i (in arrival order) goes to server i mod R. Servers are independent,
  so each is simulated on its own.
- ``least-loaded``: each request goes to the server with the fewest outstanding requests (routed
  and not yet finished) at its arrival; ties go to the lowest index (Vidur's LOR). This couples
  the servers, so they are advanced together: before routing a request that arrives at T, every
  server is advanced to T. A server's closed-form decode runs are then cut at T (its next
  request is not known yet); runs are exact, so cutting them changes nothing but speed. For
  roofline and per-phase costs the compiled kernel (:mod:`pipeline.sim.compiled`) does the same
  routing inside its loop; this Python path is the reference it is tested against.

:class:`ReplicaEngine` is the engine with requests added as they are routed, a time horizon, and
(optionally) a record of every step: start, end, sequences, prefill tokens, decode tokens and KV
blocks in use (after the step's allocations). The scheduling policy is the engine's, unchanged.

:class:`StaticEngine` is request-level (static) batching: when the server is idle it takes up to
``max_batch`` waiting requests, prefills them padded to the longest prompt in one step, then runs
decode steps for the whole batch until its longest output is done (finished sequences keep their
slot as padding); nothing joins a running batch. KV is reserved at ``reserve_tokens`` per request.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from pipeline.sim import compiled
from pipeline.sim.config import EngineConfig
from pipeline.sim.decode_run import step_ends
from pipeline.sim.engine import CostModel, _Engine, _load, _validate
from pipeline.sim.result import SimResult

ROUTING = ("round-robin", "least-loaded")
STEP_COLUMNS = ("t_start", "t_end", "seqs", "prefill_tokens", "decode_tokens", "kv_blocks")
NAN = float("nan")


class _StepLog:
    """Steps of one server as lists of numpy chunks (single steps are buffered in lists)."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float, int, int, int, int]] = []
        self.chunks: list[tuple[NDArray, ...]] = []

    def flush(self) -> None:
        if self.rows:
            cols = list(zip(*self.rows, strict=True))
            self.chunks.append(tuple(np.asarray(c) for c in cols))
            self.rows = []

    def arrays(self) -> dict[str, NDArray]:
        self.flush()
        if not self.chunks:
            return {c: np.empty(0) for c in STEP_COLUMNS}
        out = {
            name: np.concatenate([ch[i] for ch in self.chunks])
            for i, name in enumerate(STEP_COLUMNS)
        }
        order = np.argsort(out["t_start"], kind="stable")
        return {k: v[order] for k, v in out.items()}


class _RunLog:
    """Steps of one continuous-batching server, kept flat while it runs and tabulated at the end.

    A single step is one row of six numbers. A closed-form decode run is (rows logged before it,
    start time, first decode step, steps, batch, KV blocks before it) plus the decoders' block
    phases (``hist``): its steps' times are the engine's ``dec_end`` entries and its blocks a
    cumulative sum of the phases' claims, both expanded with numpy in :meth:`arrays`.
    """

    def __init__(self, engine: ReplicaEngine) -> None:
        self.engine = engine
        self.rows = array("d")  # t_start, t_end, seqs, prefill, decode, kv_blocks per step
        self.runs = array("d")  # rows before, t_start, first decode step, steps, batch, blocks
        self.hists = array("i")  # block_size entries per run

    def step(self, t0: float, t1: float, seqs: int, prefill: int, dec: int, used: int) -> None:
        self.rows.extend((t0, t1, seqs, prefill, dec, used))

    def run(self, e: _Engine, k: int) -> None:
        """Called by the engine before it applies a run of k decode steps."""
        self.runs.extend((len(self.rows) // 6, e.t, e.G, k, e.B, e.used))
        self.hists.extend(e.hist)

    def arrays(self) -> dict[str, NDArray]:
        rows = np.array(self.rows, dtype=np.float64).reshape(-1, 6)
        runs = np.array(self.runs, dtype=np.float64).reshape(-1, 6)
        nr, n_runs = len(rows), len(runs)
        before, g0, k, b, used0 = (runs[:, c].astype(np.int64) for c in (0, 2, 3, 4, 5))
        kcum = np.concatenate(([0], np.cumsum(k)))
        total = nr + int(kcum[-1])
        if not total:
            return {c: np.empty(0) for c in STEP_COLUMNS}
        cols = [np.empty(total), np.empty(total)] + [np.empty(total, np.int64) for _ in range(4)]
        # Rows go after the runs logged before them, runs after the rows logged before them.
        row_pos = np.arange(nr) + kcum[np.searchsorted(before, np.arange(nr), side="right")]
        for c in range(6):
            cols[c][row_pos] = rows[:, c]
        rid = np.repeat(np.arange(n_runs), k)
        u = np.arange(int(kcum[-1])) - kcum[:-1][rid]  # step within its run
        pos = (before + kcum[:-1])[rid] + u
        g = g0[rid] + u
        dec_end = np.frombuffer(self.engine.dec_end, dtype=np.float64)
        cols[1][pos] = dec_end[g]
        cols[0][pos] = np.where(u == 0, runs[:, 1][rid], dec_end[np.maximum(g - 1, 0)])
        cols[2][pos] = cols[4][pos] = b[rid]
        cols[3][pos] = 0
        bs = self.engine.bs
        hist = np.array(self.hists, dtype=np.int64).reshape(n_runs, bs)
        claims = np.cumsum(hist[rid, (-g) % bs])
        start = np.concatenate(([0], claims))[kcum[:-1]]
        cols[5][pos] = used0[rid] + claims - start[rid]
        out = dict(zip(STEP_COLUMNS, cols, strict=True))
        if not np.all(out["t_start"][1:] >= out["t_start"][:-1]):
            order = np.argsort(out["t_start"], kind="stable")
            out = {c: v[order] for c, v in out.items()}
        return out


class _Recorder:
    """Cost model wrapper that remembers the work of the last step for the step log."""

    def __init__(self, engine: ReplicaEngine, cost: CostModel) -> None:
        self.engine, self.cost = engine, cost
        self.last = (0.0, 0.0, 0)
        self.decode_lines = cost.decode_lines  # type: ignore[method-assign]

    def time_of(
        self, tokens: float, seqs: float, attn_pairs: float, kv_tokens: float, score_elems: float
    ) -> float:
        self.last = (tokens, seqs, self.engine.used)
        return self.cost.time_of(tokens, seqs, attn_pairs, kv_tokens, score_elems)

    def decode_lines(self, batch: int, sum_context: float):  # type: ignore[no-untyped-def]
        return self.cost.decode_lines(batch, sum_context)


class ReplicaEngine(_Engine):
    """One server of a pool: requests are added in arrival order as they are routed."""

    def __init__(
        self, config: EngineConfig, cost: CostModel, *, fast: bool = True, record: bool = False
    ) -> None:
        e = np.empty(0, dtype=np.int64)
        super().__init__(np.empty(0), e, e, e, config, cost)
        self.fast = fast
        self.ids: list[int] = []  # global request index of each local one
        self.finish_times: list[float] = []  # in completion order (non-decreasing)
        self.log: _RunLog | None = _RunLog(self) if record else None  # type: ignore[assignment]
        self._dec_preempted = 0
        if record:
            self.cost = _Recorder(self, cost)

    def add(
        self, gid: int, arrival: float, prompt: int, out: int, cached: int, load: float = 0.0
    ) -> None:
        self.order.append(len(self.arr))
        self._extend([arrival], [prompt], [out], [min(cached, max(prompt - 1, 0))], [load])
        self.ids.append(gid)

    def add_many(self, gid: NDArray, arrival: NDArray, prompt: NDArray, out: NDArray,
                 cached: NDArray, load: NDArray) -> None:  # fmt: skip
        """``add`` for many requests at once (in arrival order)."""
        r = len(self.arr)
        cached = np.minimum(cached, np.maximum(prompt - 1, 0))
        self.order.extend(range(r, r + len(gid)))
        self._extend(arrival.tolist(), prompt.tolist(), out.tolist(), cached.tolist(),
                     load.tolist())  # fmt: skip
        self.ids.extend(gid.tolist())

    def outstanding(self, t: float) -> int:
        """Requests routed here and not finished by time t."""
        return len(self.ids) - bisect.bisect_right(self.finish_times, t)

    def advance(self, horizon: float = math.inf) -> None:
        """Run until the clock reaches ``horizon`` (a step under way finishes) or all is done."""
        self.horizon = horizon
        while True:
            self._queue_arrivals()
            if not self.running and not self.waiting:
                if self.nxt >= len(self.order):
                    break
                self.t = self.arr[self.order[self.nxt]]
                continue
            if self.t >= horizon:
                break
            self.iterations += 1
            if self.fast and self._try_decode_run():
                continue
            self._step()

    def result(self) -> SimResult:
        return self._result()

    # -- hooks around the engine's own methods (its policy is not changed) ------------------
    def _finish(self, r: int, t_end: float, kv_tokens: int) -> None:
        super()._finish(r, t_end, kv_tokens)
        self.finish_times.append(t_end)

    def _preempt(self, r: int) -> int:
        if r in self.decoders:
            self._dec_preempted += 1
        return super()._preempt(r)

    def _step(self) -> None:
        if self.log is None:
            super()._step()
            return
        t0, g0, b0 = self.t, self.G, self.B
        self._dec_preempted = 0
        super()._step()
        tokens, seqs, used = self.cost.last  # type: ignore[attr-defined]
        dec = b0 - self._dec_preempted if g0 < self.G else 0
        self.log.step(t0, self.t, int(seqs), int(tokens) - dec, dec, used)


class StaticEngine:
    """Request-level batching (FasterTransformer / HF generate): see the module docstring."""

    def __init__(
        self,
        max_batch: int,
        reserve_tokens: int,
        block_size: int,
        cost: CostModel,
        *,
        record: bool = False,
    ) -> None:
        if max_batch < 1:
            raise ValueError("static batching: the KV cache holds no request at its reservation")
        self.max_batch, self.reserve = max_batch, reserve_tokens
        self.blocks_per_req = -(-reserve_tokens // block_size)
        self.cost = cost
        self.arr: list[float] = []
        self.prompt: list[int] = []
        self.out: list[int] = []
        self.ids: list[int] = []
        self.finish_times: list[float] = []
        self.waiting: deque[int] = deque()
        self.nxt, self.t, self.G, self.steps, self.iterations, self.busy = 0, 0.0, 0, 0, 0, 0.0
        self.dec_chunks: list[NDArray] = []
        self.scheduled: list[float] = []
        self.first: list[float] = []
        self.finish: list[float] = []
        self.seg_dec_start: list[int] = []
        self.seg_dec_count: list[int] = []
        self.log = _StepLog() if record else None

    def add(
        self, gid: int, arrival: float, prompt: int, out: int, cached: int = 0, load: float = 0.0
    ) -> None:
        self.arr.append(arrival)
        self.prompt.append(prompt)
        self.out.append(out)
        self.ids.append(gid)
        for lst in (self.scheduled, self.first, self.finish):
            lst.append(NAN)
        self.seg_dec_start.append(0)
        self.seg_dec_count.append(0)

    def add_many(self, gid: NDArray, arrival: NDArray, prompt: NDArray, out: NDArray,
                 cached: NDArray, load: NDArray) -> None:  # fmt: skip
        for a in zip(gid.tolist(), arrival.tolist(), prompt.tolist(), out.tolist(), strict=True):
            self.add(*a)

    def outstanding(self, t: float) -> int:
        return len(self.ids) - bisect.bisect_right(self.finish_times, t)

    def advance(self, horizon: float = math.inf) -> None:
        while True:
            while self.nxt < len(self.arr) and self.arr[self.nxt] <= self.t:
                self.waiting.append(self.nxt)
                self.nxt += 1
            if not self.waiting:
                if self.nxt >= len(self.arr):
                    break
                self.t = self.arr[self.nxt]
                continue
            if self.t >= horizon:
                break
            self._batch()

    def _batch(self) -> None:
        take = [self.waiting.popleft() for _ in range(min(self.max_batch, len(self.waiting)))]
        b = len(take)
        p = max(self.prompt[r] for r in take)  # padded to the longest prompt
        o = max(self.out[r] for r in take)
        t0 = self.t
        tokens = float(b * p)
        dt = self.cost.time_of(tokens, b, tokens * p / 2.0, tokens, tokens * p)
        t1 = t0 + dt
        self.iterations += 1
        self.steps += 1
        blocks = b * self.blocks_per_req
        if self.log is not None:
            self.log.rows.append((t0, t1, b, b * p, 0, blocks))
        ends = np.empty(0)
        if o > 1:
            ends = step_ends(self.cost.decode_lines(b, float(b * p)), t1, o - 1)
            self.dec_chunks.append(ends)
            if self.log is not None:
                self.log.flush()
                n = o - 1
                full = np.full(n, b)
                starts = np.concatenate(([t1], ends[:-1]))
                self.log.chunks.append(
                    (starts, ends, full, np.zeros(n, np.int64), full, np.full(n, blocks))
                )
            self.steps += o - 1
        t_end = float(ends[-1]) if o > 1 else t1
        for r in sorted(take, key=lambda r: self.out[r]):
            self.scheduled[r] = t0
            if self.out[r] >= 1:
                self.first[r] = t1
            self.finish[r] = float(ends[self.out[r] - 2]) if self.out[r] > 1 else t1
            self.seg_dec_start[r] = self.G
            self.seg_dec_count[r] = max(self.out[r] - 1, 0)
            self.finish_times.append(self.finish[r])
        self.G += max(o - 1, 0)
        self.busy += t_end - t0
        self.t = t_end

    def result(self) -> SimResult:
        n = len(self.arr)
        has = np.asarray(self.out, dtype=np.int64) >= 1
        idx = np.flatnonzero(has)
        dec = np.concatenate(self.dec_chunks) if self.dec_chunks else np.empty(0)
        return SimResult(
            scheduled=np.asarray(self.scheduled, dtype=np.float64),
            first_token=np.asarray(self.first, dtype=np.float64),
            finish=np.asarray(self.finish, dtype=np.float64),
            preemptions=np.zeros(n, dtype=np.int64),
            decode_step_end=dec,
            seg_request=idx.astype(np.int64),
            seg_first_time=np.asarray(self.first, dtype=np.float64)[idx],
            seg_dec_start=np.asarray(self.seg_dec_start, dtype=np.int64)[idx],
            seg_dec_count=np.asarray(self.seg_dec_count, dtype=np.int64)[idx],
            steps=self.steps,
            iterations=self.iterations,
            busy_time=self.busy,
        )


@dataclass(frozen=True)
class Pool:
    """``replicas`` identical servers behind one router.

    ``static_batch``: None for continuous batching (``config``'s scheduler); an int for static
    batching with at most that many requests per batch, each reserving ``static_reserve`` tokens.
    """

    config: EngineConfig
    cost: CostModel
    replicas: int = 1
    routing: str = "round-robin"
    static_batch: int | None = None
    static_reserve: int = 0

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError("a pool needs at least one replica")
        if self.routing not in ROUTING:
            raise ValueError(f"routing must be one of {ROUTING}, got {self.routing!r}")


@dataclass
class PoolResult:
    """Per request (global index): its server, local index there and timestamps; per server:
    its SimResult, the global index of each local request, and its step log."""

    replica: NDArray[np.int64]
    local: NDArray[np.int64]
    scheduled: NDArray[np.float64]
    first_token: NDArray[np.float64]
    finish: NDArray[np.float64]
    preemptions: NDArray[np.int64]
    servers: list[SimResult]
    ids: list[NDArray[np.int64]]
    steps: list[dict[str, NDArray]] = field(default_factory=list)
    iterations: int = 0
    engine_steps: int = 0

    def token_times(self, server: int, lo: int, hi: int) -> tuple[NDArray, NDArray]:
        return self.servers[server].token_times(lo, hi)


def _engine(pool: Pool, fast: bool, record: bool) -> ReplicaEngine | StaticEngine:
    if pool.static_batch is not None:
        return StaticEngine(
            pool.static_batch, pool.static_reserve, pool.config.block_size, pool.cost,
            record=record,
        )  # fmt: skip
    return ReplicaEngine(pool.config, pool.cost, fast=fast, record=record)


def simulate_pool(
    arrival: NDArray,
    prompt: NDArray,
    output: NDArray,
    pool: Pool,
    cached: NDArray | None = None,
    *,
    load: NDArray | None = None,
    fast: bool = True,
    record_steps: bool = False,
    subset: NDArray | None = None,
) -> PoolResult:
    """Route and simulate the requests (``subset`` of the global indices, default all).

    ``load``: seconds per request that the step admitting it is held up (engine.simulate's
    ``load_seconds``: a disaggregated decode server pulling the prompt's KV)."""
    arrival = np.asarray(arrival, dtype=np.float64)
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.asarray(output, dtype=np.int64)
    n = len(arrival)
    cached = np.zeros(n, np.int64) if cached is None else np.asarray(cached, np.int64)
    idx = np.arange(n) if subset is None else np.asarray(subset, dtype=np.int64)
    load = _load(load, n)
    if pool.static_batch is not None and load[idx].any():
        raise ValueError("static batching does not model KV moved in at admission (load)")
    if pool.static_batch is None:
        _validate(arrival[idx], prompt[idx], output[idx], cached[idx], pool.config)
    order = idx[np.argsort(arrival[idx], kind="stable")]
    replica = np.full(n, -1, dtype=np.int64)
    local = np.full(n, -1, dtype=np.int64)
    independent = pool.routing == "round-robin" or pool.replicas == 1
    if fast and pool.static_batch is None and compiled.eligible(pool.cost):
        return _compiled_pool(arrival, prompt, output, cached, load, pool, order, record_steps)
    engines = [_engine(pool, fast, record_steps) for _ in range(pool.replicas)]
    if independent:
        for j, e in enumerate(engines):
            sub = order[j :: pool.replicas]
            local[sub], replica[sub] = np.arange(len(sub)), j
            e.add_many(sub, arrival[sub], prompt[sub], output[sub], cached[sub], load[sub])
    else:  # least outstanding requests at arrival
        a_l, p_l, o_l, c_l, l_l = (x.tolist() for x in (arrival, prompt, output, cached, load))
        for g in order.tolist():
            t = a_l[g]
            best, best_load = 0, None
            for j, e in enumerate(engines):
                e.advance(t)
                held = e.outstanding(t)
                if best_load is None or held < best_load:
                    best, best_load = j, held
            e = engines[best]
            local[g], replica[g] = len(e.ids), best
            e.add(g, t, p_l[g], o_l[g], c_l[g], l_l[g])
    servers, ids, steps = [], [], []
    for e in engines:
        e.advance(math.inf)
        servers.append(e.result())
        ids.append(np.asarray(e.ids, dtype=np.int64))
        if record_steps and e.log is not None:
            steps.append(e.log.arrays())
    return _pool_result(n, replica, local, servers, ids, steps)


def _compiled_pool(
    arrival: NDArray, prompt: NDArray, output: NDArray, cached: NDArray, load: NDArray,
    pool: Pool, order: NDArray, record_steps: bool,
) -> PoolResult:  # fmt: skip
    """All servers in one compiled kernel call (routing included)."""
    n = len(arrival)
    c = np.minimum(cached, np.maximum(prompt - 1, 0))
    route, per = compiled.run_pool(
        arrival, order, prompt, output, c, pool.replicas, pool.routing == "least-loaded",
        pool.config, pool.cost, record=record_steps, load=load,
    )  # fmt: skip
    local = np.full(n, -1, dtype=np.int64)
    servers, ids, steps = [], [], []
    for sub, res, log in per:
        local[sub] = np.arange(len(sub))
        servers.append(res)
        ids.append(sub)
        if log is not None:
            steps.append(log)
    return _pool_result(n, route, local, servers, ids, steps)


def _pool_result(
    n: int, replica: NDArray, local: NDArray, servers: list[SimResult], ids: list[NDArray],
    steps: list[dict[str, NDArray]],
) -> PoolResult:  # fmt: skip
    sched, first, fin = np.full(n, NAN), np.full(n, NAN), np.full(n, NAN)
    pre = np.zeros(n, dtype=np.int64)
    for r, g in zip(servers, ids, strict=True):
        sched[g], first[g], fin[g], pre[g] = r.scheduled, r.first_token, r.finish, r.preemptions
    return PoolResult(
        replica=replica,
        local=local,
        scheduled=sched,
        first_token=first,
        finish=fin,
        preemptions=pre,
        servers=servers,
        ids=ids,
        steps=steps,
        iterations=sum(r.iterations for r in servers),
        engine_steps=sum(r.steps for r in servers),
    )

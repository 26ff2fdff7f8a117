"""The simulator engine: continuous batching with paged KV and preemption by recompute.

One call simulates one server. Inputs are per-request arrays (arrival time, prompt tokens,
output tokens, prefix-cached prompt tokens), an :class:`EngineConfig` and a cost model with
``time_of(tokens, seqs, attn_pairs, kv_tokens, score_elems)`` and ``decode_lines(batch, sum_ctx)``
(:class:`pipeline.physics.StepCost`, or fitted values later). The same engine drives the synthetic
generator and ``pipeline replay``.

Scheduling per step (the policy is spelled out in docs/simulator.md):
1. requests that arrived by the step's start join the FCFS waiting queue;
2. every running decode gets one token; a decode that needs a new KV block when none is free
   preempts the most recently admitted running request (its KV is dropped; it re-queues at the
   front and later recomputes prompt + generated tokens);
3. partial prefills continue (chunked mode), then waiting requests are admitted while sequences,
   token budget and KV blocks allow (none in a step that preempted).
The step's time comes from its aggregate work; it ends, tokens are emitted at its end.

Speed: between events (an arrival that could be admitted, a completion, a KV shortage) the batch
is a fixed set of decodes whose contexts grow by one per step. Such runs are advanced in closed
form (:mod:`pipeline.sim.decode_run`), so the Python loop runs a few times per request, not once
per step. Per-request context is kept implicitly: a decoder that joined at decode step g with
context c has context c + (G - g) at decode step G, so the batch's sum of contexts and the count
of decoders about to cross a KV-block boundary are O(1) aggregates.

Where the cost model is a (per-phase) StepCost, ``simulate`` runs the same policy compiled
(:mod:`pipeline.sim.compiled`), one step at a time; it matches ``fast=False`` bit for bit.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

from pipeline.physics import DecodeLines
from pipeline.sim import compiled
from pipeline.sim.config import EngineConfig
from pipeline.sim.decode_run import run_ends
from pipeline.sim.result import F64, I64, SimResult

NAN = float("nan")


class CostModel(Protocol):
    def time_of(
        self, tokens: float, seqs: float, attn_pairs: float, kv_tokens: float, score_elems: float
    ) -> float: ...

    def decode_lines(self, batch: int, sum_context: float) -> DecodeLines: ...


def simulate(
    arrival: ArrayLike,
    prompt_tokens: ArrayLike,
    output_tokens: ArrayLike,
    config: EngineConfig,
    cost: CostModel,
    cached_tokens: ArrayLike | None = None,
    *,
    load_seconds: ArrayLike | None = None,
    fast: bool = True,
) -> SimResult:
    """Simulate one server over all requests.

    ``fast``: the compiled step loop (:mod:`pipeline.sim.compiled`) where the cost model has one,
    else the Python engine with closed-form decode runs; ``fast=False`` is the Python engine one
    step at a time (the reference both fast paths are tested against).

    ``load_seconds``: per request, seconds the step that first admits it is held up by moving
    its cached KV in (a disaggregated decode instance pulls a prompt's KV from the prefill
    instance between its steps: DistServe's decode loop awaits each migration); default none."""
    arr = np.asarray(arrival, dtype=np.float64)
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    out = np.asarray(output_tokens, dtype=np.int64)
    n = len(arr)
    cached = np.zeros(n, np.int64) if cached_tokens is None else np.asarray(cached_tokens, np.int64)
    _validate(arr, prompt, out, cached, config)
    # A prompt is never fully served from cache: the last token is recomputed for its logits.
    cached = np.minimum(cached, np.maximum(prompt - 1, 0))
    load = _load(load_seconds, n)
    if fast and compiled.eligible(cost):
        order = np.argsort(arr, kind="stable")
        return compiled.run(arr, order, prompt, out, cached, config, cost, load=load)[0]
    return _Engine(arr, prompt, out, cached, config, cost, load).run(fast)


def _load(load_seconds: ArrayLike | None, n: int) -> F64:
    load = np.zeros(n) if load_seconds is None else np.asarray(load_seconds, np.float64)
    if load.shape != (n,) or (n and not (np.all(np.isfinite(load)) and load.min() >= 0)):
        raise ValueError("load_seconds must be one finite, non-negative value per request")
    return load


def _validate(arr: F64, prompt: I64, out: I64, cached: I64, config: EngineConfig) -> None:
    if not (len(arr) == len(prompt) == len(out) == len(cached)):
        raise ValueError("arrival, prompt_tokens, output_tokens, cached_tokens differ in length")
    if len(arr) and (not np.all(np.isfinite(arr)) or prompt.min() < 1 or out.min() < 0):
        raise ValueError("arrivals must be finite, prompts >= 1 token, outputs >= 0 tokens")
    peak = prompt + np.maximum(out - 1, 0)  # KV tokens a request holds at its end
    too_big = int(np.sum(-(-peak // config.block_size) > config.total_blocks))
    if too_big:
        raise ValueError(
            f"{too_big} request(s) need more KV than the server holds "
            f"({config.kv_capacity_tokens} tokens); clip prompt + output lengths"
        )
    if not config.chunked_prefill and len(arr) and int(peak.max()) > config.max_batched_tokens:
        # A preempted request re-prefills prompt + generated tokens in one step.
        raise ValueError(
            "without chunked prefill max_batched_tokens must cover prompt + output - 1 "
            f"(longest is {int(peak.max())}); vLLM likewise requires >= max_model_len"
        )


class _Engine:
    """Mutable state of one simulation (a class only to keep the step logic readable)."""

    def __init__(
        self,
        arr: F64,
        prompt: I64,
        out: I64,
        cached: I64,
        config: EngineConfig,
        cost: CostModel,
        load: F64 | None = None,
    ) -> None:
        self.cfg, self.cost = config, cost
        # Steps with prefill work run no decodes: vLLM v0 (unchunked, unmixed), SGLang (chunked).
        self._prefill_first = config.prefill_first or not (
            config.chunked_prefill or config.mixed_prefill
        )
        self.bs, self.total_blocks = config.block_size, config.total_blocks
        self.watermark = config.watermark_blocks  # admissions leave these free (vLLM V0)
        # Per-request state, one list each, indexed by local request; _extend grows them all.
        self.arr: list[float] = []
        self.prompt: list[int] = []
        self.out: list[int] = []
        self.cached: list[int] = []
        self.load: list[float] = []  # see simulate's load_seconds
        self.p_eff: list[int] = []  # tokens to prefill: prompt (+ generated, after preemption)
        self.done: list[int] = []  # tokens whose KV exists in the current prefill
        self.emitted: list[int] = []
        self.cj: list[int] = []  # context when it became a decoder
        self.gj: list[int] = []  # decode-step index when it became a decoder
        self.seg: list[int] = []  # its open segment
        self.scheduled: list[float] = []
        self.first: list[float] = []
        self.finish: list[float] = []
        self.preempted: list[int] = []
        n = len(arr)
        self._extend(
            arr.tolist(), prompt.tolist(), out.tolist(), cached.tolist(),
            [0.0] * n if load is None else load.tolist(),
        )  # fmt: skip
        self.order = np.argsort(arr, kind="stable").tolist()
        # Queues. running keeps admission order (dict: O(1) removal, last item = newest).
        self.waiting: deque[int] = deque()
        self.running: dict[int, None] = {}
        self.prefilling: dict[int, None] = {}
        self.decoders: set[int] = set()
        self.heap: list[tuple[int, int, int]] = []  # (decode step it finishes at, seg, request)
        # Aggregates over decoders.
        self.B = 0
        self.A = 0  # sum(cj - gj): sum of contexts at decode step G is A + B*G
        self.hist = [0] * self.bs  # decoders by (cj - gj) mod block_size
        self.used = 0  # KV blocks held
        self.G = 0  # decode steps run so far
        self.dec_end = array("d")  # end time of every decode step (G entries)
        # Segments.
        self.s_req: list[int] = []
        self.s_t0: list[float] = []
        self.s_g0: list[int] = []
        self.s_cnt: list[int] = []
        self.t = 0.0
        self.steps = 0
        self.iterations = 0  # scheduler decisions taken in Python (steps or closed-form runs)
        self.busy = 0.0
        self.nxt = 0  # next request (in arrival order) not yet queued
        self.horizon = math.inf  # runs stop before it, as before an arrival
        self.log = None  # a step log (pipeline.sim.cluster) records runs when set

    def _extend(
        self, arr: list[float], prompt: list[int], out: list[int], cached: list[int],
        load: list[float],
    ) -> None:  # fmt: skip
        """Append requests to every per-request list: the one place that knows them all (the
        constructor, and a pool's server receiving requests as they are routed)."""
        m = len(arr)
        self.arr.extend(arr)
        self.prompt.extend(prompt)
        self.out.extend(out)
        self.cached.extend(cached)
        self.load.extend(load)
        self.p_eff.extend(prompt)
        self.done.extend(cached)
        for lst, v in (
            (self.emitted, 0), (self.cj, 0), (self.gj, 0), (self.seg, -1), (self.preempted, 0),
            (self.scheduled, NAN), (self.first, NAN), (self.finish, NAN),
        ):  # fmt: skip
            lst.extend([v] * m)

    # ---------------------------------------------------------------- bookkeeping helpers
    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    def _become_decoder(self, r: int) -> None:
        ctx = self.p_eff[r]
        self.cj[r], self.gj[r] = ctx, self.G
        self.decoders.add(r)
        self.B += 1
        self.A += ctx - self.G
        self.hist[(ctx - self.G) % self.bs] += 1
        remaining = self.out[r] - self.emitted[r]
        heapq.heappush(self.heap, (self.G + remaining, self.seg[r], r))

    def _leave_decoders(self, r: int) -> int:
        """Remove decoder r from the aggregates; returns its context (tokens in KV)."""
        key = self.cj[r] - self.gj[r]
        self.decoders.discard(r)
        self.B -= 1
        self.A -= key
        self.hist[key % self.bs] -= 1
        steps = self.G - self.gj[r]
        self.s_cnt[self.seg[r]] = steps
        self.emitted[r] += steps
        return self.cj[r] + steps

    def _emit_prefill_token(self, r: int, t_end: float) -> None:
        if self.first[r] != self.first[r]:  # NaN: first emission ever
            self.first[r] = t_end
        self.emitted[r] += 1
        self.seg[r] = len(self.s_req)
        self.s_req.append(r)
        self.s_t0.append(t_end)
        self.s_g0.append(self.G)
        self.s_cnt.append(0)

    def _finish(self, r: int, t_end: float, kv_tokens: int) -> None:
        self.finish[r] = t_end
        self.used -= self._blocks(kv_tokens)
        del self.running[r]

    def _preempt(self, r: int) -> int:
        """Drop running request r's KV and re-queue it at the front; returns it."""
        del self.running[r]
        if r in self.decoders:
            kv = self._leave_decoders(r)
            self.seg[r] = -1  # its heap entry is now stale
        else:
            kv = self.done[r]
            del self.prefilling[r]
        self.used -= self._blocks(kv)
        self.p_eff[r] = self.prompt[r] + self.emitted[r]
        self.done[r] = self.cached[r]
        self.preempted[r] += 1
        self.waiting.appendleft(r)
        return r

    # ---------------------------------------------------------------- the loop
    def run(self, fast: bool) -> SimResult:
        n = len(self.arr)
        while True:
            self._queue_arrivals()
            if not self.running and not self.waiting:
                if self.nxt >= n:
                    break
                self.t = self.arr[self.order[self.nxt]]
                continue
            self.iterations += 1
            if fast and self._try_decode_run():
                continue
            self._step()
        return self._result()

    def _queue_arrivals(self) -> None:
        order, arr, n, nxt, t = self.order, self.arr, len(self.arr), self.nxt, self.t
        if nxt < n and arr[order[nxt]] <= t:
            while nxt < n and arr[order[nxt]] <= t:
                self.waiting.append(order[nxt])
                nxt += 1
            self.nxt = nxt

    def _head_admissible(self, free: int, budget: int) -> bool:
        """Could the head of the queue be admitted with ``free`` blocks and ``budget`` tokens?"""
        if not self.waiting or len(self.running) >= self.cfg.max_num_seqs or budget <= 0:
            return False
        r = self.waiting[0]
        todo = self.p_eff[r] - self.done[r]
        if self.cfg.chunked_prefill:
            todo = min(todo, budget, self.cfg.chunk_cap)
        elif todo > budget:
            return False
        return self._blocks(self.done[r] + todo) <= free - self.watermark

    def _partial_fits(self, budget: int) -> bool:
        """The oldest partial prefill's next chunk has its KV blocks free (chunked mode)."""
        if not self.prefilling:
            return False
        r = next(iter(self.prefilling))
        todo = min(self.p_eff[r] - self.done[r], budget, self.cfg.chunk_cap)
        need = self._blocks(self.done[r] + todo) - self._blocks(self.done[r])
        return need <= self.total_blocks - self.used

    def _step(self) -> None:
        cfg, t = self.cfg, self.t
        budget = cfg.max_batched_tokens
        run_decodes = True
        if self._prefill_first and (
            self._partial_fits(budget)
            or self._head_admissible(self.total_blocks - self.used, budget)
        ):
            # vLLM v0 (whole prompts) and SGLang's default (chunks): a step with prefill work
            # it can do runs only prefills; the decodes wait for the next one.
            run_decodes = False
        preempted = False
        if run_decodes and self.B:
            # Decoders whose context is a multiple of the block size need one new block now.
            while self.B and self.hist[-self.G % self.bs] > self.total_blocks - self.used:
                self._preempt(next(reversed(self.running)))  # the newest running request
                preempted = True
            self.used += self.hist[-self.G % self.bs] if self.B else 0
        dec_count = self.B if run_decodes else 0
        budget -= dec_count
        chunks: list[tuple[int, int, int]] = []  # (request, new tokens, cached/prefilled before)
        if run_decodes or cfg.prefill_first:  # partial prefills exist only when chunking
            for r in list(self.prefilling):
                if budget <= 0:
                    break
                if r not in self.prefilling:  # preempted by an earlier chunk this step
                    continue
                todo = min(self.p_eff[r] - self.done[r], budget, cfg.chunk_cap)
                need = self._blocks(self.done[r] + todo) - self._blocks(self.done[r])
                while need > self.total_blocks - self.used:
                    # Every decoder already has its token this step: the victim is the newest
                    # partial prefill (not yet scheduled), or r itself when it is the newest.
                    preempted = True
                    if self._preempt(next(reversed(self.prefilling))) == r:
                        break
                if r not in self.prefilling:
                    continue
                self.used += need
                chunks.append((r, todo, self.done[r]))
                budget -= todo
        loading = 0.0  # KV moved in for requests admitted for the first time (load_seconds)
        if not preempted:
            while self._head_admissible(self.total_blocks - self.used, budget):
                r = self.waiting.popleft()
                todo = self.p_eff[r] - self.done[r]
                if cfg.chunked_prefill:
                    todo = min(todo, budget, cfg.chunk_cap)
                self.used += self._blocks(self.done[r] + todo)  # cached prefix blocks too
                self.running[r] = None
                self.prefilling[r] = None
                if self.scheduled[r] != self.scheduled[r]:
                    self.scheduled[r] = t
                    loading += self.load[r]
                chunks.append((r, todo, self.done[r]))
                budget -= todo
        if not dec_count and not chunks:
            raise RuntimeError("scheduler stalled: nothing runnable (KV capacity too small?)")
        # Step time from aggregate work.
        sum_ctx = (self.A + self.B * self.G) if dec_count else 0
        tokens, pairs, kv, score = dec_count, sum_ctx, sum_ctx, 0
        for _, todo, before in chunks:
            tokens += todo
            pairs += todo * (before + todo / 2.0)
            kv += before + todo
            score += todo * todo
        dt = self.cost.time_of(tokens, dec_count + len(chunks), pairs, kv, score) + loading
        t_end = t + dt
        self.steps += 1
        self.busy += dt
        if dec_count:
            self.dec_end.append(t_end)
            self.G += 1
            self._complete_decoders(t_end)
        for r, todo, _ in chunks:
            self.done[r] += todo
            if self.done[r] < self.p_eff[r]:
                continue
            del self.prefilling[r]
            if self.emitted[r] < self.out[r]:
                self._emit_prefill_token(r, t_end)
            if self.emitted[r] >= self.out[r]:
                self._finish(r, t_end, self.done[r])
            else:
                self._become_decoder(r)
        self.t = t_end

    def _complete_decoders(self, t_end: float) -> None:
        heap = self.heap
        while heap and heap[0][0] <= self.G:
            _, seg, r = heapq.heappop(heap)
            if self.seg[r] != seg or r not in self.decoders:
                continue  # stale entry of a preempted segment
            kv = self._leave_decoders(r)
            self._finish(r, t_end, kv)

    def _try_decode_run(self) -> bool:
        """Advance a run of identical decode-only steps in closed form; False if none applies."""
        if self.prefilling or not self.B:
            return False
        free = self.total_blocks - self.used
        new_now = self.hist[-self.G % self.bs]
        budget = self.cfg.max_batched_tokens - self.B
        if self._prefill_first:  # any admissible prompt breaks the run
            if self._head_admissible(free, self.cfg.max_batched_tokens):
                return False
        elif self._head_admissible(free - new_now, budget):
            return False
        # Steps until the first completion, and until a step would find no free KV block.
        heap, seg = self.heap, self.seg
        while heap and (seg[heap[0][2]] != heap[0][1]):
            heapq.heappop(heap)  # drop stale entries so the top is a live decoder
        limit = heap[0][0] - self.G
        if limit > free // self.B * self.bs:  # else blocks last at least that long
            limit = min(limit, self._steps_with_blocks(free))
        if limit < 1:
            return False
        lines = self.cost.decode_lines(self.B, float(self.A + self.B * self.G))
        # A new arrival matters only if it could be admitted: queue empty and room for sequences.
        # (A horizon counts as an arrival: the next request is not known before it.)
        budget = math.inf
        if not self.waiting and len(self.running) < self.cfg.max_num_seqs:
            if self.nxt < len(self.arr):
                budget = self.arr[self.order[self.nxt]] - self.t
            elif self.horizon != math.inf:
                budget = self.horizon - self.t
        ends = run_ends(lines, self.t, limit, budget)
        k = len(ends)
        if k < 1:
            return False
        if self.log is not None:
            self.log.run(self, k)
        # Allocate the blocks the run's steps claimed: B per block_size steps, phase-shifted.
        self.used += self._new_blocks(k)
        self.steps += k
        t_end = ends[-1]
        self.busy += t_end - self.t
        self.dec_end.extend(ends)
        self.G += k
        self.t = t_end
        self._complete_decoders(t_end)
        return True

    def _new_blocks(self, k: int) -> int:
        """Blocks the decoders claim over the next k decode steps."""
        full, part = divmod(k, self.bs)
        if not part:
            return full * self.B
        # Phases (-(G + u)) mod bs for u < part: a descending, possibly wrapping, range.
        hist, hi = self.hist, -self.G % self.bs
        lo = hi - part + 1
        claimed = sum(hist[lo : hi + 1]) if lo >= 0 else sum(hist[: hi + 1]) + sum(hist[lo:])
        return full * self.B + claimed

    def _steps_with_blocks(self, free: int) -> int:
        """The most decode steps that can run before one finds too few free KV blocks."""
        full, rem = divmod(free, self.B)
        hist, g, bs = self.hist, self.G, self.bs
        extra, claimed = 0, 0
        while extra < bs:
            claimed += hist[(-(g + full * bs + extra)) % bs]
            if claimed > rem:
                break
            extra += 1
        return full * bs + extra

    def _result(self) -> SimResult:
        seg_req = np.asarray(self.s_req, dtype=np.int64)
        order = np.argsort(seg_req, kind="stable")  # by request, time order kept within one
        return SimResult(
            scheduled=np.asarray(self.scheduled),
            first_token=np.asarray(self.first),
            finish=np.asarray(self.finish),
            preemptions=np.asarray(self.preempted, dtype=np.int64),
            decode_step_end=np.array(self.dec_end, dtype=np.float64),
            seg_request=seg_req[order],
            seg_first_time=np.asarray(self.s_t0, dtype=np.float64)[order],
            seg_dec_start=np.asarray(self.s_g0, dtype=np.int64)[order],
            seg_dec_count=np.asarray(self.s_cnt, dtype=np.int64)[order],
            steps=self.steps,
            iterations=self.iterations,
            busy_time=self.busy,
        )

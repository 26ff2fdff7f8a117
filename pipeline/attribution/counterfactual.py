"""Counterfactual predictions: a slice's metrics with some factors switched to the other slice's.

A *slice* is the successful requests a predicate selects. What it is made of:

* workload: prompt lengths, output lengths (their distributions) and the offered load
  (arrival rate per server);
* deployment: model size, hardware (GPU and count), batching configuration (max_num_seqs,
  max_batched_tokens, chunked prefill), attention (implementation and the model's KV-head ratio),
  quantisation (weight and KV dtypes) -- from the slice's most common deployment;
* efficiency: the fitted MFU, MBU and overheads of each phase (``cost_models``) plus what the
  model does not explain (observed over simulated metric).

A coalition says, per factor, whether it takes the baseline's or the candidate's value. Its
metrics come from running a slice's sample of arrivals (the busiest server, first
``max_requests``) through :func:`pipeline.sim.simulate` -- the engine the generator uses --
once with the baseline's sample and once with the candidate's, averaged, with:

* prompt/output lengths: each request keeps its rank and takes the source slice's mean length
  over that rank's quantile bin (so the joint prompt-output ranks and the arrival order are
  kept, and a short sample keeps the slice's mean and tail);
* load: the offered load as *utilisation* of the serving deployment's capacity (the slice's rate
  over the requests per second its own deployment completes when every request waits at t = 0):
  a coalition runs at the load slice's utilisation of the coalition's capacity, so swapping the
  hardware keeps a deployment as busy as it was instead of pushing a slower one past
  saturation (the arrivals' gaps are scaled to that rate);
* model: the other model's size (layers, widths, parameters) with this coalition's KV-head ratio;
* the rest: the other slice's values in the StepCost and EngineConfig.

Simulation rather than a closed form, because queueing and batching make TTFT, its p90 and
TPOT non-linear in load and speed (a slower GPU both lengthens each prefill and lengthens the
queue in front of it). A calibration ratio (observed / simulated) makes the endpoints exact:
v(all baseline) = observed baseline, v(all candidate) = observed candidate; it moves with the
efficiency factor, which therefore also carries the unexplained remainder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import polars as pl

from pipeline import catalog
from pipeline.fit.core import FittedModel, GroupKey, PhaseFit
from pipeline.physics import StepCost
from pipeline.schema.latency import latencies
from pipeline.sim import EngineConfig, kv_capacity_tokens, simulate
from pipeline.sim.config import default_token_budget
from pipeline.sim.cost import PhaseCost

FACTORS = (
    "prompt",
    "output",
    "load",
    "model",
    "hardware",
    "batching",
    "attention",
    "quantisation",
    "efficiency",
)
WORKLOAD = frozenset({"prompt", "output", "load"})
METRICS = ("ttft_mean", "ttft_p90", "tpot_mean", "output_throughput")
UNITS = {"ttft_mean": "s", "ttft_p90": "s", "tpot_mean": "s/token", "output_throughput": "tokens/s"}
MAX_REQUESTS = 2000


@dataclass
class Slice:
    """One side of a comparison: its requests' workload, deployment, fit and observed metrics."""

    name: str
    predicate: str
    n: int
    key: GroupKey
    key_share: float
    fit: FittedModel | None
    prompt: np.ndarray
    output: np.ndarray
    cached_frac: np.ndarray
    rate: float
    base_arrival: np.ndarray
    base_prompt: np.ndarray
    base_output: np.ndarray
    base_cached: np.ndarray
    observed: np.ndarray  # METRICS order
    notes: list[str] = field(default_factory=list)
    request_ids: frozenset[tuple[str, str]] = frozenset()
    server_requests: int = 0  # requests of the busiest server, whose first max_requests replay


def observed_metrics(df: pl.DataFrame) -> np.ndarray:
    ttft = df["ttft_s"].drop_nulls().to_numpy()
    tpot = df["tpot_s"].drop_nulls().to_numpy()
    spans = (
        df.filter(pl.col("e2e_s").is_not_null())
        .group_by("domain")
        .agg((pl.col("t_arrival") + pl.col("e2e_s")).max() - pl.col("t_arrival").min())
    )
    span = float(spans[:, 1].sum()) if spans.height else math.nan
    out = df["output_tokens"].sum() if df["output_tokens"].null_count() < df.height else None
    return np.array(
        [
            float(ttft.mean()) if len(ttft) else math.nan,
            float(np.percentile(ttft, 90)) if len(ttft) else math.nan,
            float(tpot.mean()) if len(tpot) else math.nan,
            float(out) / span if out is not None and span > 0 else math.nan,
        ]
    )


def sim_metrics(
    arrival: np.ndarray,
    out: np.ndarray,
    first: np.ndarray,
    finish: np.ndarray,
    length: float = 1.0,
) -> np.ndarray:
    """Mean and p90 TTFT, mean TPOT and output throughput of a replay.

    ``length``: how many times longer the run the replay stands for is (its server's requests
    over the replayed ones). Throughput is output tokens over first arrival to last finish, as
    observed; a replayed prefix has the run's drain (last arrival to last finish) once in a
    span ``length`` times shorter, so its arrival span and tokens are scaled by ``length`` and
    the drain kept once. With ``length`` 1 it is the plain ratio."""
    lat = latencies(arrival, first, finish, out)
    ttft, tpot = lat["ttft_s"], lat["tpot_s"][out > 1]
    last = float(np.nanmax(finish))
    span = float(arrival.max() - arrival.min()) * length + (last - float(arrival.max()))
    return np.array(
        [
            float(np.nanmean(ttft)),
            float(np.nanpercentile(ttft, 90)),
            float(np.nanmean(tpot)) if len(tpot) else math.nan,
            float(out.sum()) * length / span if span > 0 else math.nan,
        ]
    )


# Fields that name a model rather than shape it.
_IDENTITY = {"key", "name", "hf_id", "family", "aliases", "source"}


def _arch(m: catalog.Model) -> tuple[Any, ...]:
    """Everything that shapes the model's cost (sizes, experts, attention), not its names."""
    return tuple(getattr(m, f.name) for f in fields(m) if f.name not in _IDENTITY)


def hybrid_model(size: catalog.Model, attention: catalog.Model) -> catalog.Model:
    """``size``'s architecture with ``attention``'s query-per-KV-head ratio (GQA/MQA/MHA)."""
    if size.is_mla or attention.is_mla:
        # A latent cache has no query-per-KV-head ratio to carry; keep the size model's own.
        return size
    if size.kv_heads * attention.heads == attention.kv_heads * size.heads:
        return size
    kv = max(1, round(size.heads * attention.kv_heads / attention.heads))
    return replace(size, kv_heads=kv)


def _batching(key: GroupKey) -> tuple[int, int | None, bool]:
    return (
        key.max_num_seqs or 256,
        key.max_batched_tokens,
        True if key.chunked_prefill is None else bool(key.chunked_prefill),
    )


def _phase_params(p: PhaseFit | None) -> tuple[float, ...] | None:
    return None if p is None else (p.mfu, p.mbu, p.step_overhead, p.seq_overhead)


def changed(b: Slice, c: Slice) -> dict[str, bool]:
    """Which factors differ between the slices (the others are null players: exactly 0)."""
    mb, mc = catalog.model(b.key.model), catalog.model(c.key.model)
    out = {
        "prompt": not (
            np.array_equal(np.sort(b.prompt), np.sort(c.prompt))
            and np.array_equal(np.sort(b.cached_frac), np.sort(c.cached_frac))
        ),
        "output": not np.array_equal(np.sort(b.output), np.sort(c.output)),
        "load": not math.isclose(b.rate, c.rate, rel_tol=1e-12),
        "model": _arch(mb) != _arch(mc),
        "hardware": (catalog.gpu(b.key.gpu).key, b.key.gpu_count)
        != (catalog.gpu(c.key.gpu).key, c.key.gpu_count),
        "batching": _batching(b.key) != _batching(c.key),
        "attention": (mb.kv_heads * mc.heads != mc.kv_heads * mb.heads)
        or mb.is_mla != mc.is_mla
        or ((b.key.attention or "flash") == "eager") != ((c.key.attention or "flash") == "eager"),
        "quantisation": (b.key.weight_dtype, b.key.kv_dtype)
        != (c.key.weight_dtype, c.key.kv_dtype),
    }
    same_fit = (
        b.fit is not None
        and c.fit is not None
        and all(
            _phase_params(getattr(b.fit, ph)) == _phase_params(getattr(c.fit, ph))
            for ph in ("prefill", "decode")
        )
    )
    same = same_fit and not any(out.values()) and b.request_ids == c.request_ids
    out["efficiency"] = not same
    return out


def _qmap(base: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Each base value replaced by the mean of the target's values in the same rank bin.

    Rank k of n takes the mean of the sorted target over its quantile bin [k/n, (k+1)/n)
    (fractional elements weighted), not the value at the bin's midpoint: the mapped values keep
    the target's mean exactly, its tail included, which n midpoints miss (the top one is the
    target's (n - 0.5)/n quantile). With n equal to the target's size it is the target itself.
    """
    n, m = len(base), len(target)
    if n == 0 or m == 0:
        return base
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(base, kind="stable")] = np.arange(n)
    t = np.sort(np.asarray(target, dtype=np.float64))
    cum = np.concatenate([[0.0], np.cumsum(t)])
    edge = np.arange(n + 1) * (m / n)
    whole = np.minimum(np.floor(edge).astype(np.int64), m - 1)
    upto = cum[whole] + (edge - whole) * t[whole]  # sum of the first `edge` values
    return (np.diff(upto) / (m / n))[rank]


@dataclass
class Coalition:
    src: dict[str, Slice]  # factor -> slice it takes its value from


# A raw-rate counterfactual at or above this share of a deployment's capacity is saturated.
SATURATION = 0.9


class Game:
    """Evaluate coalitions of one baseline/candidate pair; results are cached by mask."""

    def __init__(self, b: Slice, c: Slice, active: list[str]) -> None:
        self.b, self.c, self.active = b, c, active
        self.seq = b  # whose sample is replayed (values() averages over both slices')
        self.notes: list[str] = []
        self._cache: dict[tuple[bool, int], np.ndarray] = {}
        self._caps: dict[tuple[int, ...], float] = {}
        self._by_util: bool | None = None

    def coalition(self, mask: int) -> dict[str, Slice]:
        return {
            f: (self.c if f in self.active and mask >> self.active.index(f) & 1 else self.b)
            for f in FACTORS
        }

    def raw(self, mask: int) -> np.ndarray:
        key = (self.seq is self.b, mask)
        if key not in self._cache:
            self._cache[key] = self._simulate(self.coalition(mask))
        return self._cache[key]

    @property
    def by_utilisation(self) -> bool:
        """Whether some coalition at its load slice's raw rate would run past saturation."""
        if self._by_util is None:
            k = len(self.active)
            worst = max(
                self.coalition(m)["load"].rate / self._capacity(self.coalition(m))
                for m in range(1 << k)
            )
            self._by_util = bool(worst >= SATURATION)
            if self._by_util:
                self._load_notes(worst)
        return self._by_util

    def values(self) -> np.ndarray:
        """Calibrated value of every coalition, shape (2^k, len(METRICS)): the mean over the
        two slices' samples replayed (each calibrated to both observed endpoints)."""
        out = []
        for seq in (self.b, self.c):
            self.seq = seq
            out.append(self._values())
        self.seq = self.b
        return (out[0] + out[1]) / 2

    def _values(self) -> np.ndarray:
        k = len(self.active)
        full = (1 << k) - 1
        raw = np.array([self.raw(m) for m in range(1 << k)])
        # The calibration is a ratio (observed / simulated), not a difference: what the replay
        # misses (its first max_requests arrivals against the whole slice, a model error) scales
        # a queueing delay with it, so a ratio common to both endpoints cancels instead of
        # landing on the efficiency factor. Measured on two generated runs with equal true
        # efficiencies: efficiency 11.5 % of mean TTFT at 300 requests, -0.5 % at 2,000, with a
        # difference; a difference remains only where a metric is not positive.
        both = np.vstack([raw[0], raw[full], self.b.observed, self.c.observed])
        ratio_ok = np.all(np.isfinite(both) & (both > 0), axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio_b = np.where(ratio_ok, self.b.observed / raw[0], 1.0)
            ratio_c = np.where(ratio_ok, self.c.observed / raw[full], 1.0)
        resid_b = np.where(ratio_ok, 0.0, self.b.observed - raw[0])
        resid_c = np.where(ratio_ok, 0.0, self.c.observed - raw[full])
        if "efficiency" not in self.active:
            return raw * ratio_b + resid_b
        bit = 1 << self.active.index("efficiency")
        eff = ((np.arange(1 << k) & bit) != 0)[:, None]
        return raw * np.where(eff, ratio_c, ratio_b) + np.where(eff, resid_c, resid_b)

    # -- one simulation ------------------------------------------------------------------------
    def _lengths(self, s: dict[str, Slice]) -> tuple[np.ndarray, ...]:
        # The replayed requests give ranks and arrival order only: their lengths are always the
        # source slice's whole distribution at each request's rank, the baseline's included.
        # Keeping the sample's own lengths on the baseline side made the prompt factor carry
        # the difference between the first max_requests and the whole slice (on generated
        # H100 -> A100 pairs, the prompt share moved 12-15 points between 300 and 2,000).
        b = self.seq
        prompt = np.rint(_qmap(b.base_prompt, s["prompt"].prompt))  # bin means: whole tokens
        frac = _qmap(b.base_cached / np.maximum(b.base_prompt, 1), s["prompt"].cached_frac)
        cached = np.floor(frac * prompt)
        output = np.rint(_qmap(b.base_output, s["output"].output))
        return (
            np.maximum(prompt, 1).astype(np.int64),
            np.maximum(output, 1).astype(np.int64),
            cached.astype(np.int64),
        )

    @property
    def _sample_rate(self) -> float:
        """Arrivals per second of the replayed requests, counted as the slice's rate is
        (requests over first-to-last span), so that a sample that is the whole slice runs at
        exactly its recorded gaps: near saturation a 0.1 % faster replay moved a share 7 points."""
        a = self.seq.base_arrival
        span = float(a.max() - a.min()) if len(a) > 1 else 0.0
        return len(a) / span if span > 0 else self.seq.rate

    def utilisation(self, sl: Slice) -> float:
        """A slice's offered load as a share of its own deployment's capacity (its rate over
        the requests per second it completes with every request waiting at t = 0)."""
        # The candidate's lengths are mapped onto the baseline's requests (as in every coalition).
        return sl.rate / self._capacity({f: sl for f in FACTORS})

    def _capacity(self, s: dict[str, Slice]) -> float:
        """Requests per second the coalition's deployment sustains on its workload: with the
        batch B full (max_num_seqs, or the KV capacity over the mean context), each second
        holds the arrivals' prefills and their decode steps shared by B sequences:
        1 / (prefill(mean prompt) + mean output x decode_step(B) / B). Analytic, so it does not
        depend on how many requests the replay takes (a burst's makespan would)."""
        key = (id(self.seq), *(id(s[f]) for f in FACTORS if f not in ("load",)))
        if key not in self._caps:
            prompt, output, cached = self._lengths(s)
            prompt, output, cached, config, cost = self._setup(s, prompt, output, cached)
            p = float(np.mean(prompt - cached))
            ctx = float(np.mean(prompt + output / 2.0))
            batch = max(1.0, min(config.max_num_seqs, config.kv_capacity_tokens / max(ctx, 1.0)))
            new_tokens = p
            prefill = cost.prefill.time_of(
                new_tokens, 1, new_tokens * (float(np.mean(cached)) + p / 2), p, p * p
            )
            step = cost.decode.time_of(batch, batch, batch * ctx, batch * ctx, 0.0)
            per_request = prefill + float(np.mean(output)) * step / batch
            self._caps[key] = 1.0 / per_request if per_request > 0 else math.inf
        return self._caps[key]

    def _simulate(self, s: dict[str, Slice]) -> np.ndarray:
        b = self.seq
        prompt, output, cached = self._lengths(s)
        # Load is the load slice's raw rate, unless that would push some coalition's deployment
        # past saturation; then it is utilisation of each deployment's capacity (the rule of
        # docs/attribution.md): an A100 at an H100's rate is an ever-growing queue whose TTFT
        # depends on how long the replay runs, and the split between load and hardware explodes.
        if self.by_utilisation:
            rate = self.utilisation(s["load"]) * self._capacity(s)
        else:
            rate = s["load"].rate
        # The sample's own rate is scaled to the target, so that a coalition runs at the rate
        # (or utilisation) it is meant to even when the first max_requests arrivals came
        # faster or slower than the slice as a whole.
        arrival = b.base_arrival * (self._sample_rate / rate) if rate > 0 else b.base_arrival
        setup = self._setup(s, prompt, output, cached)
        prompt, output, cached, config, cost = setup
        res = simulate(arrival, prompt, output, config, cost, cached_tokens=cached)
        length = max(b.server_requests / len(arrival), 1.0) if len(arrival) else 1.0
        return sim_metrics(arrival, output, res.first_token, res.finish, length)

    def _setup(
        self, s: dict[str, Slice], prompt: np.ndarray, output: np.ndarray, cached: np.ndarray
    ) -> tuple[Any, ...]:
        """Lengths (clipped to the KV capacity), engine config and step costs of a coalition."""
        size = catalog.model(s["model"].key.model)
        model = hybrid_model(size, catalog.model(s["attention"].key.model))
        hw = s["hardware"].key
        gpu, tp = catalog.gpu(hw.gpu), int(hw.gpu_count or 1)
        q = s["quantisation"].key
        flash = (s["attention"].key.attention or "flash") != "eager"
        fit = s["efficiency"].fit
        assert fit is not None

        def cost(phase: str) -> StepCost:
            p = fit.phase(phase)
            return StepCost(
                model,
                gpu,
                tp=tp,
                weight_dtype=q.weight_dtype,
                kv_dtype=q.kv_dtype,
                flash_attention=flash,
                mfu=p.mfu,
                mbu=p.mbu,
                step_overhead=p.step_overhead,
                seq_overhead=p.seq_overhead,
            )

        max_seqs, mbt, chunked = _batching(s["batching"].key)
        try:
            kv = kv_capacity_tokens(
                model, gpu, tp=tp, weight_dtype=q.weight_dtype, kv_dtype=q.kv_dtype
            )
        except ValueError:
            kv = 0
            self._note(
                f"{model.name} does not fit on {tp} x {gpu.name}: simulated with the KV "
                "capacity unconstrained"
            )
        peak = prompt + np.maximum(output - 1, 0)
        if kv < int(peak.max()) + 16:
            if kv:
                self._note(
                    f"{model.name} on {tp} x {gpu.name}: longest request exceeds the KV "
                    "capacity; outputs clipped to fit"
                )
            else:
                kv = int(max(peak.max(), peak.sum())) + 16
            output = np.maximum(np.minimum(output, kv - 16 - prompt + 1), 1)
            prompt = np.minimum(prompt, kv - 16)
            peak = prompt + np.maximum(output - 1, 0)
        if mbt is None:
            mbt = default_token_budget(chunked, max_seqs, model.max_context, kv)
        mbt = max(mbt, max_seqs) if chunked else max(mbt, int(peak.max()))
        config = EngineConfig(
            kv_capacity_tokens=kv,
            max_num_seqs=max_seqs,
            max_batched_tokens=mbt,
            chunked_prefill=chunked,
        )
        return prompt, output, cached, config, PhaseCost(cost("prefill"), cost("decode"))

    def _load_notes(self, worst: float) -> None:
        parts = []
        for sl in (self.b, self.c):
            u, cap = self.utilisation(sl), self._capacity({f: sl for f in FACTORS})
            parts.append(f"{sl.name} {sl.rate:.3g} req/s = {u:.0%} of its capacity {cap:.3g} req/s")
            if u >= 1.0:
                self._note(
                    f"the {sl.name} was offered more than its estimated capacity ({u:.0%}): its "
                    "queue grew during the log, so its TTFT depends on how long it ran"
                )
        self._note(
            f"at the other slice's raw rate a counterfactual deployment would run at {worst:.0%} "
            "of its capacity (past saturation: a queue that only grows), so load enters as "
            "utilisation of each deployment's capacity (docs/attribution.md): "
            + "; ".join(parts)
            + ". Each coalition runs at its load slice's utilisation of its own capacity."
        )

    def _note(self, msg: str) -> None:
        if msg not in self.notes:
            self.notes.append(msg)

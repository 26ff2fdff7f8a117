"""Step costs from a measured layer-wise profile (``pipeline fit --profile DIR``).

A layer-wise profile times each operator of one decoder layer on the real GPU, over a grid of
batch shapes. This module reads LLMServingSim's profiler layout (docs/profile.md)::

    DIR/meta.yaml                 model, GPU, engine settings, attention grid
    DIR/tp<N>/dense.csv           layer,tokens,time_us        (per operator, per decoder layer)
    DIR/tp<N>/per_sequence.csv    layer,sequences,time_us     (lm_head, sampler: once per step)
    DIR/tp<N>/attention.csv       prefill_chunk,kv_prefill,n_decode,kv_decode,time_us

and turns it into the simulator's cost model (:class:`pipeline.sim.engine.CostModel`):
``time_of(tokens, seqs, attn_pairs, kv_tokens, score_elems)`` and ``decode_lines(batch, sum_ctx)``.

One step costs::

    layers * (sum of per-layer dense ops(tokens) + attention(shape))
    + once-per-model dense ops(tokens) + per-sequence ops(seqs)
    + overhead_s + seq_overhead_s * seqs

Every table is interpolated linearly on each axis between profiled points, clamped below the
first point and extrapolated linearly from the last two above the last (LLMServingSim's own
lookup rule: the kernels are close to linear in each axis and blending a doubling grid in log
space biases the result upward). ``layernorm`` runs twice per decoder layer (input and
post-attention RMSNorm); ``embedding`` and ``final_layernorm`` once per step; ``lm_head`` and
``sampler`` over the step's sequences. The profile holds kernel time only: scheduling, host-side
sampling and the TP all-reduces are not in it, hence ``overhead_s`` / ``seq_overhead_s``.

Public API::

    load_profile(directory, model, tp=1) -> LayerProfile
    LayerProfile.time_of(tokens, seqs, attn_pairs, kv_tokens, score_elems) -> seconds
    LayerProfile.decode_lines(batch, sum_context) -> DecodeLines
    LayerProfile.step_time_us(prefill_chunk, kv_prefill, n_decode, kv_decode) -> microseconds
    LayerProfile.breakdown_us(prefill_chunk, kv_prefill, n_decode, kv_decode) -> dict
    LayerProfile.with_overheads(overhead_s, seq_overhead_s) -> LayerProfile
"""

from __future__ import annotations

import csv
import math
import re
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline import catalog
from pipeline.catalog import Model
from pipeline.physics import DecodeLines

# Operators outside the decoder layers: run once per step over the step's tokens.
ONCE_PER_MODEL = frozenset({"embedding", "final_layernorm"})
# Calls per decoder layer where not 1: input_layernorm + post_attention_layernorm (the profiler's
# catalog lists ``layernorm`` in both pre_attn and post_attn; dense.csv holds the time of one call).
CALLS_PER_LAYER = {"layernorm": 2}
ATTENTION_KERNEL = "attention"

DENSE_COLUMNS = ("layer", "tokens", "time_us")
PER_SEQUENCE_COLUMNS = ("layer", "sequences", "time_us")
ATTENTION_AXES = ("prefill_chunk", "n_decode", "kv_decode", "time_us")
# The prefill-history axis: ``kv_prefill`` (cached tokens before the chunk, summed over the step's
# prefills, as in the calibration set) or, in newer profiler releases, ``prefill_key``: the
# query-weighted key length history + chunk / 2.
PREFILL_AXES = ("kv_prefill", "prefill_key")
UNSUPPORTED_FILES = {
    "moe.csv": "mixture-of-experts layers",
    "linear_attention.csv": "linear-attention (gated DeltaNet / mamba) layers",
    "mtp.csv": "a multi-token-prediction drafter",
}


# --------------------------------------------------------------------------------------------
# Piecewise-linear tables
# --------------------------------------------------------------------------------------------


class _Line:
    """y(x) piecewise linear through sorted points: clamped below the first point, extrapolated
    from the last two above the last. ``at`` also returns the slope of the segment used."""

    __slots__ = ("slopes", "xs", "ys")

    def __init__(self, xs: list[float], ys: list[float]) -> None:
        self.xs, self.ys = xs, ys
        self.slopes = [(ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) for i in range(len(xs) - 1)]

    def at(self, x: float) -> tuple[float, float]:
        xs = self.xs
        if len(xs) == 1 or x < xs[0]:
            return self.ys[0], 0.0
        i = min(bisect_right(xs, x), len(xs) - 1) - 1  # segment [xs[i], xs[i+1]]
        s = self.slopes[i]
        return self.ys[i] + (x - xs[i]) * s, s

    def __call__(self, x: float) -> float:
        return self.at(x)[0]


def _bracket(axis: list[float], x: float) -> list[tuple[float, float]]:
    """(grid value, weight) pairs blending ``x`` linearly on ``axis`` (sorted, positive):
    clamped below the first value, extrapolated above the last."""
    if len(axis) == 1 or x <= axis[0]:
        return [(axis[0], 1.0)]
    i = min(bisect_right(axis, x), len(axis) - 1) - 1
    lo, hi = axis[i], axis[i + 1]
    t = (x - lo) / (hi - lo)
    return [(lo, 1.0 - t), (hi, t)] if t else [(lo, 1.0)]


class _Slice:
    """Attention of one (prefill_chunk, n_decode) pair over (prefill history, kv_decode): bilinear,
    each kv_prefill row with its own kv_decode axis."""

    __slots__ = ("kp", "rows")

    def __init__(self, cells: dict[tuple[float, float], float]) -> None:
        by_kp: dict[float, dict[float, float]] = {}
        for (kp, kd), t in cells.items():
            by_kp.setdefault(kp, {})[kd] = t
        self.kp = sorted(by_kp)
        self.rows = [
            _Line(sorted(by_kp[k]), [by_kp[k][d] for d in sorted(by_kp[k])]) for k in self.kp
        ]

    def at(self, kp: float, kd: float) -> tuple[float, float]:
        """(time, d time / d kv_decode) at (kp, kd)."""
        if len(self.kp) == 1 or kp <= self.kp[0]:
            return self.rows[0].at(kd)
        i = min(bisect_right(self.kp, kp), len(self.kp) - 1) - 1
        t = (kp - self.kp[i]) / (self.kp[i + 1] - self.kp[i])
        (v0, s0), (v1, s1) = self.rows[i].at(kd), self.rows[i + 1].at(kd)
        return v0 + t * (v1 - v0), s0 + t * (s1 - s0)


class _Attention:
    """Attention time of ONE layer (microseconds) over the profiler's 4-D grid.

    The grid has three regions: prefill-only (n_decode = 0), decode-only (prefill_chunk = 0) and
    mixed. ``prefill_chunk`` and ``n_decode`` pick the region, so 0 is exact on them (never
    blended with a positive value; a positive value below the first profiled one is clamped to
    it); the kv axes are ordinary. A mixed (chunk, n) pair the profile lacks (e.g. n_decode above
    the largest mixed one) is the nearest profiled n for that chunk plus the decode-only
    difference between the two decode counts.
    """

    def __init__(self, cells: dict[tuple[float, float, float, float], float]) -> None:
        grouped: dict[tuple[float, float], dict[tuple[float, float], float]] = {}
        for (pc, kp, nd, kd), t in cells.items():
            grouped.setdefault((pc, nd), {})[kp, kd] = t
        self.slices = {key: _Slice(c) for key, c in grouped.items()}
        self.pc = sorted({pc for pc, _ in grouped if pc > 0})
        self.nd = sorted({nd for _, nd in grouped if nd > 0})
        self.mixed_nd: dict[float, list[float]] = {}
        for pc, nd in grouped:
            if pc > 0 and nd > 0:
                self.mixed_nd.setdefault(pc, []).append(nd)
        for v in self.mixed_nd.values():
            v.sort()

    def missing_regions(self) -> list[str]:
        out = []
        if not self.pc:
            out.append("no prefill-only rows (prefill_chunk > 0, n_decode = 0)")
        if not self.nd:
            out.append("no decode-only rows (prefill_chunk = 0, n_decode > 0)")
        out += [
            f"no prefill-only rows for prefill_chunk={pc:g}"
            for pc in self.pc
            if (pc, 0.0) not in self.slices
        ]
        out += [
            f"no decode-only rows for n_decode={nd:g}"
            for nd in self.nd
            if (0.0, nd) not in self.slices
        ]
        return out

    def decode(self, nd: float, kd: float) -> tuple[float, float]:
        """(time, d time / d kv_decode) of a decode-only step."""
        v = s = 0.0
        for n, w in _bracket(self.nd, nd):
            dv, ds = self.slices[0.0, n].at(0.0, kd)
            v += w * dv
            s += w * ds
        return v, s

    def decode_run(self, nd: float, kd: float) -> tuple[tuple[float, float], tuple[float, float]]:
        """Two lines (value at ``kd``, slope per token of mean context) whose max follows a
        decode-only run of ``nd`` sequences from mean context ``kd``.

        The first is the grid segment holding ``kd``: exact up to the next kv_decode knot. The
        second is the secant from that knot to the last one (the bandwidth-bound asymptote); it
        meets the first at the knot and takes over beyond it where the cost steepens (attention
        is flat while launch-bound at short contexts). Where it would not steepen, the second
        line is the first.
        """
        v, s = self.decode(nd, kd)
        knots = sorted(
            {x for n, _ in _bracket(self.nd, nd) for x in self.slices[0.0, n].rows[0].xs}
        )
        i = bisect_right(knots, kd)
        if i >= len(knots) - 1:  # in (or past) the last cell: one line, exact
            return (v, s), (v, s)
        g, top = knots[i], knots[-1]
        fg = self.decode(nd, g)[0]
        slope = (self.decode(nd, top)[0] - fg) / (top - g)
        if slope <= s:
            return (v, s), (v, s)
        return (v, s), (fg - (g - kd) * slope, slope)

    def _corner(self, pc: float, nd: float, kp: float, kd: float) -> float:
        sl = self.slices.get((pc, nd))
        if sl is not None:
            return sl.at(kp, kd)[0]
        if pc == 0.0 or nd == 0.0:  # a pure region is complete (checked on load)
            raise KeyError((pc, nd))
        known = self.mixed_nd.get(pc)
        if not known:  # no mixed shots at this chunk: the two kernels' times add
            return self.slices[pc, 0.0].at(kp, 0.0)[0] + self.decode(nd, kd)[0]
        near = min(known, key=lambda n: (abs(n - nd), -n))
        delta = self.decode(nd, kd)[0] - self.decode(near, kd)[0]
        return self.slices[pc, near].at(kp, kd)[0] + delta

    def __call__(self, pc: float, kp: float, nd: float, kd: float) -> float:
        if pc <= 0.0:
            return self.decode(nd, kd)[0] if nd > 0.0 else 0.0
        pcs = _bracket(self.pc, pc)
        nds = _bracket(self.nd, nd) if nd > 0.0 else [(0.0, 1.0)]
        return sum(wp * wn * self._corner(p, n, kp, kd) for p, wp in pcs for n, wn in nds)


# --------------------------------------------------------------------------------------------
# Reconstructing the step's shape from the simulator's aggregates
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepShape:
    """What the attention grid is keyed on, recovered from a step's aggregates.

    prefill_chunk: sum of the step's prefill-chunk tokens (LLMServingSim's ``sum(prefill_q)``)
    kv_prefill:    sum of their cached histories (``sum(prefill_k)``)
    prefill_key:   query-weighted key length, mean over chunk tokens of history + chunk / 2
    n_decode:      decoding sequences; kv_decode: their mean context
    n_prefill:     estimated number of prefill chunks
    """

    prefill_chunk: float
    kv_prefill: float
    prefill_key: float
    n_decode: float
    kv_decode: float
    n_prefill: int


def step_shape(
    tokens: float, seqs: float, attn_pairs: float, kv_tokens: float, score_elems: float
) -> StepShape:
    """Invert the aggregates (see :class:`pipeline.physics.StepWork`) into a :class:`StepShape`.

    Exact for a decode-only step and for one prefill chunk (with any decodes), which is what a
    chunked-prefill step usually is. With several chunks the count is estimated as if they were
    equal, n = (sum T)^2 / sum T^2 solved with sum T = tokens - seqs + n (exact for equal
    chunks, a lower bound otherwise), and the history split uses the token-weighted mean chunk
    sum T^2 / sum T.
    """
    if score_elems <= 0.0:  # no prefill chunk: T >= 1 would give T^2 >= 1
        n_d = float(seqs)
        return StepShape(0.0, 0.0, 0.0, n_d, kv_tokens / n_d if n_d > 0 else 0.0, 0)
    a = max(tokens - seqs, 0.0)  # sum over chunks of (T - 1)
    s = score_elems
    # (a + n)^2 = n s  ->  n = ((s - 2a) - sqrt(s (s - 4a))) / 2; s >= 4a for consistent inputs.
    n_est = ((s - 2.0 * a) - math.sqrt(max(s * (s - 4.0 * a), 0.0))) / 2.0
    n_p = int(min(max(round(n_est), 1), max(round(seqs), 1)))
    n_d = max(seqs - n_p, 0.0)
    sum_t = tokens - n_d
    if sum_t <= 0.0:  # inconsistent aggregates: take one chunk of sqrt(score) tokens
        sum_t = math.sqrt(s)
    t_eff = s / sum_t
    y = kv_tokens - sum_t  # sum S + sum c
    x = attn_pairs - s / 2.0  # ~ t_eff * sum S + sum c
    if n_d <= 0.0:
        c = 0.0
    elif t_eff - 1.0 > 1e-9:
        c = (t_eff * y - x) / (t_eff - 1.0)
    else:  # one-token chunks look like decodes: split by sequence count
        c = y * n_d / (n_d + n_p)
    c = min(max(c, 0.0), max(y, 0.0))
    sum_s = max(y - c, 0.0)
    key = max(attn_pairs - c, 0.0) / sum_t
    return StepShape(sum_t, sum_s, key, n_d, c / n_d if n_d > 0 else 0.0, n_p)


# --------------------------------------------------------------------------------------------
# The cost model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class LayerProfile:
    """Simulator cost model from a layer-wise profile of ``model`` (``layers`` decoder layers).

    ``dense`` and ``per_sequence`` are the per-operator tables (microseconds of one call);
    ``attention`` the per-layer attention grid. ``overhead_s`` and ``seq_overhead_s`` add
    seconds per step and per sequence in the step: host work an operator profile does not see.
    """

    model: Model
    layers: int
    tp: int
    source: Path
    hardware: str
    gpu: str
    profiled_layers: int | None
    prefill_axis: str  # "kv_prefill" or "prefill_key"
    dense: dict[str, _Line] = field(repr=False)
    per_sequence: dict[str, _Line] = field(repr=False)
    attention: _Attention = field(repr=False)
    meta: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    overhead_s: float = 0.0
    seq_overhead_s: float = 0.0
    _dense_total: _Line = field(init=False, repr=False, compare=False)
    _seq_total: _Line = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.layers < 1:
            raise ValueError(f"layers must be >= 1, got {self.layers}")
        if self.overhead_s < 0 or self.seq_overhead_s < 0:
            raise ValueError("overhead_s and seq_overhead_s must be >= 0")
        # Fuse the dense operators into one table on the union of their token grids: every op
        # is linear between its points, so the sum is evaluated exactly at the union's points.
        xs = sorted({x for line in self.dense.values() for x in line.xs})
        ys = [sum(self._dense_calls(op) * line(x) for op, line in self.dense.items()) for x in xs]
        object.__setattr__(self, "_dense_total", _Line(xs, ys))
        xs = sorted({x for line in self.per_sequence.values() for x in line.xs})
        ys = [sum(line(x) for line in self.per_sequence.values()) for x in xs]
        object.__setattr__(self, "_seq_total", _Line(xs, ys))

    def _dense_calls(self, op: str) -> int:
        """Calls of ``op`` per step: once for the model's ends, per layer (x2 for layernorm)."""
        return 1 if op in ONCE_PER_MODEL else self.layers * CALLS_PER_LAYER.get(op, 1)

    def with_overheads(self, overhead_s: float = 0.0, seq_overhead_s: float = 0.0) -> LayerProfile:
        """The same profile with fitted (or assumed) per-step and per-sequence host overheads."""
        return replace(self, overhead_s=overhead_s, seq_overhead_s=seq_overhead_s)

    # -- the simulator's protocol --
    def time_of(
        self, tokens: float, seqs: float, attn_pairs: float, kv_tokens: float, score_elems: float
    ) -> float:
        """Seconds of one step given its aggregate work (the shape is recovered by
        :func:`step_shape`)."""
        shape = step_shape(tokens, seqs, attn_pairs, kv_tokens, score_elems)
        attn = max(self._attention_us(shape), 0.0)
        us = self._dense_total(tokens) + self._seq_total(seqs) + self.layers * attn
        return us * 1e-6 + self.overhead_s + self.seq_overhead_s * seqs

    def decode_lines(self, batch: int, sum_context: float) -> DecodeLines:
        """A decode-only run of ``batch`` sequences whose mean context grows by one per step.

        Step k takes max(local + local' k, far + far' k) + fixed: the attention grid segment
        holding the first step (exact, equal to :meth:`time_of`, while the mean context stays in
        that kv_decode cell) and the secant from the cell's end to the grid's last kv_decode
        point (see :meth:`_Attention.decode_run`). Dense and per-sequence operators depend on
        the batch only, so they are the fixed part."""
        if batch <= 0:
            return DecodeLines(0.0, 0.0, 0.0, 0.0, self.overhead_s)
        b = float(batch)
        (m0, m1), (c0, c1) = self.attention.decode_run(b, sum_context / b)
        k = self.layers * 1e-6
        fixed = (self._dense_total(b) + self._seq_total(b)) * 1e-6
        fixed += self.overhead_s + self.seq_overhead_s * b
        return DecodeLines(c0 * k, c1 * k, m0 * k, m1 * k, fixed)

    # -- direct access, in the profile's own coordinates --
    def step_time_us(
        self, prefill_chunk: float, kv_prefill: float, n_decode: float, kv_decode: float
    ) -> float:
        """Microseconds of a step with one prefill chunk of ``prefill_chunk`` tokens on
        ``kv_prefill`` cached ones and ``n_decode`` decodes of ``kv_decode`` context each
        (overheads included), through the same path as :meth:`time_of`."""
        return self.time_of(*_aggregates(prefill_chunk, kv_prefill, n_decode, kv_decode)) * 1e6

    def breakdown_us(
        self, prefill_chunk: float, kv_prefill: float, n_decode: float, kv_decode: float
    ) -> dict[str, float]:
        """Microseconds per operator (all calls in the step) of the step :meth:`step_time_us`
        describes, plus ``attention`` (all layers) and ``overhead``."""
        agg = _aggregates(prefill_chunk, kv_prefill, n_decode, kv_decode)
        tokens, seqs = agg[0], agg[1]
        out = {op: self._dense_calls(op) * line(tokens) for op, line in self.dense.items()}
        out.update({op: line(seqs) for op, line in self.per_sequence.items()})
        out["attention"] = self.layers * max(self._attention_us(step_shape(*agg)), 0.0)
        out["overhead"] = (self.overhead_s + self.seq_overhead_s * seqs) * 1e6
        return out

    def attention_us(
        self, prefill_chunk: float, kv_prefill: float, n_decode: float, kv_decode: float
    ) -> float:
        """Attention microseconds of ONE layer, looked up (and interpolated) on the grid."""
        return self._attention_us(
            step_shape(*_aggregates(prefill_chunk, kv_prefill, n_decode, kv_decode))
        )

    def _attention_us(self, shape: StepShape) -> float:
        kp = shape.prefill_key if self.prefill_axis == "prefill_key" else shape.kv_prefill
        return self.attention(shape.prefill_chunk, kp, shape.n_decode, shape.kv_decode)

    def params(self) -> dict[str, Any]:
        """What the cost model is, as plain data (for reports and stored fits)."""
        return {
            "kind": "layer_profile",
            "source": str(self.source),
            "model": self.model.name,
            "layers": self.layers,
            "profiled_layers": self.profiled_layers,
            "tp": self.tp,
            "hardware": self.hardware,
            "gpu": self.gpu,
            "prefill_axis": self.prefill_axis,
            "dense_ops": sorted(self.dense),
            "per_sequence_ops": sorted(self.per_sequence),
            "overhead_s": self.overhead_s,
            "seq_overhead_s": self.seq_overhead_s,
        }


def _aggregates(
    prefill_chunk: float, kv_prefill: float, n_decode: float, kv_decode: float
) -> tuple[float, float, float, float, float]:
    """(tokens, seqs, attn_pairs, kv_tokens, score_elems) of one chunk plus uniform decodes."""
    t = float(prefill_chunk)
    s = float(kv_prefill) if t > 0 else 0.0
    b, c = float(n_decode), float(kv_decode)
    seqs = b + (1.0 if t > 0 else 0.0)
    return t + b, seqs, t * (s + t / 2.0) + b * c, (s + t if t > 0 else 0.0) + b * c, t * t


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def load_profile(directory: Path | str, model: str | Model, tp: int = 1) -> LayerProfile:
    """Read an LLMServingSim profiler bundle (``meta.yaml`` + ``tp<N>/*.csv``) for ``model``.

    ``directory`` is the bundle (the folder holding meta.yaml) or one of its ``tp<N>`` folders.
    The layer count comes from the catalog (the profile is usually taken on one decoder layer:
    ``hf_overrides.num_hidden_layers: 1``). Raises ValueError naming what is missing and where.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"profile directory {root} does not exist or is not a folder")
    _reject_vidur(root)
    if (root / "dense.csv").is_file() and re.fullmatch(r"tp\d+", root.name):
        tp_dir, root = root, root.parent
        tp = int(tp_dir.name[2:])
    else:
        tp_dir = root / f"tp{tp}"
    meta_path = root / "meta.yaml"
    if not meta_path.is_file():
        raise ValueError(
            f"{root} is not a layer-wise profile: no meta.yaml (expected LLMServingSim's "
            f"profiler layout: meta.yaml and tp<N>/dense.csv, per_sequence.csv, attention.csv)"
        )
    meta = parse_meta(meta_path.read_text())
    if not tp_dir.is_dir():
        have = sorted(p.name for p in root.glob("tp*") if p.is_dir())
        raise ValueError(
            f"profile {root} has no {tp_dir.name}/ folder (tensor-parallel degree {tp}); "
            f"profiled: {', '.join(have) or 'none'}"
        )
    for name, what in UNSUPPORTED_FILES.items():
        if (tp_dir / name).is_file():
            raise ValueError(f"{tp_dir / name}: profiles with {what} are not supported")

    m = model if isinstance(model, Model) else catalog.model(model)
    _check_model(meta, m, meta_path)
    dense = _read_1d(tp_dir / "dense.csv", DENSE_COLUMNS)
    per_seq = _read_1d(tp_dir / "per_sequence.csv", PER_SEQUENCE_COLUMNS)
    if not any(op not in ONCE_PER_MODEL for op in dense):
        raise ValueError(
            f"{tp_dir / 'dense.csv'} has no per-layer operators (only {sorted(dense)})"
        )
    attention, prefill_axis = _read_attention(tp_dir / "attention.csv")
    overrides = (meta.get("engine_effective") or {}).get("hf_overrides") or {}
    profiled = overrides.get("num_hidden_layers")
    return LayerProfile(
        model=m,
        layers=m.layers,
        tp=tp,
        source=root,
        hardware=str(meta.get("hardware") or ""),
        gpu=str(meta.get("gpu") or ""),
        profiled_layers=int(profiled) if isinstance(profiled, int | float) else None,
        prefill_axis=prefill_axis,
        dense=dense,
        per_sequence=per_seq,
        attention=attention,
        meta=meta,
    )


def _reject_vidur(root: Path) -> None:
    """Vidur's profiling CSVs (mlp.csv / attention.csv with ``time_stats.*`` columns)."""
    for path in (root / "mlp.csv", root / "attention.csv"):
        if path.is_file():
            header = path.open().readline()
            if path.name == "mlp.csv" or "time_stats" in header:
                raise ValueError(
                    f"{path}: Vidur's profile layout is not supported; give an LLMServingSim "
                    f"profiler bundle (meta.yaml + tp<N>/dense.csv, per_sequence.csv, "
                    f"attention.csv), see docs/profile.md"
                )


_SHAPE_FIELDS = {
    "hidden_size": "hidden",
    "intermediate_size": "intermediate",
    "num_attention_heads": "heads",
    "num_key_value_heads": "kv_heads",
    "vocab_size": "vocab",
}


def _check_model(meta: dict[str, Any], m: Model, where: Path) -> None:
    """The profile must be of ``m``: same catalog entry when meta names a known model, and the
    same shape for every field meta.yaml overrides."""
    name = meta.get("model")
    if isinstance(name, str) and name:
        try:
            profiled = catalog.model(name)
        except Exception:  # a model the catalog does not know: nothing to compare against
            profiled = None
        if profiled is not None and profiled.key != m.key:
            raise ValueError(f"{where}: the profile is of {name} ({profiled.name}), not {m.name}")
    overrides = (meta.get("engine_effective") or {}).get("hf_overrides") or {}
    for key, attr in _SHAPE_FIELDS.items():
        if key in overrides and int(overrides[key]) != getattr(m, attr):
            raise ValueError(
                f"{where}: profiled {key}={overrides[key]} but {m.name} has {getattr(m, attr)}"
            )


def _read_rows(path: Path, required: tuple[str, ...]) -> tuple[list[str], list[list[str]]]:
    if not path.is_file():
        raise ValueError(f"not a layer-wise profile: {path} is missing")
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        rows = [r for r in reader if r and any(c.strip() for c in r)]
    missing = [c for c in required if c not in header]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (header: {header})")
    if not rows:
        raise ValueError(f"{path} has no rows")
    return header, rows


def _num(value: str, path: Path, line: int, column: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"{path} line {line}: {column}={value!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{path} line {line}: {column}={value!r} must be finite and >= 0")
    return x


def _read_1d(path: Path, columns: tuple[str, str, str]) -> dict[str, _Line]:
    """``layer,<axis>,time_us`` -> one line per layer (a repeated point: the last row wins)."""
    header, rows = _read_rows(path, columns)
    i_name, i_x, i_t = (header.index(c) for c in columns)
    points: dict[str, dict[float, float]] = {}
    for n, row in enumerate(rows, start=2):
        x = _num(row[i_x], path, n, columns[1])
        points.setdefault(row[i_name].strip(), {})[x] = _num(row[i_t], path, n, "time_us")
    return {op: _Line(sorted(p), [p[x] for x in sorted(p)]) for op, p in points.items()}


def _read_attention(path: Path) -> tuple[_Attention, str]:
    header, rows = _read_rows(path, ATTENTION_AXES)
    axis = next((a for a in PREFILL_AXES if a in header), None)
    if axis is None:
        raise ValueError(f"{path}: missing column kv_prefill (or prefill_key) (header: {header})")
    idx = {c: header.index(c) for c in (*ATTENTION_AXES, axis)}
    i_layer = header.index("layer") if "layer" in header else None
    i_q = header.index("decode_q_len") if "decode_q_len" in header else None
    cells: dict[tuple[float, float, float, float], float] = {}
    kernels: set[str] = set()
    for n, row in enumerate(rows, start=2):
        if i_layer is not None:
            kernels.add(row[i_layer].strip())
            if row[i_layer].strip() != ATTENTION_KERNEL:
                continue
        if i_q is not None and _num(row[i_q], path, n, "decode_q_len") != 1:
            continue  # speculative-decoding shots
        pc, kp, nd, kd, t = (
            _num(row[idx[c]], path, n, c)
            for c in ("prefill_chunk", axis, "n_decode", "kv_decode", "time_us")
        )
        if pc == 0:
            kp = 0.0
        if nd == 0:
            kd = 0.0
        cells[pc, kp, nd, kd] = t
    if kernels - {ATTENTION_KERNEL}:
        raise ValueError(
            f"{path}: attention kernels {sorted(kernels - {ATTENTION_KERNEL})} (sparse attention "
            f"or an indexer) are not supported; only '{ATTENTION_KERNEL}'"
        )
    if not cells:
        raise ValueError(f"{path} has no '{ATTENTION_KERNEL}' rows with decode_q_len 1")
    table = _Attention(cells)
    missing = table.missing_regions()
    if missing:
        raise ValueError(f"{path}: incomplete attention grid: {'; '.join(missing)}")
    return table, axis


# --------------------------------------------------------------------------------------------
# meta.yaml
# --------------------------------------------------------------------------------------------


def parse_meta(text: str) -> dict[str, Any]:
    """meta.yaml as a dict: PyYAML when installed, else a reader of the subset the profiler
    writes (nested mappings, scalars, inline ``[a, b]`` lists, ``- item`` lists)."""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        return _parse_yaml_subset(text)
    data = yaml.safe_load(text)
    return data if isinstance(data, dict) else {}


def _scalar(text: str) -> Any:
    s = text.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    if s.startswith("[") and s.endswith("]"):
        inner = s[1:-1].strip()
        return [_scalar(p) for p in inner.split(",")] if inner else []
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "~", ""):
        return None
    for cast in (int, float):
        try:
            return cast(s)
        except ValueError:
            pass
    return s


def _parse_yaml_subset(text: str) -> dict[str, Any]:
    root: dict[str, Any] = {}
    # (indent of the key, its container, the container holding the key, the key). A key with
    # no value opens a mapping, turned into a list if its first child is a "- " item.
    stack: list[tuple[int, Any, Any, str | None]] = [(-1, root, None, None)]
    for raw in text.splitlines():
        line = re.sub(r"\s+#.*$", "", raw).rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        s = line.strip()
        is_item = s == "-" or s.startswith("- ")
        while len(stack) > 1:
            top_indent, top = stack[-1][0], stack[-1][1]
            if indent > top_indent or (
                indent == top_indent and is_item and (isinstance(top, list) or top == {})
            ):
                break
            stack.pop()
        top_indent, container, parent, key = stack[-1]
        if is_item:
            if container == {} and parent is not None:
                container = []
                parent[key] = container
                stack[-1] = (top_indent, container, parent, key)
            if isinstance(container, list):
                container.append(_scalar(s[1:]))
            continue
        name, sep, value = s.partition(":")
        if not sep or not isinstance(container, dict):
            continue
        name = name.strip().strip("'\"")
        if value.strip():
            container[name] = _scalar(value)
        else:
            child: dict[str, Any] = {}
            container[name] = child
            stack.append((indent, child, container, name))
    return root


def grid_axis(spec: str) -> list[int]:
    """A meta.yaml attention_grid spec ('0, 16-2048 x2') as its values [0, 16, 32, ..., 2048]."""
    out: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)\s*-\s*(\d+)\s*x\s*([\d.]+)", part)
        if m:
            lo, hi, f = int(m[1]), int(m[2]), float(m[3])
            k = 0
            while (v := round(lo * f**k)) < hi:
                if not out or v > out[-1]:
                    out.append(v)
                k += 1
            out.append(hi)
        elif part:
            out.append(int(float(part)))
    return out

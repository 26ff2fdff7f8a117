"""The robust step-time fit: StepCost's efficiencies and overheads from observed step times.

An *observation* is one engine step (or, without per-step logs, a run of steps whose total time
is known) described by its ideal times under :class:`pipeline.physics.StepCost` at 100 % MFU and
MBU. With ``x = (1/mfu, 1/mbu, step_overhead, seq_overhead)`` the predicted time is

    sum over parts p of max(x0 * c_p, x1 * m_p) + x2 * n_steps + x3 * seqs + comm_s

where ``c_p`` / ``m_p`` are the compute / memory seconds of part p at peak (an observation has one
part, or two when it aggregates decode-only steps and prefill-carrying steps) and ``comm_s`` the
tensor-parallel all-reduce time StepCost adds. This is exactly ``StepCost.step_time`` for a single
step, so a fitted model can be handed to the simulator unchanged.

Estimator (docs/cost-models.md "Why this estimator"): bounded non-linear least squares on relative
residuals ``pred / observed - 1`` with Huber loss, scale from the MAD of a first soft-L1 pass.
Bounds keep 1/mfu, 1/mbu >= 1 (efficiencies below 100 %) and overheads >= 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from scipy.optimize import lsq_linear

# Columns of an observation frame (see module docstring). c2/m2 default to 0 (single part).
OBS_COLUMNS = ("time_s", "n_steps", "seqs", "comm_s", "c1", "m1", "c2", "m2")
PARAMS = ("inv_mfu", "inv_mbu", "step_overhead", "seq_overhead")
HUBER_K = 1.345  # 95 % efficiency at the normal, the classic Huber constant
Z95 = 1.959964
MIN_BRANCH = 10  # observations on a roofline branch needed to identify its efficiency
# Efficiencies at most 95 %: the best kernels in cmh §6 reach 80-94 % of peak FLOP/s or HBM
# bandwidth, so a higher value means the data cannot tell weight streaming from fixed overhead.
MAX_EFFICIENCY = 0.95
LOWER = np.array([1.0 / MAX_EFFICIENCY, 1.0 / MAX_EFFICIENCY, 0.0, 0.0])
UPPER = np.array([1e4, 1e4, 10.0, 1.0])


@dataclass(frozen=True)
class ParamFit:
    """Result of one fit: estimates, 95 % intervals, which parameters the data identified."""

    x: np.ndarray  # (1/mfu, 1/mbu, step_overhead, seq_overhead)
    low: np.ndarray
    high: np.ndarray
    identified: tuple[bool, bool, bool, bool]
    n: int
    scale: float  # robust scale (1.4826 MAD) of the relative residuals
    frac_compute: float  # share of observations on the compute branch
    fixed: dict[str, float] = field(default_factory=dict)
    at_cap: tuple[bool, bool] = (False, False)  # mfu / mbu sit on MAX_EFFICIENCY

    @property
    def mfu(self) -> float:
        return 1.0 / self.x[0]

    @property
    def mbu(self) -> float:
        return 1.0 / self.x[1]


def _arrays(obs: pl.DataFrame) -> dict[str, np.ndarray]:
    out = {}
    for c in OBS_COLUMNS:
        if c in obs.columns:
            out[c] = obs[c].cast(pl.Float64).fill_null(0.0).to_numpy()
        elif c in ("c2", "m2", "comm_s"):
            out[c] = np.zeros(obs.height)
        elif c == "n_steps":
            out[c] = np.ones(obs.height)
        else:
            raise ValueError(f"observation frame lacks column {c!r}")
    return out


def predict_arrays(x: np.ndarray, a: dict[str, np.ndarray]) -> np.ndarray:
    """Predicted seconds of every observation under parameters x."""
    return (
        np.maximum(x[0] * a["c1"], x[1] * a["m1"])
        + np.maximum(x[0] * a["c2"], x[1] * a["m2"])
        + x[2] * a["n_steps"]
        + x[3] * a["seqs"]
        + a["comm_s"]
    )


def predict(x: np.ndarray, obs: pl.DataFrame) -> np.ndarray:
    return predict_arrays(np.asarray(x, dtype=np.float64), _arrays(obs))


def _jacobian(x: np.ndarray, a: dict[str, np.ndarray]) -> np.ndarray:
    """d(pred)/dx per observation (sub-gradient of max: the active branch)."""
    j = np.empty((len(a["time_s"]), 4))
    comp1 = x[0] * a["c1"] >= x[1] * a["m1"]
    comp2 = x[0] * a["c2"] >= x[1] * a["m2"]
    j[:, 0] = np.where(comp1, a["c1"], 0.0) + np.where(comp2, a["c2"], 0.0)
    j[:, 1] = np.where(comp1, 0.0, a["m1"]) + np.where(comp2, 0.0, a["m2"])
    j[:, 2] = a["n_steps"]
    j[:, 3] = a["seqs"]
    return j


def _weights(u: np.ndarray, loss: str) -> np.ndarray:
    """IRLS weights for standardised residuals u: Huber, or soft-L1 (smooth L1)."""
    au = np.abs(u)
    if loss == "huber":
        return np.where(au <= 1.0, 1.0, 1.0 / np.maximum(au, 1e-12))
    return 1.0 / np.sqrt(1.0 + au * au)


def _objective(r: np.ndarray, scale: float, loss: str) -> float:
    u = np.abs(r) / scale
    if loss == "huber":
        return float(np.sum(np.where(u <= 1.0, 0.5 * u * u, u - 0.5)))
    return float(np.sum(np.sqrt(1.0 + u * u) - 1.0))


def _solve(
    a: dict[str, np.ndarray],
    free: np.ndarray,
    x_fixed: np.ndarray,
    loss: str,
    f_scale: float,
    starts: list[np.ndarray],
) -> tuple[np.ndarray, float]:
    """Iteratively reweighted bounded least squares on relative residuals.

    Given which roofline branch each observation is on, the prediction is linear in x, so each
    iteration is one weighted linear least-squares solve under the bounds (scipy's lsq_linear);
    branches and weights are then updated from the new x until nothing changes.
    """
    t = a["time_s"]
    base = a["comm_s"] / t - 1.0  # relative residual = J x / t + base
    best: tuple[np.ndarray, float] | None = None
    for s in starts:
        x = np.clip(s.copy(), LOWER, UPPER)
        x[~free] = x_fixed[~free]
        prev = None
        for _ in range(40):
            jm = _jacobian(x, a) / t[:, None]
            r = jm @ x + base
            w = np.sqrt(_weights(r / f_scale, loss))
            target = -(base + jm[:, ~free] @ x[~free])
            cols = jm[:, free] * w[:, None]
            norm = np.maximum(np.sqrt(np.sum(cols * cols, axis=0)), 1e-300)
            # ||A z - b|| = ||R z - Q'b|| + const: solve the bounded problem on the p x p factor.
            q, rr = np.linalg.qr(cols / norm)
            sol = lsq_linear(
                rr,
                q.T @ (target * w),
                bounds=(LOWER[free] * norm, UPPER[free] * norm),
                method="bvls",
            )
            x_new = x.copy()
            x_new[free] = sol.x / norm
            if prev is not None and np.allclose(x_new, x, rtol=1e-9, atol=1e-15):
                x = x_new
                break
            prev, x = x, x_new
        r = predict_arrays(x, a) / t - 1.0
        cost = _objective(r, f_scale, loss)
        if best is None or cost < best[1]:
            best = (x, cost)
    assert best is not None
    return best


def fit_params(obs: pl.DataFrame, fixed: dict[str, float] | None = None) -> ParamFit:
    """Fit (1/mfu, 1/mbu, step_overhead, seq_overhead) to an observation frame.

    ``fixed`` pins parameters by name ('inv_mfu', 'inv_mbu', ...), e.g. the MFU of the prefill fit
    when decode steps never reach the compute-bound branch.
    """
    fixed = dict(fixed or {})
    a = _arrays(obs)
    ok = np.isfinite(a["time_s"]) & (a["time_s"] > 0)
    a = {k: v[ok] for k, v in a.items()}
    n = len(a["time_s"])
    if n < 8:
        raise ValueError(f"too few observations to fit ({n})")
    x_fixed = np.array([2.0, 1.4, 0.0, 0.0])
    free = np.ones(4, dtype=bool)
    for name, value in fixed.items():
        i = PARAMS.index(name)
        x_fixed[i] = value
        free[i] = False
    # Starting points: the overhead starts from the smallest observed step (a lower bound).
    t_min = float(np.quantile(a["time_s"] / np.maximum(a["n_steps"], 1), 0.02))
    starts = []
    for inv_c, inv_m in ((2.0, 1.4), (4.0, 2.5), (1.3, 1.1)):
        s = x_fixed.copy()
        s[0] = inv_c if free[0] else s[0]
        s[1] = inv_m if free[1] else s[1]
        s[2] = 0.3 * t_min if free[2] else s[2]
        s[3] = 1e-5 if free[3] else s[3]
        starts.append(s)
    # Pass 1: soft-L1 (a smooth least-absolute-deviations) at 5 % to locate the bulk.
    x1, _ = _solve(a, free, x_fixed, "soft_l1", 0.05, starts)
    r1 = predict_arrays(x1, a) / a["time_s"] - 1.0
    scale = max(1.4826 * float(np.median(np.abs(r1 - np.median(r1)))), 1e-6)
    # Pass 2: Huber at 1.345 robust sigmas, started from pass 1.
    x, _ = _solve(a, free, x_fixed, "huber", HUBER_K * scale, [x1])
    resid = predict_arrays(x, a) / a["time_s"] - 1.0
    scale = max(1.4826 * float(np.median(np.abs(resid - np.median(resid)))), 1e-9)
    # Which branches the data sit on decides what is identified.
    on_c = (x[0] * a["c1"] >= x[1] * a["m1"]) & (a["c1"] > 0)
    on_c2 = (x[0] * a["c2"] >= x[1] * a["m2"]) & (a["c2"] > 0)
    n_compute = int(np.sum(on_c | on_c2))
    n_memory = int(np.sum(~on_c & (a["m1"] > 0)) + np.sum(~on_c2 & (a["m2"] > 0)))
    at_cap = x[:2] <= LOWER[:2] * (1 + 1e-6)
    identified = [
        bool(free[0] and n_compute >= MIN_BRANCH and not at_cap[0]),
        bool(free[1] and n_memory >= MIN_BRANCH and not at_cap[1]),
        bool(free[2]),
        bool(free[3] and np.ptp(a["seqs"]) > 0),
    ]
    # Asymptotic 95 % intervals: cov = s^2 (J'J)^-1 over the parameters the data identify,
    # with observations Huber-weighted (down-weighted outliers count less).
    low, high = np.full(4, np.nan), np.full(4, np.nan)
    idx = np.flatnonzero(identified)
    if len(idx):
        jm = (_jacobian(x, a) / a["time_s"][:, None])[:, idx]
        u = np.abs(resid) / (HUBER_K * scale)
        w = np.where(u <= 1.0, 1.0, 1.0 / np.maximum(u, 1e-12))
        jtj = (jm * w[:, None]).T @ jm
        try:
            cov = np.linalg.pinv(jtj) * scale**2
            se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
            low[idx] = x[idx] - Z95 * se
            high[idx] = x[idx] + Z95 * se
        except np.linalg.LinAlgError:
            pass
    return ParamFit(
        x=x,
        low=low,
        high=high,
        identified=tuple(identified),  # type: ignore[arg-type]
        n=n,
        scale=scale,
        frac_compute=n_compute / n,
        fixed=fixed,
        at_cap=(bool(at_cap[0] and free[0]), bool(at_cap[1] and free[1])),
    )


def efficiency_interval(inv: float, inv_low: float, inv_high: float) -> tuple[float, float]:
    """95 % interval of an efficiency from the interval of its inverse (capped at 1)."""
    if not (math.isfinite(inv_low) and math.isfinite(inv_high)):
        return (math.nan, math.nan)
    lo = 1.0 / inv_high if inv_high > 0 else math.nan
    hi = 1.0 / inv_low if inv_low > 1.0 else 1.0
    return (lo, min(hi, 1.0))


def mape(pred: np.ndarray, obs: np.ndarray) -> float:
    ok = obs > 0
    return float(np.mean(np.abs(pred[ok] / obs[ok] - 1.0))) if ok.any() else math.nan


def r_squared(pred: np.ndarray, obs: np.ndarray) -> float:
    if len(obs) < 2:
        return math.nan
    ss_tot = float(np.sum((obs - obs.mean()) ** 2))
    return 1.0 - float(np.sum((obs - pred) ** 2)) / ss_tot if ss_tot > 0 else math.nan

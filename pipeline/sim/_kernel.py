"""numba kernel of :mod:`pipeline.sim.compiled` (imported lazily: compiling costs seconds once,
then numba's cache in ``__pycache__`` makes later imports cheap).

Every float operation is written in the order of the Python engine (``_Engine._step`` and
``StepCost.time_of``), with no fastmath, so the results are the same bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.sim.compiled import (
    C_BS,
    C_BUDGET,
    C_CAP,
    C_CHUNKED,
    C_PF_EFF,
    C_PF_RAW,
    C_PHASE,
    C_SEQS,
    C_TOTAL,
    C_WM,
    CACHED,
    CJ,
    DONE,
    EMIT,
    F_BUSY,
    F_LAST,
    F_T,
    FULL,
    GJ,
    HN,
    IN_DEC,
    IN_PRE,
    IN_RUN,
    N_ROWS,
    N_STATE,
    NPRE,
    OUT,
    P_EFF,
    PNX,
    PPV,
    PREC,
    PREH,
    PRET,
    PROMPT,
    QH,
    QT,
    RNX,
    RPV,
    RUNC,
    RUNH,
    RUNT,
    S_G,
    S_NFIN,
    S_NLAST,
    S_NLOG,
    S_NSEG,
    S_ROUTED,
    S_STEPS,
    SEG,
    STALLED,
    USED,
    WC,
    WH,
    A,
    B,
)


@njit(cache=True, inline="always")
def _blocks(tokens, bs):  # type: ignore[no-untyped-def]
    return (tokens + bs - 1) // bs


@njit(cache=True, inline="always")
def _pmod(x, m):  # type: ignore[no-untyped-def]
    r = x % m
    return r + m if r < 0 else r


@njit(cache=True)
def _ll_append(R, nx, pv, st, c, h, tl, r):  # type: ignore[no-untyped-def]
    R[nx, r] = -1
    R[pv, r] = st[tl]
    if st[c] == 0:
        st[h] = r
    else:
        R[nx, st[tl]] = r
    st[tl] = r
    st[c] += 1


@njit(cache=True)
def _ll_remove(R, nx, pv, st, c, h, tl, r):  # type: ignore[no-untyped-def]
    p, q = R[pv, r], R[nx, r]
    if p == -1:
        st[h] = q
    else:
        R[nx, p] = q
    if q == -1:
        st[tl] = p
    else:
        R[pv, q] = p
    st[c] -= 1


@njit(cache=True)
def _heap_push(hp, st, k, s, r):  # type: ignore[no-untyped-def]
    i = st[HN]
    st[HN] = i + 1
    while i > 0:
        p = (i - 1) // 2
        if hp[0, p] < k or (hp[0, p] == k and hp[1, p] <= s):
            break
        hp[0, i], hp[1, i], hp[2, i] = hp[0, p], hp[1, p], hp[2, p]
        i = p
    hp[0, i], hp[1, i], hp[2, i] = k, s, r


@njit(cache=True)
def _heap_pop(hp, st):  # type: ignore[no-untyped-def]
    n = st[HN] - 1
    st[HN] = n
    k, s, r = hp[0, n], hp[1, n], hp[2, n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and (
            hp[0, c + 1] < hp[0, c] or (hp[0, c + 1] == hp[0, c] and hp[1, c + 1] < hp[1, c])
        ):
            c += 1
        if k < hp[0, c] or (k == hp[0, c] and s <= hp[1, c]):
            break
        hp[0, i], hp[1, i], hp[2, i] = hp[0, c], hp[1, c], hp[2, c]
        i = c
    if n > 0:
        hp[0, i], hp[1, i], hp[2, i] = k, s, r


@njit(cache=True)
def _leave(R, st, hist, s_cnt, G, bs, r):  # type: ignore[no-untyped-def]
    """Remove decoder r from the aggregates; returns its context (tokens in KV)."""
    key = R[CJ, r] - R[GJ, r]
    R[IN_DEC, r] = 0
    st[B] -= 1
    st[A] -= key
    hist[_pmod(key, bs)] -= 1
    steps = G - R[GJ, r]
    s_cnt[R[SEG, r]] = steps
    R[EMIT, r] += steps
    return R[CJ, r] + steps


@njit(cache=True)
def _preempt(R, st, hist, s_cnt, wq, cw, G, bs, r):  # type: ignore[no-untyped-def]
    """Drop running request r's KV and re-queue it at the front; returns it."""
    _ll_remove(R, RNX, RPV, st, RUNC, RUNH, RUNT, r)
    R[IN_RUN, r] = 0
    if R[IN_DEC, r]:
        kv = _leave(R, st, hist, s_cnt, G, bs, r)
        R[SEG, r] = -1  # its heap entry is now stale
    else:
        kv = R[DONE, r]
        _ll_remove(R, PNX, PPV, st, PREC, PREH, PRET, r)
        R[IN_PRE, r] = 0
    st[USED] -= _blocks(kv, bs)
    R[P_EFF, r] = R[PROMPT, r] + R[EMIT, r]
    R[DONE, r] = R[CACHED, r]
    R[NPRE, r] += 1
    h = st[WH] - 1
    if h < 0:
        h += cw
    st[WH] = h
    wq[h] = r
    st[WC] += 1
    return r


@njit(cache=True)
def _head_admissible(R, st, wq, cf, free, budget):  # type: ignore[no-untyped-def]
    if st[WC] == 0 or st[RUNC] >= cf[C_SEQS] or budget <= 0:
        return False
    r = wq[st[WH]]
    todo = R[P_EFF, r] - R[DONE, r]
    if cf[C_CHUNKED]:
        todo = min(todo, budget, cf[C_CAP])
    elif todo > budget:
        return False
    return _blocks(R[DONE, r] + todo, cf[C_BS]) <= free - cf[C_WM]


@njit(cache=True)
def _partial_fits(R, st, cf, budget):  # type: ignore[no-untyped-def]
    if st[PREC] == 0:
        return False
    r = st[PREH]
    bs = cf[C_BS]
    todo = min(R[P_EFF, r] - R[DONE, r], budget, cf[C_CAP])
    need = _blocks(R[DONE, r] + todo, bs) - _blocks(R[DONE, r], bs)
    return need <= cf[C_TOTAL] - st[USED]


@njit(cache=True)
def _time_of(p, row, tokens, seqs, pairs, kv, score):  # type: ignore[no-untyped-def]
    """StepCost.time_of with the constants of ``p[row]`` (same operations, same order)."""
    ft = float(tokens)
    compute = (p[row, 0] * ft + p[row, 1] * pairs) * p[row, 2]
    w = p[row, 3] if p[row, 4] == 0.0 else p[row, 3] + p[row, 4] * (1.0 - p[row, 5] ** ft)
    memory = (w + p[row, 6] * float(kv) + p[row, 7] * float(score)) * p[row, 8]
    fixed = ((p[row, 9] + p[row, 10] * float(seqs)) + p[row, 11]) + p[row, 12] * ft
    u = p[row, 13]
    a = compute + u * memory
    b = memory + u * compute
    return (b if b > a else a) + fixed


@njit(cache=True)
def _advance(j, horizon, arr, load, link, R, st2, sf, wq2, hist2, hp2, segi2, segf2, dec2, logf2,
             logi2, snap, ch_r, ch_todo, ch_before, sched, first, fin, cf, p, record):  # type: ignore[no-untyped-def]  # fmt: skip
    """Run server j until its clock reaches ``horizon`` (a step under way finishes) or nothing is
    left; 0, or FULL / STALLED. Mirrors ReplicaEngine.advance with ``_step`` one step at a time."""
    st, wq, hist, hp = st2[j], wq2[j], hist2[j], hp2[j]
    segi, segf, dec_end, logf, logi = segi2[j], segf2[j], dec2[j], logf2[j], logi2[j]
    bs, total, mbt, cap = cf[C_BS], cf[C_TOTAL], cf[C_BUDGET], cf[C_CAP]
    chunked, pf_eff, pf_raw, phase = cf[C_CHUNKED], cf[C_PF_EFF], cf[C_PF_RAW], cf[C_PHASE]
    cw = wq.shape[0]
    t, busy, lastf = sf[j, F_T], sf[j, F_BUSY], sf[j, F_LAST]
    G, steps, nseg, nlog = st[S_G], st[S_STEPS], st[S_NSEG], st[S_NLOG]
    nfin, nlast = st[S_NFIN], st[S_NLAST]
    while True:
        while st[QH] != -1 and arr[st[QH]] <= t:
            if st[WC] == cw:
                return FULL
            st[WC] += 1
            wq[(st[WH] + st[WC] - 1) % cw] = st[QH]
            st[QH] = link[st[QH]]
            if st[QH] == -1:
                st[QT] = -1
        if st[RUNC] == 0 and st[WC] == 0:
            if st[QH] == -1:
                break
            t = arr[st[QH]]
            continue
        if t >= horizon:
            break
        if st[PREC] == 0 and st[WC] == 0 and st[B]:
            # (The completion loop below is written out here and in the general step on purpose:
            # as a shared njit helper its array arguments cost reference counting on every step,
            # measured 2.0 s -> 4.9 s for a million requests.)
            # Decode-only steps: exactly what the general step below does when nothing waits and
            # nothing is half-prefilled (no admission, no chunk, run_decodes is True), without
            # its checks. Leaves before a step that must preempt, when a request arrives, or at
            # the horizon.
            row = 1 if phase else 0
            short = False
            while True:
                claim = hist[_pmod(-G, bs)]
                if claim > total - st[USED]:
                    short = True  # the general step preempts
                    break
                st[USED] += claim
                b = st[B]
                sum_ctx = st[A] + b * G
                dt = _time_of(p, row, b, b, float(sum_ctx), sum_ctx, 0)
                t_end = t + dt
                steps += 1
                busy += dt
                if record:
                    if nlog == logf.shape[1]:
                        return FULL
                    logf[0, nlog], logf[1, nlog] = t, t_end
                    logi[0, nlog], logi[1, nlog], logi[2, nlog], logi[3, nlog] = b, 0, b, st[USED]
                    nlog += 1
                if dec_end.shape[0] == G:
                    return FULL
                dec_end[G] = t_end
                G += 1
                while st[HN] and hp[0, 0] <= G:
                    seg, r = hp[1, 0], hp[2, 0]
                    _heap_pop(hp, st)
                    if R[SEG, r] != seg or not R[IN_DEC, r]:
                        continue  # stale entry of a preempted segment
                    kvt = _leave(R, st, hist, segi[2], G, bs, r)
                    fin[r] = t_end
                    if t_end != lastf:
                        lastf, nlast = t_end, 0
                    nlast += 1
                    nfin += 1
                    st[USED] -= _blocks(kvt, bs)
                    _ll_remove(R, RNX, RPV, st, RUNC, RUNH, RUNT, r)
                    R[IN_RUN, r] = 0
                t = t_end
                if st[B] == 0 or t >= horizon or (st[QH] != -1 and arr[st[QH]] <= t):
                    break
            if not short:
                continue  # queue the arrival first
        # ---- one step (engine._step) ----
        budget = mbt
        run_decodes = True
        if pf_eff and (
            _partial_fits(R, st, cf, budget)
            or _head_admissible(R, st, wq, cf, total - st[USED], budget)
        ):
            run_decodes = False
        preempted = False
        if run_decodes and st[B]:
            while st[B] and hist[_pmod(-G, bs)] > total - st[USED]:
                if st[WC] == cw:
                    return FULL
                _preempt(R, st, hist, segi[2], wq, cw, G, bs, st[RUNT])
                preempted = True
            if st[B]:
                st[USED] += hist[_pmod(-G, bs)]
        dec_count = st[B] if run_decodes else 0
        budget -= dec_count
        nch = 0
        if run_decodes or pf_raw:
            m = 0
            x = st[PREH]
            while x != -1:
                snap[m] = x
                m += 1
                x = R[PNX, x]
            for i in range(m):
                if budget <= 0:
                    break
                r = snap[i]
                if not R[IN_PRE, r]:
                    continue
                todo = min(R[P_EFF, r] - R[DONE, r], budget, cap)
                need = _blocks(R[DONE, r] + todo, bs) - _blocks(R[DONE, r], bs)
                while need > total - st[USED]:
                    preempted = True
                    if st[WC] == cw:
                        return FULL
                    if _preempt(R, st, hist, segi[2], wq, cw, G, bs, st[PRET]) == r:
                        break
                if not R[IN_PRE, r]:
                    continue
                st[USED] += need
                ch_r[nch], ch_todo[nch], ch_before[nch] = r, todo, R[DONE, r]
                nch += 1
                budget -= todo
        loading = 0.0  # KV moved in for requests admitted for the first time (load)
        if not preempted:
            while _head_admissible(R, st, wq, cf, total - st[USED], budget):
                r = wq[st[WH]]
                st[WH] = (st[WH] + 1) % cw
                st[WC] -= 1
                todo = R[P_EFF, r] - R[DONE, r]
                if chunked:
                    todo = min(todo, budget, cap)
                st[USED] += _blocks(R[DONE, r] + todo, bs)  # cached prefix blocks too
                _ll_append(R, RNX, RPV, st, RUNC, RUNH, RUNT, r)
                R[IN_RUN, r] = 1
                _ll_append(R, PNX, PPV, st, PREC, PREH, PRET, r)
                R[IN_PRE, r] = 1
                if np.isnan(sched[r]):
                    sched[r] = t
                    loading += load[r]
                ch_r[nch], ch_todo[nch], ch_before[nch] = r, todo, R[DONE, r]
                nch += 1
                budget -= todo
        if dec_count == 0 and nch == 0:
            return STALLED
        sum_ctx = (st[A] + st[B] * G) if dec_count else 0
        tokens, kv, score = dec_count, sum_ctx, 0
        pairs = float(sum_ctx)
        for i in range(nch):
            todo, before = ch_todo[i], ch_before[i]
            tokens += todo
            pairs += todo * (before + todo / 2.0)
            kv += before + todo
            score += todo * todo
        seqs = dec_count + nch
        row = 0 if (phase == 0 or tokens > seqs) else 1
        dt = _time_of(p, row, tokens, seqs, pairs, kv, score) + loading
        t_end = t + dt
        steps += 1
        busy += dt
        if record:
            if nlog == logf.shape[1]:
                return FULL
            logf[0, nlog], logf[1, nlog] = t, t_end
            logi[0, nlog], logi[1, nlog] = seqs, tokens - dec_count
            logi[2, nlog], logi[3, nlog] = dec_count, st[USED]
            nlog += 1
        if dec_count:
            if dec_end.shape[0] == G:
                return FULL
            dec_end[G] = t_end
            G += 1
            while st[HN] and hp[0, 0] <= G:
                seg, r = hp[1, 0], hp[2, 0]
                _heap_pop(hp, st)
                if R[SEG, r] != seg or not R[IN_DEC, r]:
                    continue  # stale entry of a preempted segment
                kvt = _leave(R, st, hist, segi[2], G, bs, r)
                fin[r] = t_end
                if t_end != lastf:
                    lastf, nlast = t_end, 0
                nlast += 1
                nfin += 1
                st[USED] -= _blocks(kvt, bs)
                _ll_remove(R, RNX, RPV, st, RUNC, RUNH, RUNT, r)
                R[IN_RUN, r] = 0
        for i in range(nch):
            r = ch_r[i]
            R[DONE, r] += ch_todo[i]
            if R[DONE, r] < R[P_EFF, r]:
                continue
            _ll_remove(R, PNX, PPV, st, PREC, PREH, PRET, r)
            R[IN_PRE, r] = 0
            if R[EMIT, r] < R[OUT, r]:
                if np.isnan(first[r]):
                    first[r] = t_end
                R[EMIT, r] += 1
                if nseg == segf.shape[0]:
                    return FULL
                R[SEG, r] = nseg
                segi[0, nseg], segi[1, nseg], segi[2, nseg] = r, G, 0
                segf[nseg] = t_end
                nseg += 1
            if R[EMIT, r] >= R[OUT, r]:
                fin[r] = t_end
                if t_end != lastf:
                    lastf, nlast = t_end, 0
                nlast += 1
                nfin += 1
                st[USED] -= _blocks(R[DONE, r], bs)
                _ll_remove(R, RNX, RPV, st, RUNC, RUNH, RUNT, r)
                R[IN_RUN, r] = 0
            else:
                ctx = R[P_EFF, r]
                R[CJ, r], R[GJ, r] = ctx, G
                R[IN_DEC, r] = 1
                st[B] += 1
                st[A] += ctx - G
                hist[_pmod(ctx - G, bs)] += 1
                _heap_push(hp, st, G + R[OUT, r] - R[EMIT, r], R[SEG, r], r)
        t = t_end
    sf[j, F_T], sf[j, F_BUSY], sf[j, F_LAST] = t, busy, lastf
    st[S_G], st[S_STEPS], st[S_NSEG], st[S_NLOG] = G, steps, nseg, nlog
    st[S_NFIN], st[S_NLAST] = nfin, nlast
    return 0


@njit(cache=True)
def _route(j, g, st2, link):  # type: ignore[no-untyped-def]
    """Append request g to server j's requests not yet queued."""
    link[g] = -1
    if st2[j, QH] == -1:
        st2[j, QH] = g
    else:
        link[st2[j, QT]] = g
    st2[j, QT] = g
    st2[j, S_ROUTED] += 1


@njit(cache=True)
def run(arr, order, prompt, out, cached, load, servers, least_loaded, cf, p, record, caps):  # type: ignore[no-untyped-def]  # fmt: skip
    """Simulate ``servers`` servers on the requests ``order`` (arrival order) routes to them:
    round robin, or to the fewest outstanding requests at arrival (each server advanced to it
    first). Returns the error code, each request's server, the per-request results (indexed by
    request) and each server's buffers (the caller slices them by the counts in ``st``)."""
    n, m, K = arr.shape[0], order.shape[0], servers
    R = np.zeros((N_ROWS, max(n, 1)), dtype=np.int64)
    for i in range(m):
        r = order[i]
        R[P_EFF, r] = prompt[r]
        R[DONE, r] = cached[r]
        R[SEG, r] = -1
        R[PROMPT, r] = prompt[r]
        R[OUT, r] = out[r]
        R[CACHED, r] = cached[r]
    st = np.zeros((K, N_STATE), dtype=np.int64)
    for j in range(K):
        for c in (RUNH, RUNT, PREH, PRET, QH, QT):
            st[j, c] = -1
    sf = np.zeros((K, 3))
    sf[:, F_LAST] = -np.inf
    sched = np.full(n, np.nan)
    first = np.full(n, np.nan)
    fin = np.full(n, np.nan)
    route = np.full(n, -1, dtype=np.int64)
    link = np.full(max(n, 1), -1, dtype=np.int64)
    wq = np.empty((K, max(caps[3], 1)), dtype=np.int64)
    hist = np.zeros((K, cf[C_BS]), dtype=np.int64)
    width = min(m, cf[C_SEQS]) + 1
    snap = np.empty(width, dtype=np.int64)
    ch_r = np.empty(width, dtype=np.int64)
    ch_todo = np.empty(width, dtype=np.int64)
    ch_before = np.empty(width, dtype=np.int64)
    # Fixed capacities (caps): a buffer reassigned inside the loop costs numba reference counting
    # on every step (twice the step time, measured), so a full buffer ends the run with FULL
    # and the caller runs again with larger ones.
    segi = np.empty((K, 3, caps[2]), dtype=np.int64)  # request, first decode step, decode steps
    segf = np.empty((K, caps[2]))  # time of the segment's first token
    hp = np.empty((K, 3, caps[2]), dtype=np.int64)  # heap: decode step it ends at, seg, request
    dec_end = np.empty((K, caps[0]))
    cl = caps[1] if record else 1
    logf = np.empty((K, 2, cl))  # step log: t_start, t_end
    logi = np.empty((K, 4, cl), dtype=np.int64)  # seqs, prefill, decode, KV blocks
    err = 0
    if K == 1 or not least_loaded:
        for i in range(m):
            route[order[i]] = i % K
            _route(i % K, order[i], st, link)
    else:
        for i in range(m):
            g = order[i]
            t = arr[g]
            best, best_load = 0, -1
            for j in range(K):
                err = _advance(j, t, arr, load, link, R, st, sf, wq, hist, hp, segi, segf, dec_end,
                               logf, logi, snap, ch_r, ch_todo, ch_before, sched, first, fin, cf,
                               p, record)  # fmt: skip
                if err:
                    break
                held = st[j, S_ROUTED] - st[j, S_NFIN]
                if sf[j, F_LAST] > t:
                    held += st[j, S_NLAST]  # finished in the step under way at t: not yet done
                if best_load < 0 or held < best_load:
                    best, best_load = j, held
            if err:
                break
            route[g] = best
            _route(best, g, st, link)
    for j in range(K):
        if err:
            break
        # fmt: off
        err = _advance(j, np.inf, arr, load, link, R, st, sf, wq, hist, hp, segi, segf, dec_end,
                       logf, logi, snap, ch_r, ch_todo, ch_before, sched, first, fin, cf, p, record)
        # fmt: on
    return (err, route, sched, first, fin, R[NPRE].copy(), st, sf, dec_end, segi, segf, logf,
            logi)  # fmt: skip

"""The simulator's per-request path as compiled kernels over its arrays: time moves to the
request, the consumer's lanes and prefix search, routing, the member serving it (its cache and
producer through :mod:`cbi1kit.sim._caches`). ``docs/simulator.md`` ("The compiled engine")
gives the layout; ``cbi1kit.sim._simulator`` is the per-event reference it is held to.

Items are dense ids: every distinct sequence hash of the workload is one ``uid`` (its
fingerprint and buckets prepared once, vectorised).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cbi1kit._compile import helper as inline, kernel
from cbi1kit.sim._arrays import (
    _PROBED,
    _RESIDENT,
    _S16,
    _SLOT,
    _U0,
    C_CAP,
    C_CLEAR,
    C_DCS,
    C_HEALTH,
    C_KICKS,
    C_MPD,
    C_NB,
    C_POLICY,
    C_WINDOW,
    D_CAPFAIL,
    D_DIRTY,
    D_PENDING,
    D_REQUESTS,
    D_RESIDENT,
    DIVERGED_CACHE,
    F_MSPT,
    F_P,
    F_W,
    G_ALPHA,
    G_EXPECTED,
    M_DC,
    M_HEAD,
    M_LOAD,
    M_SIZE,
    NEED_ROOM,
    OK,
    R_ABSENT,
    R_END_MS,
    R_EV_REMOVED,
    R_EVICTED,
    R_FP,
    R_FREE,
    R_HIT,
    R_NDELTA,
    R_NDEPTH,
    R_NEED_IMG,
    R_NHEALTH,
    R_NIMG,
    R_OVER,
    R_REQ_BLOCKS,
    R_REQUESTS,
    R_RR,
    R_STATUS,
    R_STORED,
    R_UNDER,
    SimRef,
)
from cbi1kit.sim._caches import (
    _add,
    _advance,
    _all_depths,
    _drain_publish,
    _drop,
    _heap_push,
    _removed,
    _stored,
    _touch,
)

# ----------------------------------------------------------------------------- the consumer


@inline
def _holds(w: np.uint64, fp: np.uint64) -> bool:
    """Whether word ``w`` holds fingerprint ``fp`` in any slot."""
    return (  # type: ignore[no-any-return]
        w & _SLOT == fp
        or (w >> np.uint64(16)) & _SLOT == fp
        or (w >> np.uint64(32)) & _SLOT == fp
        or (w >> np.uint64(48)) & _SLOT == fp
    )


@inline
def _mask(s: Any, start: int, pos: int) -> int:
    """Lane bits holding block ``pos``'s fingerprint in either bucket (memoised per request)."""
    known = s.masks[pos]
    if known >= 0:
        return known  # type: ignore[no-any-return]
    u = s.uid[start + pos]
    fp, a, b = s.fp[u], s.bucket_a[u], s.bucket_b[u]
    bits = 0
    for dc in range(s.cfg[C_DCS]):
        if _holds(s.lane[a, dc], fp) or _holds(s.lane[b, dc], fp):
            bits |= 1 << dc
    s.masks[pos] = bits
    return bits


@inline
def _narrow(s: Any, members: int, hits: int, pos: int) -> None:
    """Each member lane's bracket at ``pos``: up to it on a hit, down to it on a miss."""
    for lane in range(s.search.shape[1]):
        if members >> lane & 1:
            if hits >> lane & 1:
                s.search[1, lane] = s.search[0, lane]
                s.search[0, lane] = pos
            else:
                s.search[2, lane] = pos


@inline
def _bisect(s: Any, start: int, n: int, active: int) -> None:
    """Exponential then binary search of each lane's bracket (a position's mask is probed once
    and shared, as upstream's grouped probes share it)."""
    sampling, pos = active, 1
    while pos < n and sampling:
        hits = _mask(s, start, pos)
        _narrow(s, sampling, hits, pos)
        sampling &= hits
        pos *= 2
    moved = True
    while moved:
        moved = False
        for lane in range(s.search.shape[1]):
            lower, upper = s.search[0, lane], s.search[2, lane]
            if active >> lane & 1 and upper - lower > 1:
                mid = lower + (upper - lower) // 2
                _narrow(s, 1 << lane, _mask(s, start, mid), mid)
                moved = True


@inline
def _verify(s: Any, start: int, active: int, depths: Any) -> int:
    """The window below each tentative depth, in position order; lanes missed at its left
    edge."""
    window = s.cfg[C_WINDOW]
    lo, hi = 1 << 62, 0
    for lane in range(s.search.shape[1]):
        if active >> lane & 1:
            upper = s.search[2, lane]
            depths[lane] = upper
            s.search[3, lane] = max(upper - window, 0)
            lo, hi = min(lo, s.search[3, lane]), max(hi, upper)
    verifying, left_edge = active, 0
    for pos in range(lo, hi):
        participants = 0
        for lane in range(s.search.shape[1]):
            if verifying >> lane & 1 and s.search[3, lane] <= pos < s.search[2, lane]:
                participants |= 1 << lane
        if not participants:
            continue
        misses = participants & ~_mask(s, start, pos)
        for lane in range(s.search.shape[1]):
            if misses >> lane & 1:
                depths[lane] = pos
                if pos == s.search[3, lane]:
                    left_edge |= 1 << lane
        verifying &= ~misses
    return left_edge


@inline
def _fall_back(s: Any, start: int, lanes: int, depths: Any) -> None:
    """A lane missed at its window's left edge scans up from the hit before its bracket."""
    scanning = 0
    for lane in range(s.search.shape[1]):
        pred, first = s.search[1, lane], s.search[3, lane]
        if lanes >> lane & 1 and pred < first and pred + 1 != first:
            s.search[4, lane] = pred + 1
            s.search[5, lane] = first
            scanning |= 1 << lane
    while scanning:
        pos = 1 << 62
        for lane in range(s.search.shape[1]):
            if scanning >> lane & 1:
                pos = min(pos, s.search[4, lane])
        hits = _mask(s, start, pos)
        for lane in range(s.search.shape[1]):
            if scanning >> lane & 1 and s.search[4, lane] == pos:
                if not hits >> lane & 1:
                    depths[lane] = pos
                    scanning &= ~(1 << lane)
                else:
                    s.search[4, lane] += 1
                    if s.search[4, lane] == s.search[5, lane]:
                        scanning &= ~(1 << lane)


@inline
def _prefix_depths(s: Any, start: int, n: int, depths: Any) -> None:
    """Each lane's depth by upstream's advisory search (``ckf._consumer.find_prefix_depths``)."""
    depths[:] = 0
    active = ((1 << s.cfg[C_DCS]) - 1) & _mask(s, start, 0)
    if not active:
        return
    s.search[0, :] = 0
    s.search[1, :] = 0
    s.search[2, :] = n
    _bisect(s, start, n, active)
    _fall_back(s, start, _verify(s, start, active, depths), depths)


@inline
def _count_absent(s: Any, start: int, n: int) -> None:
    """While every lane equals its producer: the first probe of each absent item, per lane."""
    dcs = s.cfg[C_DCS]
    for dc in range(dcs):
        if s.dcv[dc, D_PENDING] or s.dcv[dc, D_DIRTY]:
            return
    slots = 4 * s.cfg[C_NB]
    for dc in range(dcs):
        alpha = s.dcv[dc, D_RESIDENT] / slots
        estimate = 8 * alpha * s.fcfg[F_P]
        bins = s.fpr_bins.shape[1]
        where = min(int(alpha * bins), bins - 1)
        for pos in range(n):
            u = s.uid[start + pos]
            f = s.flags[u, dc]
            if f & _PROBED or (s.owners[u, dc] > 0 and f & _RESIDENT):
                continue
            s.flags[u, dc] = f | _PROBED
            s.reg[R_ABSENT] += 1
            s.freg[G_ALPHA] += alpha
            s.freg[G_EXPECTED] += estimate
            s.fpr_bins[0, where] += 1
            if _mask(s, start, pos) >> dc & 1:
                s.reg[R_FP] += 1
                s.fpr_bins[1, where] += 1


@inline
def _filter_depths(s: Any, i: int, start: int, n: int) -> None:
    """The depth a global consumer's CKF search finds per DC, logged beside the exact one."""
    dcs, mpd = s.cfg[C_DCS], s.cfg[C_MPD]
    seen = s.search[6]
    if n:
        s.masks[:n] = -1
        _prefix_depths(s, start, n, seen)
        _count_absent(s, start, n)
    else:
        seen[:] = 0
    row = s.reg[R_NDEPTH]
    for dc in range(dcs):
        exact = 0
        for m in range(dc * mpd, dc * mpd + mpd):
            exact = max(exact, s.depths[m])
        log = s.depth_log[row + dc]
        log[0], log[1], log[2], log[3] = i, dc, exact, seen[dc]
        if seen[dc] > exact:
            s.reg[R_OVER] += 1
        elif seen[dc] < exact:
            s.reg[R_UNDER] += 1
    s.reg[R_NDEPTH] = row + dcs


# ----------------------------------------------------------------------------- routing


@inline
def _dc_cost(s: Any, dc: int, depth: int, n: int) -> float:
    """Dynamo's router cost of DC ``dc``: weighted blocks to compute plus load per member."""
    mpd = s.cfg[C_MPD]
    load = 0
    for m in range(dc * mpd, dc * mpd + mpd):
        load += s.mem[m, M_LOAD]
    return s.fcfg[F_W] * (n - depth) + load / mpd  # type: ignore[no-any-return]


@inline
def _route(s: Any, i: int, start: int, n: int) -> int:
    """The member request ``i`` goes to; every member's depth in ``s.depths``."""
    _all_depths(s, start, n)
    _filter_depths(s, s.reg[R_REQUESTS], start, n)
    policy, members = s.cfg[C_POLICY], s.mem.shape[0]
    if policy == 0:
        m = s.reg[R_RR] % members
        s.reg[R_RR] += 1
        return m  # type: ignore[no-any-return]
    if policy == 1:
        return s.draws[i]  # type: ignore[no-any-return]
    dcs, mpd = s.cfg[C_DCS], s.cfg[C_MPD]
    seen = s.search[6]
    if policy == 2:
        for dc in range(dcs):
            seen[dc] = 0
            for m in range(dc * mpd, dc * mpd + mpd):
                seen[dc] = max(seen[dc], s.depths[m])
    best, best_cost = 0, _dc_cost(s, 0, seen[0], n)
    for dc in range(1, dcs):
        cost = _dc_cost(s, dc, seen[dc], n)
        if cost < best_cost:
            best, best_cost = dc, cost
    w = s.fcfg[F_W]
    chosen, chosen_cost = -1, 0.0
    for m in range(best * mpd, best * mpd + mpd):
        cost = w * (n - s.depths[m]) + s.mem[m, M_LOAD]
        if chosen < 0 or cost < chosen_cost:
            chosen, chosen_cost = m, cost
    return chosen


# ----------------------------------------------------------------------------- serving


@inline
def _serve(s: Any, t: int, m: int, start: int, n: int, depth: int) -> None:
    """Hits touched deepest first, LRU blocks evicted (``Removed``), the rest stored."""
    cap = s.cfg[C_CAP]
    n_eff = min(n, cap)
    for p in range(depth - 1, -1, -1):
        _touch(s, m, s.uid[start + p])
    overflow = s.mem[m, M_SIZE] + (n_eff - depth) - cap
    dc = s.mem[m, M_DC]
    if overflow > 0:
        for k in range(overflow):
            s.victims[k] = _drop(s, m, s.mem[m, M_HEAD])
        s.reg[R_EVICTED] += overflow
        _removed(s, t, dc, overflow, R_EV_REMOVED)
    if n_eff > depth:
        for p in range(n_eff - 1, depth - 1, -1):
            if not _add(s, m, s.uid[start + p]):
                s.reg[R_STATUS] = DIVERGED_CACHE
                return
        for p in range(depth - 1, -1, -1):
            _touch(s, m, s.uid[start + p])
        s.reg[R_STORED] += n_eff - depth
        _stored(s, t, m, start, depth, n_eff)


@inline
def _log_health(s: Any, request: int, t: int) -> None:
    """Per DC: occupied slots, resident items, capacity failures."""
    dcs = s.cfg[C_DCS]
    row = s.reg[R_NHEALTH]
    for dc in range(dcs):
        occupied = 0
        for w in s.words[dc]:
            for i in range(4):
                if (w >> (_S16 * np.uint64(i))) & _SLOT != _U0:
                    occupied += 1
        log = s.health_log[row + dc]
        log[0], log[1], log[2] = request, t, dc
        log[3], log[4], log[5] = occupied, s.dcv[dc, D_RESIDENT], s.dcv[dc, D_CAPFAIL]
    s.reg[R_NHEALTH] = row + dcs


@inline
def _request(s: Any, i: int) -> None:
    """Request ``i``: time moves to it, it is routed, served, and its load counted."""
    t = s.ts[i]
    _advance(s, t)
    start = s.offsets[i]
    n = s.offsets[i + 1] - start
    m = _route(s, i, start, n)
    depth = s.depths[m]
    s.reg[R_REQUESTS] += 1
    s.dcv[s.mem[m, M_DC], D_REQUESTS] += 1
    s.reg[R_REQ_BLOCKS] += n
    s.reg[R_HIT] += depth
    _serve(s, t, m, start, n, depth)
    if s.reg[R_STATUS] != OK:
        return
    if n:
        _heap_push(s, t + s.fcfg[F_MSPT] * s.outputs[i], m, n)
        s.mem[m, M_LOAD] += n
    s.reg[R_END_MS] = t
    every = s.cfg[C_HEALTH]
    if every and s.reg[R_REQUESTS] % every == 0:
        _log_health(s, s.reg[R_REQUESTS], t)


@inline
def _images_bound(s: Any, n: int) -> int:
    """The most images the next request (of ``n`` blocks) can publish: what each DC's window
    holds, every write a store or removal may make, and every cached block a restart may
    remove."""
    bound = n * (s.cfg[C_KICKS] + 2)
    for dc in range(s.cfg[C_DCS]):
        bound += s.dcv[dc, D_DIRTY]
    if s.cfg[C_CLEAR]:
        bound += s.free.shape[0] - s.reg[R_FREE]
    return bound  # type: ignore[no-any-return]


@inline
def _room(s: Any, n: int) -> bool:
    """Whether every log can take what the next request may write (else ``R_NEED_IMG``)."""
    dcs, members = s.cfg[C_DCS], s.mem.shape[0]
    deltas = 2 + dcs + (members if s.cfg[C_CLEAR] else 0)
    images = s.reg[R_NIMG] + _images_bound(s, n)
    s.reg[R_NEED_IMG] = images
    return (  # type: ignore[no-any-return]
        images <= s.img_b.shape[0]
        and s.reg[R_NDELTA] + deltas <= s.meta.shape[0]
        and s.reg[R_NDEPTH] + dcs <= s.depth_log.shape[0]
        and s.reg[R_NHEALTH] + dcs <= s.health_log.shape[0]
    )


@kernel
def run_chunk(s: SimRef, first: int, stop: int) -> tuple[int, int]:
    """Requests ``first..stop``: ``(status, next request)``. ``NEED_ROOM``: grow the logs,
    then call again from the next request; anything else but ``OK`` ends the run."""
    for i in range(first, stop):
        if not _room(s, s.offsets[i + 1] - s.offsets[i]):
            return NEED_ROOM, i
        _request(s, i)
        if s.reg[R_STATUS] != OK:
            return s.reg[R_STATUS], i
    return OK, stop


@kernel
def finish(s: SimRef) -> int:
    """End of run: every DC's pending tail published, the last health row (the caller makes
    room for both)."""
    t = s.reg[R_END_MS]
    for dc in range(s.cfg[C_DCS]):
        _drain_publish(s, t, dc)
    if s.cfg[C_HEALTH]:
        _log_health(s, s.reg[R_REQUESTS], t)
    return s.reg[R_STATUS]  # type: ignore[no-any-return]

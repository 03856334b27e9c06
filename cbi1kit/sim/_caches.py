"""The members' LRU caches and the producers behind them, as compiled helpers of
:mod:`cbi1kit.sim._kernel`: store/remove with kicks, the publication window, the publisher, and
time (in-flight requests' load, due publications, restarts).

A member's cache is a list of nodes, least recent first, with a ``(uid, member) → node`` table;
each node is also on its member's lineage list, in the order the producer learnt the block (a
``Cleared`` removes in that order, as the producer's lineage dict does). The kick walk is
:mod:`cbi1kit.ckf._kick`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cbi1kit._compile import helper as inline
from cbi1kit.ckf._kick import insert_kernel
from cbi1kit.sim._arrays import (
    _RESIDENT,
    _S16,
    _SLOT,
    C_CLEAR,
    C_DCS,
    C_DELAY,
    C_EVERY,
    C_KICKS,
    D_CAPFAIL,
    D_DELTAS,
    D_DIRTY,
    D_HAS_SINCE,
    D_IMAGES,
    D_PENDING,
    D_RESIDENT,
    D_SEQ,
    D_SINCE,
    DIVERGED_TABLE,
    M_DC,
    M_HEAD,
    M_LIN_HEAD,
    M_LIN_TAIL,
    M_LOAD,
    M_SIZE,
    M_TAIL,
    N_LIN_NEXT,
    N_LIN_PREV,
    N_NEXT,
    N_PREV,
    N_UID,
    R_CURSOR,
    R_EV_CLEARED,
    R_EV_ERRORS,
    R_EV_STORED,
    R_FREE,
    R_HEAP,
    R_NDELTA,
    R_NEXT_CLEAR,
    R_NIMG,
    R_STATUS,
)

_walk = insert_kernel()


# ----------------------------------------------------------------------------- LRU caches


@inline
def _unlink(s: Any, m: int, k: int, prev: int, nxt: int, head: int, tail: int) -> None:
    """Take node ``k`` off one of member ``m``'s lists (recency or lineage: the columns)."""
    node, mem = s.node, s.mem
    p, n = node[k, prev], node[k, nxt]
    if p >= 0:
        node[p, nxt] = n
    else:
        mem[m, head] = n
    if n >= 0:
        node[n, prev] = p
    else:
        mem[m, tail] = p


@inline
def _append(s: Any, m: int, k: int, prev: int, nxt: int, head: int, tail: int) -> None:
    """Put node ``k`` at the end of one of member ``m``'s lists."""
    node, mem = s.node, s.mem
    last = mem[m, tail]
    node[k, prev] = last
    node[k, nxt] = -1
    if last >= 0:
        node[last, nxt] = k
    else:
        mem[m, head] = k
    mem[m, tail] = k


@inline
def _touch(s: Any, m: int, u: int) -> None:
    """``move_to_end``: item ``u`` becomes member ``m``'s most recent."""
    k = s.where[u, m]
    if s.mem[m, M_TAIL] != k:
        _unlink(s, m, k, N_PREV, N_NEXT, M_HEAD, M_TAIL)
        _append(s, m, k, N_PREV, N_NEXT, M_HEAD, M_TAIL)


@inline
def _add(s: Any, m: int, u: int) -> bool:
    """Cache item ``u`` as most recent (the producer learns it later); False if cached."""
    if s.where[u, m] >= 0:
        return False
    top = s.reg[R_FREE] - 1
    s.reg[R_FREE] = top
    k = s.free[top]
    s.node[k, N_UID] = u
    _append(s, m, k, N_PREV, N_NEXT, M_HEAD, M_TAIL)
    s.where[u, m] = k
    s.mem[m, M_SIZE] += 1
    return True


@inline
def _drop(s: Any, m: int, k: int) -> int:
    """Take node ``k`` out of member ``m``'s cache and lineage; its item."""
    u = s.node[k, N_UID]
    _unlink(s, m, k, N_PREV, N_NEXT, M_HEAD, M_TAIL)
    _unlink(s, m, k, N_LIN_PREV, N_LIN_NEXT, M_LIN_HEAD, M_LIN_TAIL)
    s.where[u, m] = -1
    s.free[s.reg[R_FREE]] = k
    s.reg[R_FREE] += 1
    s.mem[m, M_SIZE] -= 1
    return u  # type: ignore[no-any-return]


@inline
def _all_depths(s: Any, start: int, n: int) -> None:
    """Every member's depth in one pass over the blocks (a block's members share a line)."""
    members = s.mem.shape[0]
    s.depths[:] = -1
    matching = members
    for d in range(n):
        if not matching:
            break
        u = s.uid[start + d]
        for m in range(members):
            if s.depths[m] < 0 and s.where[u, m] < 0:
                s.depths[m] = d
                matching -= 1
    for m in range(members):
        if s.depths[m] < 0:
            s.depths[m] = n


# ----------------------------------------------------------------------------- the producer


@inline
def _dirty(s: Any, dc: int, bucket: int, before: np.uint64) -> None:
    """The window's first touch of ``bucket`` keeps its word before."""
    if s.dirty_mark[dc, bucket] == 0:
        s.dirty_mark[dc, bucket] = 1
        s.dirty_orig[dc, bucket] = before
        s.dirty_list[dc, s.dcv[dc, D_DIRTY]] = bucket
        s.dcv[dc, D_DIRTY] += 1


@inline
def _offer(s: Any, dc: int, u: int) -> bool:
    """Insert item ``u`` with kicks, its writes into the window; whether it went in."""
    n, state = _walk(
        s.words[dc],
        s.delta,
        s.fp[u],
        s.bucket_a[u],
        s.bucket_b[u],
        s.rng[dc],
        s.cfg[C_KICKS],
        s.t_bucket,
        s.t_before,
    )
    s.rng[dc] = state
    if n < 0:
        return False
    for k in range(n):
        _dirty(s, dc, s.t_bucket[k], s.t_before[k])
    s.flags[u, dc] |= _RESIDENT
    s.dcv[dc, D_RESIDENT] += 1
    return True


@inline
def _erase(s: Any, dc: int, u: int) -> bool:
    """Clear the lowest slot holding ``u``'s fingerprint, bucket a before b."""
    fp = s.fp[u]
    for bucket in (s.bucket_a[u], s.bucket_b[u]):
        w = s.words[dc, bucket]
        for i in range(4):
            shift = _S16 * np.uint64(i)
            if (w >> shift) & _SLOT == fp:
                s.words[dc, bucket] = w & ~(_SLOT << shift)
                _dirty(s, dc, bucket, w)
                return True
    return False


@inline
def _disown(s: Any, dc: int, u: int) -> None:
    """One owner of ``u`` lets go; the last takes its fingerprint out."""
    if s.owners[u, dc] > 1:
        s.owners[u, dc] -= 1
        return
    if s.flags[u, dc] & _RESIDENT:
        if not _erase(s, dc, u):
            s.reg[R_STATUS] = DIVERGED_TABLE
        s.dcv[dc, D_RESIDENT] -= 1
    s.owners[u, dc] = 0
    s.flags[u, dc] &= ~_RESIDENT


@inline
def _drain(s: Any, dc: int) -> int:
    """Close the window: changed buckets, first-touch order, after the image log; how many."""
    d = s.dcv
    at = s.reg[R_NIMG]
    count = 0
    for k in range(d[dc, D_DIRTY]):
        bucket = s.dirty_list[dc, k]
        s.dirty_mark[dc, bucket] = 0
        w = s.words[dc, bucket]
        if w != s.dirty_orig[dc, bucket]:
            s.img_b[at + count] = bucket
            s.img_w[at + count] = w
            count += 1
    d[dc, D_DIRTY] = 0
    d[dc, D_PENDING] = 0
    return count


@inline
def _publish(s: Any, t: int, dc: int, count: int) -> None:
    """The drained images as the next delta: numbered, logged, applied to the consumer lane."""
    d = s.dcv
    d[dc, D_HAS_SINCE] = 0
    d[dc, D_SEQ] += 1
    d[dc, D_DELTAS] += 1
    d[dc, D_IMAGES] += count
    at = s.reg[R_NIMG]
    for k in range(at, at + count):
        s.lane[s.img_b[k], dc] = s.img_w[k]
    s.reg[R_NIMG] = at + count
    row = s.reg[R_NDELTA]
    s.meta[row, 0] = t
    s.meta[row, 1] = dc
    s.meta[row, 2] = d[dc, D_SEQ]
    s.meta[row, 3] = at + count
    s.reg[R_NDELTA] = row + 1


@inline
def _drain_publish(s: Any, t: int, dc: int) -> None:
    """The simulator's drain (publication delay, end of run): publish what changed."""
    count = _drain(s, dc)
    s.dcv[dc, D_HAS_SINCE] = 0
    if count:
        _publish(s, t, dc, count)


@inline
def _event(s: Any, t: int, dc: int) -> None:
    """After an applied event: drain at the cadence, else note when the window opened."""
    d = s.dcv
    d[dc, D_PENDING] += 1
    if d[dc, D_PENDING] >= s.cfg[C_EVERY]:
        count = _drain(s, dc)
        if count:
            _publish(s, t, dc, count)
    elif d[dc, D_HAS_SINCE] == 0:
        d[dc, D_SINCE] = t
        d[dc, D_HAS_SINCE] = 1


@inline
def _stored(s: Any, t: int, m: int, start: int, depth: int, n_eff: int) -> None:
    """``Stored`` of blocks ``depth..n_eff``: lineage and owners, then each offered in order."""
    dc = s.mem[m, M_DC]
    for p in range(depth, n_eff):
        u = s.uid[start + p]
        _append(s, m, s.where[u, m], N_LIN_PREV, N_LIN_NEXT, M_LIN_HEAD, M_LIN_TAIL)
        s.owners[u, dc] += 1
    failed = 0
    for p in range(depth, n_eff):
        u = s.uid[start + p]
        if not s.flags[u, dc] & _RESIDENT and not _offer(s, dc, u):
            failed += 1
    s.dcv[dc, D_CAPFAIL] += failed
    s.reg[R_EV_STORED] += 1
    if failed:
        s.reg[R_EV_ERRORS] += 1
    _event(s, t, dc)


@inline
def _removed(s: Any, t: int, dc: int, count: int, event: int) -> None:
    """``Removed`` (or ``Cleared``) of the ``count`` items in ``victims``, in order."""
    for k in range(count):
        _disown(s, dc, s.victims[k])
    s.reg[event] += 1
    _event(s, t, dc)


@inline
def _clear(s: Any, at: int, m: int) -> None:
    """A restart: member ``m`` forgets its cache; the producer removes in lineage order."""
    count = 0
    k = s.mem[m, M_LIN_HEAD]
    while k >= 0:
        s.victims[count] = s.node[k, N_UID]
        count += 1
        nxt = s.node[k, N_LIN_NEXT]
        _drop(s, m, k)
        k = nxt
    _removed(s, at, s.mem[m, M_DC], count, R_EV_CLEARED)


# ----------------------------------------------------------------------------- time


@inline
def _heap_push(s: Any, end: float, m: int, n: int) -> None:
    i = s.reg[R_HEAP]
    s.reg[R_HEAP] = i + 1
    while i > 0:
        parent = (i - 1) >> 1
        if s.heap_t[parent] <= end:
            break
        s.heap_t[i] = s.heap_t[parent]
        s.heap_mn[i, 0] = s.heap_mn[parent, 0]
        s.heap_mn[i, 1] = s.heap_mn[parent, 1]
        i = parent
    s.heap_t[i] = end
    s.heap_mn[i, 0] = m
    s.heap_mn[i, 1] = n


@inline
def _heap_pop(s: Any) -> None:
    """Drop the earliest end: its member's load falls by its blocks."""
    s.mem[s.heap_mn[0, 0], M_LOAD] -= s.heap_mn[0, 1]
    last = s.reg[R_HEAP] - 1
    s.reg[R_HEAP] = last
    end, m, n = s.heap_t[last], s.heap_mn[last, 0], s.heap_mn[last, 1]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= last:
            break
        if child + 1 < last and s.heap_t[child + 1] < s.heap_t[child]:
            child += 1
        if end <= s.heap_t[child]:
            break
        s.heap_t[i] = s.heap_t[child]
        s.heap_mn[i, 0] = s.heap_mn[child, 0]
        s.heap_mn[i, 1] = s.heap_mn[child, 1]
        i = child
    if last > 0:
        s.heap_t[i] = end
        s.heap_mn[i, 0] = m
        s.heap_mn[i, 1] = n


@inline
def _advance(s: Any, t: int) -> None:
    """Up to ``t``: finished requests' load, due publications, due restarts."""
    while s.reg[R_HEAP] > 0 and s.heap_t[0] <= t:
        _heap_pop(s)
    delay = s.cfg[C_DELAY]
    if delay:
        for dc in range(s.cfg[C_DCS]):
            since = s.dcv[dc, D_SINCE]
            if s.dcv[dc, D_HAS_SINCE] and t - since >= delay:
                _drain_publish(s, since + delay, dc)
    every = s.cfg[C_CLEAR]
    members = s.mem.shape[0]
    while every and s.reg[R_NEXT_CLEAR] <= t:
        m = s.reg[R_CURSOR] % members
        s.reg[R_CURSOR] += 1
        at = s.reg[R_NEXT_CLEAR]
        s.reg[R_NEXT_CLEAR] = at + every
        if s.mem[m, M_SIZE]:
            _clear(s, at, m)

"""The simulator's per-request path as compiled kernels: LRU caches, routing, the producers'
store/remove with kicks and the publication window, the publisher, the consumer's lanes and
prefix search, over arrays. ``docs/simulator.md`` ("The compiled engine") gives the layout;
``cbi1kit.sim._simulator`` is the per-event reference it is held to.

Items are dense ids: every distinct sequence hash of the workload is one ``uid`` (its
fingerprint and buckets prepared once, vectorised). A member's cache is a list of nodes, least
recent first, with a ``(uid, member) → node`` table; each node is also on its member's lineage
list, in the order the producer learnt the block (a ``Cleared`` removes in that order, as the
producer's lineage dict does). The kick walk is :mod:`cbi1kit.ckf._kick`'s. The arrays travel
as one ``StructRef`` (a pointer), not a tuple: a tuple of 40 arrays is some 300 arguments to
every helper, which took numba about a second a helper to compile.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import numba
import numpy as np
from numba.core import types
from numba.experimental import structref

from cbi1kit._compile import helper as inline, kernel
from cbi1kit.ckf._kick import insert_kernel

__all__ = ["SimArrays", "finish", "new_ref", "run_chunk"]

_walk = insert_kernel()

POLICY_CODES: Final = {"round_robin": 0, "random": 1, "exact": 2, "ckf": 3}

# cfg (int64): the knobs
C_DCS, C_MPD, C_CAP, C_POLICY, C_CLEAR, C_DELAY, C_EVERY, C_KICKS, C_WINDOW = range(9)
C_HEALTH, C_NB = 9, 10
N_CFG: Final = 11
# fcfg (float64): overlap weight, decode ms per token, P(fingerprint match)
F_W, F_MSPT, F_P = range(3)
# reg (int64): run counters, cursors, log lengths
(
    R_REQUESTS,
    R_REQ_BLOCKS,
    R_HIT,
    R_STORED,
    R_EVICTED,
    R_EV_STORED,
    R_EV_REMOVED,
    R_EV_CLEARED,
    R_EV_ERRORS,
    R_ABSENT,
    R_FP,
    R_OVER,
    R_UNDER,
    R_RR,
    R_NEXT_CLEAR,
    R_CURSOR,
    R_HEAP,
    R_FREE,
    R_END_MS,
    R_STATUS,
    R_NDELTA,
    R_NIMG,
    R_NDEPTH,
    R_NHEALTH,
    R_NEED_IMG,
) = range(25)
N_REG: Final = 25
# freg (float64): expected false positives, sum of α over absent probes
G_EXPECTED, G_ALPHA = range(2)
# dcv (int64, per DC)
D_RESIDENT, D_CAPFAIL, D_PENDING, D_SINCE, D_HAS_SINCE, D_SEQ, D_DELTAS, D_IMAGES = range(8)
D_REQUESTS, D_DIRTY = 8, 9
N_DC: Final = 10
# mem (int64, per member): the recency list (head least recent) and the lineage list
M_DC, M_LOAD, M_HEAD, M_TAIL, M_SIZE, M_LIN_HEAD, M_LIN_TAIL = range(7)
N_MEM: Final = 7
# node (int64, per cache node)
N_UID, N_PREV, N_NEXT, N_LIN_PREV, N_LIN_NEXT = range(5)
N_NODE: Final = 5
# flags (uint8, per item and DC)
RESIDENT: Final = 1
PROBED: Final = 2
# the logs' columns
META_COLS, DEPTH_COLS, HEALTH_COLS = 4, 4, 6
# statuses
OK: Final = 0
NEED_ROOM: Final = 1  # a log may overflow on the next request: grow it, then go on from there
DIVERGED_CACHE: Final = 2  # a block to store is already cached (a chain with a repeated hash)
DIVERGED_TABLE: Final = 3  # a resident item's fingerprint is in neither bucket

_U0 = np.uint64(0)
_SLOT = np.uint64(0xFFFF)
_S16 = np.uint64(16)
_RESIDENT = np.uint8(RESIDENT)
_PROBED = np.uint8(PROBED)


class SimArrays(NamedTuple):
    """Everything a run reads and writes; laid out by ``cbi1kit.sim._compiled``."""

    cfg: Any
    fcfg: Any
    reg: Any
    freg: Any
    dcv: Any
    rng: Any  # (dcs,) u64: each producer's SplitMix64 state
    mem: Any
    words: Any  # (dcs, buckets) u64: the producers' tables
    lane: Any  # (buckets, dcs) u64: the consumer's lanes, bucket-major as upstream's table
    dirty_orig: Any  # (dcs, buckets) u64: the word before the bucket's first touch
    dirty_mark: Any  # (dcs, buckets) u8
    dirty_list: Any  # (dcs, buckets) i64: first-touch order
    owners: Any  # (items, dcs) i32
    flags: Any  # (items, dcs) u8
    where: Any  # (items, members) i32: the node, or -1 (a block's members in one line)
    node: Any  # (nodes, N_NODE) i64
    free: Any  # (nodes,) i64: a stack of free nodes
    heap_t: Any  # (requests,) f64: in-flight requests' end times, a binary heap
    heap_mn: Any  # (requests, 2) i64: their member and block count
    delta: Any  # (65536,) u64: the addressing's bucket distance per fingerprint
    fp: Any  # (items,) u64
    bucket_a: Any  # (items,) i64
    bucket_b: Any  # (items,) i64
    ts: Any  # (requests,) i64
    offsets: Any  # (requests + 1,) i64
    uid: Any  # (blocks,) i64
    outputs: Any  # (requests,) i64
    draws: Any  # (requests,) i64: the random policy's member per request
    t_bucket: Any  # (MAX_KICKS + 1,) i64: the kick walk's writes
    t_before: Any  # (MAX_KICKS + 1,) u64
    masks: Any  # (longest request,) i64: lane bits per position, -1 unknown
    victims: Any  # (nodes,) i64: the items a Removed or Cleared takes out
    depths: Any  # (members,) i64
    search: Any  # (7, lanes) i64: lower, pred, upper, window start, next, end, seen
    fpr_bins: Any  # (2, bins) i64: absent probes and false positives by the lane's load
    meta: Any  # (rows, 4) i64: each delta's time, DC, sequence, end in the image log
    img_b: Any  # (images,) i64
    img_w: Any  # (images,) u64
    depth_log: Any  # (rows, 4) i64: request, DC, exact depth, CKF depth
    health_log: Any  # (rows, 6) i64: request, time, DC, occupied, resident, failures


#: Each array's dtype and dimensions (C order): what ``cbi1kit.sim._compiled`` lays out.
LAYOUT: Final = {
    "cfg": (np.int64, 1),
    "fcfg": (np.float64, 1),
    "reg": (np.int64, 1),
    "freg": (np.float64, 1),
    "dcv": (np.int64, 2),
    "rng": (np.uint64, 1),
    "mem": (np.int64, 2),
    "words": (np.uint64, 2),
    "lane": (np.uint64, 2),
    "dirty_orig": (np.uint64, 2),
    "dirty_mark": (np.uint8, 2),
    "dirty_list": (np.int64, 2),
    "owners": (np.int32, 2),
    "flags": (np.uint8, 2),
    "where": (np.int32, 2),
    "node": (np.int64, 2),
    "free": (np.int64, 1),
    "heap_t": (np.float64, 1),
    "heap_mn": (np.int64, 2),
    "delta": (np.uint64, 1),
    "fp": (np.uint64, 1),
    "bucket_a": (np.int64, 1),
    "bucket_b": (np.int64, 1),
    "ts": (np.int64, 1),
    "offsets": (np.int64, 1),
    "uid": (np.int64, 1),
    "outputs": (np.int64, 1),
    "draws": (np.int64, 1),
    "t_bucket": (np.int64, 1),
    "t_before": (np.uint64, 1),
    "masks": (np.int64, 1),
    "victims": (np.int64, 1),
    "depths": (np.int64, 1),
    "search": (np.int64, 2),
    "fpr_bins": (np.int64, 2),
    "meta": (np.int64, 2),
    "img_b": (np.int64, 1),
    "img_w": (np.uint64, 1),
    "depth_log": (np.int64, 2),
    "health_log": (np.int64, 2),
}


@structref.register
class _SimType(types.StructRef):  # type: ignore[misc,name-defined]
    """The numba type of a :class:`SimRef`: one field per :data:`LAYOUT` entry."""

    def preprocess_fields(self, fields: Any) -> Any:
        return tuple((name, types.unliteral(typ)) for name, typ in fields)  # type: ignore[attr-defined]


class SimRef(structref.StructRefProxy):  # type: ignore[misc]
    """A run's arrays as one reference, what the kernels take (made by :func:`new_ref`)."""


structref.define_boxing(_SimType, SimRef)
_SIM = _SimType(
    [
        (name, types.Array(numba.from_dtype(dtype), ndim, "C"))
        for name, (dtype, ndim) in LAYOUT.items()
    ]
)


@kernel
def _ref(a: Any) -> Any:
    s = structref.new(_SIM)
    s.cfg = a.cfg
    s.fcfg = a.fcfg
    s.reg = a.reg
    s.freg = a.freg
    s.dcv = a.dcv
    s.rng = a.rng
    s.mem = a.mem
    s.words = a.words
    s.lane = a.lane
    s.dirty_orig = a.dirty_orig
    s.dirty_mark = a.dirty_mark
    s.dirty_list = a.dirty_list
    s.owners = a.owners
    s.flags = a.flags
    s.where = a.where
    s.node = a.node
    s.free = a.free
    s.heap_t = a.heap_t
    s.heap_mn = a.heap_mn
    s.delta = a.delta
    s.fp = a.fp
    s.bucket_a = a.bucket_a
    s.bucket_b = a.bucket_b
    s.ts = a.ts
    s.offsets = a.offsets
    s.uid = a.uid
    s.outputs = a.outputs
    s.draws = a.draws
    s.t_bucket = a.t_bucket
    s.t_before = a.t_before
    s.masks = a.masks
    s.victims = a.victims
    s.depths = a.depths
    s.search = a.search
    s.fpr_bins = a.fpr_bins
    s.meta = a.meta
    s.img_b = a.img_b
    s.img_w = a.img_w
    s.depth_log = a.depth_log
    s.health_log = a.health_log
    return s


def new_ref(arrays: SimArrays) -> SimRef:
    """The reference the kernels take, to ``arrays`` (shared, not copied)."""
    ref: SimRef = _ref(arrays)
    return ref


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

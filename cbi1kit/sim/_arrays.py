"""The compiled simulator's arrays: their layout (``LAYOUT``, ``SimArrays``), the indices into
its registers and tables, and the one ``StructRef`` (a pointer) the kernels take them as, not a
tuple: a tuple of 40 arrays is some 300 arguments to every helper, which took numba about a
second a helper to compile. ``docs/simulator.md`` ("The compiled engine") gives the layout.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import numba
import numpy as np
from numba.core import types
from numba.experimental import structref

from cbi1kit._compile import kernel

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

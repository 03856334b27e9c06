"""The compiled engine: the workload and the fleet laid out as :mod:`cbi1kit.sim._arrays` for
:mod:`cbi1kit.sim._kernel`, run a chunk of requests at a time, and the same
:class:`SimulationResult` and hooks as the reference (``docs/simulator.md``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._lane import DcCkfDelta, DcCkfSnapshot
from cbi1kit.ckf._stats import FINGERPRINT_MATCH_PROBABILITY
from cbi1kit.ckf._table import MAX_KICKS, lane_rng_seed
from cbi1kit.errors import SimulationError, SimulationVariant
from cbi1kit.hashing._blocks import compute_seq_hash_ragged
from cbi1kit.hashing._identity import MAX_LANES, ConsumerInstanceId, LaneLease, ProducerIdentity
from cbi1kit.sim import _arrays as ar
from cbi1kit.sim._kernel import finish, run_chunk
from cbi1kit.sim._simulator import (
    FPR_LOAD_BINS,
    DeltaHook,
    EventHook,
    ProgressHook,
    SimulationResult,
    SimulatorConfig,
    SnapshotHook,
    config_error,
    producer_identity,
)
from cbi1kit.sim._workload import Workload

#: Requests per kernel call when nobody watches progress: deltas are handed on between calls.
_CHUNK = 4096
_CAPACITY_ERROR = "KvCacheEventError"  # the reference counts errors by their class name
_STATUS = {
    ar.DIVERGED_CACHE: "a block to store is already in the member's cache",
    ar.DIVERGED_TABLE: "a resident item's fingerprint is in neither of its buckets",
}


class CompiledSimulator:
    """The :class:`~cbi1kit.sim._simulator.ReferenceSimulator`'s model as compiled kernels:
    the same result and hooks (``on_snapshot``, ``on_delta``, ``progress``), byte for byte.
    A simulator runs once."""

    def __init__(self, config: SimulatorConfig | None = None) -> None:
        self.config = config or SimulatorConfig()
        self.format = self.config.ckf_config().format()
        self.result = SimulationResult(self.config)
        self.identities: list[ProducerIdentity] = []
        self._s: ar.SimArrays | None = None
        self._ref: ar.SimRef | None = None

    def words(self, dc: int) -> npt.NDArray[np.uint64]:
        """DC ``dc``'s producer words (a copy)."""
        return np.array(self._arrays().words[dc])

    def lane_words(self, dc: int) -> npt.NDArray[np.uint64]:
        """The consumer's lane ``dc`` (a copy): what the DC published."""
        return np.array(self._arrays().lane[:, dc])

    def _arrays(self) -> ar.SimArrays:
        if self._s is None:
            raise RuntimeError("the simulator has not run yet")
        return self._s

    def _kernel_ref(self) -> ar.SimRef:
        if self._ref is None:
            raise RuntimeError("the simulator has not run yet")
        return self._ref

    def run(
        self,
        workload: Workload,
        *,
        on_snapshot: SnapshotHook | None = None,
        on_delta: DeltaHook | None = None,
        on_event: EventHook | None = None,
        progress: ProgressHook | None = None,
        progress_every: int = 256,
        health_every: int = 64,
    ) -> SimulationResult:
        """Run ``workload`` through the pools; the hooks as the reference calls them
        (``on_event``, every engine event, only the reference has)."""
        if on_event is not None:
            why = "every engine event needs Simulator(config, engine='reference')"
            raise config_error("on_event", "a hook", why, what="run")
        if self._s is not None:
            raise RuntimeError("a Simulator runs once; make a new one")
        started = time.perf_counter()
        cfg, res = self.config, self.result
        s = self._s = _lay_out(cfg, workload, health_every)
        self._ref = ar.new_ref(s)
        t0 = int(s.reg[ar.R_END_MS])
        res.start_ms = res.end_ms = t0
        lease = LaneLease(ConsumerInstanceId(cfg.producer_incarnation), 0, 1)
        for dc in range(cfg.dcs):
            ident = producer_identity(
                cfg, dc, self.format, workload.hash_format, workload.block_size
            )
            self.identities.append(ident)
            if on_snapshot is not None:
                words = np.zeros(self.format.bucket_count, dtype=np.uint64)
                on_snapshot(t0, dc, DcCkfSnapshot(ident, lease, 0, words))
        step = progress_every if progress is not None else _CHUNK
        total = len(workload)
        for first in range(0, total, step):
            self._run(first, min(first + step, total))
            self._hand_on(lease, on_delta)
            if progress is not None and min(first + step, total) - first == step:
                progress(step)
        self._room_to_finish()
        _check(finish(self._kernel_ref()), total)
        self._hand_on(lease, on_delta)
        if progress is not None and total % step:
            progress(total % step)  # after the tail's deltas, as the reference
        _fill(res, self._arrays())
        res.wall_seconds = time.perf_counter() - started
        return res

    def _run(self, first: int, stop: int) -> None:
        """Requests ``first..stop``, growing the logs whenever the kernel asks."""
        while True:
            status, first = run_chunk(self._kernel_ref(), first, stop)
            if status != ar.NEED_ROOM:
                _check(status, first)
                return
            self._grow(int(self._arrays().reg[ar.R_NEED_IMG]))

    def _room_to_finish(self) -> None:
        """Room for the end of run: each DC's pending window and a last health row."""
        s, dcs = self._arrays(), self.config.dcs
        images = int(s.dcv[:, ar.D_DIRTY].sum()) + int(s.reg[ar.R_NIMG])
        short = images > len(s.img_b) or int(s.reg[ar.R_NDELTA]) + dcs > len(s.meta)
        if short or int(s.reg[ar.R_NHEALTH]) + dcs > len(s.health_log):
            self._grow(images)

    def _grow(self, images: int) -> None:
        """Every log doubled (the image log to at least ``images``), what it holds kept."""
        s = self._arrays()
        logs = {"meta": s.meta, "depth_log": s.depth_log, "health_log": s.health_log}
        grown = {name: _doubled(log, 2 * len(log)) for name, log in logs.items()}
        size = max(images, 2 * len(s.img_b))
        grown |= {"img_b": _doubled(s.img_b, size), "img_w": _doubled(s.img_w, size)}
        self._s = s._replace(**grown)
        self._ref = ar.new_ref(self._s)

    def _hand_on(self, lease: LaneLease, on_delta: DeltaHook | None) -> None:
        """The deltas of the last kernel call into the result's log and to ``on_delta``; the
        kernel's log is emptied."""
        s = self._arrays()
        meta = s.meta[: int(s.reg[ar.R_NDELTA])]
        counts = np.diff(meta[:, 3], prepend=0)
        self.result.delta_log.extend(zip(*(meta[:, :3].T.tolist()), counts.tolist(), strict=True))
        if on_delta is not None:
            for t, dc, sequence, buckets, values in _deltas(s):
                ident = self.identities[dc]
                on_delta(t, dc, DcCkfDelta(ident, lease, sequence - 1, sequence, buckets, values))
        s.reg[ar.R_NDELTA] = s.reg[ar.R_NIMG] = 0


def _deltas(
    s: ar.SimArrays,
) -> Iterator[tuple[int, int, int, npt.NDArray[np.uint32], npt.NDArray[np.uint64]]]:
    """``(time, dc, sequence, buckets, words)`` of each logged delta."""
    images = int(s.reg[ar.R_NIMG])
    buckets = s.img_b[:images].astype(np.uint32)
    words = s.img_w[:images].copy()
    begin = 0
    for t, dc, sequence, end in s.meta[: int(s.reg[ar.R_NDELTA])].tolist():
        yield t, dc, sequence, buckets[begin:end], words[begin:end]
        begin = end


def _doubled(log: npt.NDArray[Any], size: int) -> npt.NDArray[Any]:
    grown = np.zeros((size, *log.shape[1:]), dtype=log.dtype)
    grown[: len(log)] = log
    return grown


def _check(status: int, request: int) -> None:
    if status != ar.OK:
        raise SimulationError(
            SimulationVariant.Workload,
            f"request {request}: {_STATUS.get(status, status)}; "
            "run this workload with engine='reference'",
        )


def _fill(res: SimulationResult, s: ar.SimArrays) -> None:
    """The run's figures out of the kernel's registers and logs."""
    reg, dcv = s.reg.tolist(), s.dcv
    res.requests = reg[ar.R_REQUESTS]
    res.requested_blocks = reg[ar.R_REQ_BLOCKS]
    res.hit_blocks = reg[ar.R_HIT]
    res.stored_blocks = reg[ar.R_STORED]
    res.evicted_blocks = reg[ar.R_EVICTED]
    res.events = {
        "stored": reg[ar.R_EV_STORED],
        "removed": reg[ar.R_EV_REMOVED],
        "cleared": reg[ar.R_EV_CLEARED],
    }
    res.event_errors = {_CAPACITY_ERROR: reg[ar.R_EV_ERRORS]} if reg[ar.R_EV_ERRORS] else {}
    res.deltas = dcv[:, ar.D_DELTAS].tolist()
    res.images = dcv[:, ar.D_IMAGES].tolist()
    res.requests_per_dc = dcv[:, ar.D_REQUESTS].tolist()
    res.capacity_failures = dcv[:, ar.D_CAPFAIL].tolist()
    slots = 4 * int(s.cfg[ar.C_NB])
    res.load_factors = [r / slots for r in dcv[:, ar.D_RESIDENT].tolist()]
    res.end_ms = reg[ar.R_END_MS]
    res.absent_probes = reg[ar.R_ABSENT]
    res.false_positives = reg[ar.R_FP]
    res.expected_false_positives = float(s.freg[ar.G_EXPECTED])
    res.alpha_sum = float(s.freg[ar.G_ALPHA])
    res.depth_overestimates = reg[ar.R_OVER]
    res.depth_underestimates = reg[ar.R_UNDER]
    res.depth_log = _rows(s.depth_log, reg[ar.R_NDEPTH])
    res.health_log = _rows(s.health_log, reg[ar.R_NHEALTH])
    res.fpr_by_load = [row.tolist() for row in s.fpr_bins]


def _rows(log: npt.NDArray[np.int64], rows: int) -> list[Any]:
    return [tuple(row) for row in log[:rows].tolist()]


def _lay_out(cfg: SimulatorConfig, workload: Workload, health_every: int) -> ar.SimArrays:
    """The kernel's arrays for ``workload`` on ``cfg``'s fleet, before the first request."""
    _check_chains(workload)
    hashes, uid = _items(workload.seq_hashes)
    items = hashes.size
    fmt = cfg.ckf_config()
    addressing = CkfAddressing(seed=fmt.seed, bucket_count=fmt.bucket_count())
    fp, a, b = addressing.prepare_many(hashes)
    members = cfg.dcs * cfg.members_per_dc
    nodes = min(members * cfg.capacity_blocks, workload.total_blocks) + 1
    nb = addressing.bucket_count
    return ar.SimArrays(
        cfg=_knobs(cfg, nb, health_every),
        fcfg=np.array([cfg.overlap_weight, cfg.decode_ms_per_token, FINGERPRINT_MATCH_PROBABILITY]),
        reg=_registers(cfg, workload, nodes),
        freg=np.zeros(2),
        dcv=np.zeros((cfg.dcs, ar.N_DC), np.int64),
        rng=np.full(cfg.dcs, lane_rng_seed(fmt.seed, 0), np.uint64),
        mem=_members(cfg, members),
        words=np.zeros((cfg.dcs, nb), np.uint64),
        lane=np.zeros((nb, cfg.dcs), np.uint64),
        dirty_orig=np.zeros((cfg.dcs, nb), np.uint64),
        dirty_mark=np.zeros((cfg.dcs, nb), np.uint8),
        dirty_list=np.zeros((cfg.dcs, nb), np.int64),
        owners=np.zeros((items, cfg.dcs), np.int32),
        flags=np.zeros((items, cfg.dcs), np.uint8),
        where=np.full((items, members), -1, np.int32),
        node=np.zeros((nodes, ar.N_NODE), np.int64),
        free=np.arange(nodes, dtype=np.int64),
        delta=np.ascontiguousarray(addressing._delta),
        fp=fp.astype(np.uint64),
        bucket_a=a.astype(np.int64),
        bucket_b=b.astype(np.int64),
        uid=uid,
        t_bucket=np.zeros(MAX_KICKS + 1, np.int64),
        t_before=np.zeros(MAX_KICKS + 1, np.uint64),
        victims=np.zeros(nodes, np.int64),
        depths=np.zeros(members, np.int64),
        search=np.zeros((7, MAX_LANES), np.int64),  # the consumer table's 16 lanes
        fpr_bins=np.zeros((2, FPR_LOAD_BINS), np.int64),
        **_requests(cfg, workload, members),
        **_logs(),
    )


def _registers(cfg: SimulatorConfig, workload: Workload, nodes: int) -> npt.NDArray[np.int64]:
    """The run's registers before the first request: every node free, the clock at the first
    request's arrival, the first restart due."""
    t0 = int(workload.timestamps_ms[0]) if len(workload) else 0
    reg = np.zeros(ar.N_REG, np.int64)
    reg[ar.R_FREE] = nodes
    reg[ar.R_END_MS] = t0
    reg[ar.R_NEXT_CLEAR] = t0 + (cfg.clear_every_ms or 0)
    return reg


def _members(cfg: SimulatorConfig, members: int) -> npt.NDArray[np.int64]:
    """Each member's DC and its empty recency and lineage lists."""
    mem = np.zeros((members, ar.N_MEM), np.int64)
    mem[:, ar.M_DC] = np.arange(members) // cfg.members_per_dc
    mem[:, [ar.M_HEAD, ar.M_TAIL, ar.M_LIN_HEAD, ar.M_LIN_TAIL]] = -1
    return mem


def _requests(
    cfg: SimulatorConfig, workload: Workload, members: int
) -> dict[str, npt.NDArray[Any]]:
    """The workload's requests as the kernels read them, and room for them in flight."""
    requests = len(workload)
    longest = int(workload.block_counts.max()) if requests else 0
    draws = (
        np.random.default_rng(cfg.seed).integers(members, size=requests)
        if cfg.policy == "random"
        else np.zeros(requests, np.int64)
    )
    return {
        "ts": np.ascontiguousarray(workload.timestamps_ms, dtype=np.int64),
        "offsets": np.ascontiguousarray(workload.offsets, dtype=np.int64),
        "outputs": np.ascontiguousarray(workload.output_tokens, dtype=np.int64),
        "draws": draws.astype(np.int64),
        "masks": np.zeros(max(longest, 1), np.int64),
        "heap_t": np.zeros(max(requests, 1)),
        "heap_mn": np.zeros((max(requests, 1), 2), np.int64),
    }


def _logs() -> dict[str, npt.NDArray[Any]]:
    """The logs' first sizes (``CompiledSimulator._grow`` doubles them when a request may not
    fit)."""
    return {
        "meta": np.zeros((1024, ar.META_COLS), np.int64),
        "img_b": np.zeros(16384, np.int64),
        "img_w": np.zeros(16384, np.uint64),
        "depth_log": np.zeros((1024, ar.DEPTH_COLS), np.int64),
        "health_log": np.zeros((1024, ar.HEALTH_COLS), np.int64),
    }


def _items(
    seq_hashes: npt.NDArray[np.uint64],
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Each distinct hash once, numbered in order of first appearance (a request's new blocks
    get neighbouring numbers, which keeps the per-item tables' lines warm), and each block's
    number."""
    hashes, first, inverse = np.unique(seq_hashes, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size)
    return hashes[order], rank[inverse.reshape(-1)]


def _knobs(cfg: SimulatorConfig, buckets: int, health_every: int) -> npt.NDArray[np.int64]:
    knobs = np.zeros(ar.N_CFG, np.int64)
    knobs[ar.C_DCS] = cfg.dcs
    knobs[ar.C_MPD] = cfg.members_per_dc
    knobs[ar.C_CAP] = cfg.capacity_blocks
    knobs[ar.C_POLICY] = ar.POLICY_CODES[cfg.policy]
    knobs[ar.C_CLEAR] = cfg.clear_every_ms or 0
    knobs[ar.C_DELAY] = cfg.publish_delay_ms or 0
    knobs[ar.C_EVERY] = cfg.publish_every_n_events
    knobs[ar.C_KICKS] = cfg.max_kicks
    knobs[ar.C_WINDOW] = cfg.verification_window
    knobs[ar.C_HEALTH] = health_every
    knobs[ar.C_NB] = buckets
    return knobs


def _check_chains(workload: Workload) -> None:
    """The kernels key the producer's canonicals by the workload's sequence hashes: they must
    chain from its local hashes, as the producer derives them."""
    chained = compute_seq_hash_ragged(workload.local_hashes, workload.block_counts)
    wrong = np.flatnonzero(chained != workload.seq_hashes)
    if wrong.size:
        block = int(wrong[0])
        request = int(np.searchsorted(workload.offsets, block, side="right")) - 1
        raise SimulationError(
            SimulationVariant.Workload,
            f"request {request} block {block - int(workload.offsets[request])}: its sequence "
            "hash does not chain from its local hashes",
        )

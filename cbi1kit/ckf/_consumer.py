"""The CKF consumer: lane replicas fed by snapshots and deltas, a 16-lane table, prefix search.

Upstream ``lib/kv-router/src/indexer/cuckoo/global.rs`` (newest: ``GlobalCkfManifest`` over
``PoolId``s, ``GlobalCkfIndexer``, ``GlobalCkfLaneIngestor``, ``TransposedCkfTable<16>``) and
``search.rs``. The manifest is keyed by indexer domain and pool (the older ``global.rs`` @
7e1dca8a keyed it by ``EndpointId``). Storage is bucket-major, a bucket's 16 lanes contiguous as
upstream, so one probe reads two rows. ``find_prefix_depths`` follows the newest ``search.rs``
schedule probe for probe (docs/spec/ckf.md §5.2), so its stats compare with upstream's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._lane import DcCkfDelta, DcCkfSnapshot, IngestOutcome, Lane
from cbi1kit.ckf._limits import verification_window_fault
from cbi1kit.errors import CkfError, CkfVariant, LaneError, LaneVariant
from cbi1kit.hashing._blocks import compute_seq_hash_for_block
from cbi1kit.hashing._identity import (
    MAX_LANES,
    ConsumerDrainMarker,
    ConsumerInstanceId,
    DcCkfFormatIdentity,
    LaneLease,
    ProducerIdentity,
)
from cbi1kit.hashing._pools import DcId, IndexerDomainId, PoolId

ProbeFn = Callable[[int], int]
_ALL_LANES = (1 << MAX_LANES) - 1


# ---------------------------------------------------------------------------------------------
# Lane ingestion
# ---------------------------------------------------------------------------------------------


def _assignment_error(lane: int, variant: str, reason: str) -> LaneError:
    """``Assignment.<variant>`` (upstream ``GlobalCkfAssignmentError``): nothing changes."""
    return LaneError(
        LaneVariant.Assignment,
        reason,
        subvariant=variant,
        message=f"lane {lane}: cannot assign ({variant}): {reason}",
        lane=lane,
    )


def _manifest_error(variant: str, reason: str, **context: Any) -> LaneError:
    """``Manifest.<variant>`` (upstream ``GlobalCkfBuildError``): the table is not built or the
    lane is not bound."""
    return LaneError(
        LaneVariant.Manifest,
        reason,
        subvariant=variant,
        message=f"consumer manifest ({variant}): {reason}",
        **context,
    )


def _check_lane(lane: int) -> None:
    if not 0 <= lane < MAX_LANES:
        raise _manifest_error("InvalidLane", f"lane {lane} is outside 0..{MAX_LANES}", lane=lane)


Binder = Callable[[int, PoolId], None]


class LaneReplica(Lane):
    """One consumer lane (upstream ``GlobalCkfLaneIngestor``) writing into a words column.

    A :class:`Lane` plus the consumer protocol's leases and identities. Manifest constraints are
    ``format`` and, if given, ``pool_id`` and ``consumer_instance``; a table's replica with no pool
    yet takes its first valid assignment's (checked by ``binder``) and keeps it.
    """

    def __init__(
        self,
        lane: int,
        format: DcCkfFormatIdentity,
        words: npt.NDArray[np.uint64] | None = None,
        *,
        pool_id: PoolId | None = None,
        consumer_instance: ConsumerInstanceId | int | None = None,
        binder: Binder | None = None,
    ) -> None:
        _check_lane(lane)
        super().__init__(format.bucket_count, words, lane=lane)
        self.format = format
        self.pool_id = pool_id
        self.consumer_instance = (
            None
            if consumer_instance is None or isinstance(consumer_instance, ConsumerInstanceId)
            else ConsumerInstanceId(consumer_instance)
        )
        self.identity: ProducerIdentity | None = None
        self.lease: LaneLease | None = None
        self._binder = binder

    # -- control ----------------------------------------------------------------------------
    def assign(self, identity: ProducerIdentity, lease: LaneLease) -> None:
        """Take a new lease (upstream ``validate_assignment``, in its order): clears readiness
        and ``installed_sequence``."""
        lane = self.lane
        if self.consumer_instance is not None and lease.consumer_instance != self.consumer_instance:
            raise _assignment_error(
                lane,
                "WrongConsumerInstance",
                f"lease belongs to consumer {lease.consumer_instance.value}, "
                f"expected {self.consumer_instance.value}",
            )
        if lease.physical_lane != lane:
            raise _assignment_error(
                lane, "WrongPhysicalLane", f"lease is for lane {lease.physical_lane}"
            )
        if self.pool_id is not None and identity.pool_id != self.pool_id:
            raise _assignment_error(
                lane, "WrongLaneOwner", f"producer pool {identity.pool_id} does not own the lane"
            )
        if identity.format != self.format:
            raise _assignment_error(
                lane, "WrongFormat", "producer CKF format differs from the consumer format"
            )
        if self.lease is not None and lease.assignment_epoch <= self.lease.assignment_epoch:
            raise _assignment_error(
                lane,
                "StaleAssignmentEpoch",
                f"assignment epoch {lease.assignment_epoch} is not after "
                f"{self.lease.assignment_epoch}",
            )
        if self.pool_id is None and self._binder is not None:
            self._binder(lane, identity.pool_id)
            self.pool_id = identity.pool_id
        self.reset()
        self.identity = identity
        self.lease = lease

    # -- data -------------------------------------------------------------------------------
    def install_snapshot(self, snapshot: DcCkfSnapshot) -> IngestOutcome:
        """Install a full lane: lease and identity first, then :meth:`Lane.install`."""
        if snapshot.lease != self.lease:
            return IngestOutcome.IGNORED_FOREIGN_LEASE
        if snapshot.identity != self.identity:
            raise self.fault("IdentityMismatch", "snapshot from another producer identity")
        return self.install(snapshot.sequence, snapshot.buckets)

    def apply_delta(self, delta: DcCkfDelta) -> IngestOutcome:
        """Apply a delta: lease and identity first, then :meth:`Lane.apply`."""
        if delta.lease != self.lease:
            return IngestOutcome.IGNORED_FOREIGN_LEASE
        if delta.identity != self.identity:
            raise self.fault("IdentityMismatch", "delta from another producer identity")
        return self.apply(delta.base_sequence, delta.sequence, delta.buckets, delta.values)

    def check_drain_marker(self, marker: ConsumerDrainMarker) -> None:
        """OK only when ready and caught up to ``expected_sequence`` exactly."""
        if marker.lease != self.lease:
            return
        if not self.ready or self.installed_sequence != marker.expected_sequence:
            raise self.fault(
                "DrainMarker",
                f"expected sequence {marker.expected_sequence}, installed "
                f"{self.installed_sequence} (ready={self.ready})",
            )


# ---------------------------------------------------------------------------------------------
# The lane table
# ---------------------------------------------------------------------------------------------


class CkfLaneTable:
    """Upstream's ``GlobalCkfIndexer``: up to 16 lanes of one format and indexer domain.

    ``pools`` (lane -> ``PoolId``) is ``GlobalCkfManifest``, checked at once in upstream's order
    (``LaneError`` ``Manifest.<variant>``); without it, ``configured_lanes`` (default all 16) bind
    on first assignment under the same rules. Replicas exist only on configured lanes.
    """

    def __init__(
        self,
        format: DcCkfFormatIdentity,
        configured_lanes: int | None = None,
        *,
        pools: Mapping[int, PoolId] | None = None,
        indexer_domain: IndexerDomainId | None = None,
        consumer_instance: ConsumerInstanceId | int | None = None,
    ) -> None:
        self.format = format
        self.addressing = CkfAddressing(seed=format.seed, bucket_count=format.bucket_count)
        self.indexer_domain = indexer_domain
        self.consumer_instance = (
            None
            if consumer_instance is None or isinstance(consumer_instance, ConsumerInstanceId)
            else ConsumerInstanceId(consumer_instance)
        )
        self.pools: dict[int, PoolId] = {}
        if pools is None:
            mask = _ALL_LANES if configured_lanes is None else configured_lanes & _ALL_LANES
        else:
            mask = 0
            for lane, pool in pools.items():
                _check_lane(lane)
                self._bind(lane, pool)
                mask |= 1 << lane
            if configured_lanes is not None and configured_lanes & _ALL_LANES != mask:
                why = "configured_lanes disagrees with the lanes of pools"
                raise CkfError(CkfVariant.Usage, why, field="configured_lanes")
        if mask == 0:
            raise _manifest_error("NoConfiguredLanes", "the manifest configures no lane")
        self.configured_lanes = mask
        self.storage = np.zeros((format.bucket_count, MAX_LANES), dtype=np.uint64)
        self._slots = self.storage.view(np.uint16).reshape(format.bucket_count, MAX_LANES, 4)
        self.replicas: dict[int, LaneReplica] = {}

    def __repr__(self) -> str:
        lanes = [k for k in range(MAX_LANES) if (self.configured_lanes >> k) & 1]
        held = sorted(self.replicas)
        return (
            f"<CkfLaneTable: {self.format.bucket_count:,} buckets, seed {self.format.seed:#x}, "
            f"lanes {_ranges(lanes)} configured, {_ranges(held)} held>"
        )

    def _bind(self, lane: int, pool: PoolId) -> None:
        """Give ``lane`` its pool, or raise the manifest rule it breaks (nothing changes)."""
        domain = self.indexer_domain or pool.indexer_domain
        if pool.indexer_domain != domain:
            raise _manifest_error(
                "MixedIndexerDomain",
                f"lane {lane} has indexer domain {pool.indexer_domain}, expected {domain}",
                lane=lane,
                expected=domain,
                actual=pool.indexer_domain,
            )
        others = {p: n for n, p in self.pools.items() if n != lane}
        if pool in others:
            raise _manifest_error(
                "DuplicatePool",
                f"pool {pool} is already lane {others[pool]}'s",
                lane=lane,
                pool_id=pool,
            )
        dcs: dict[DcId, int] = {p.dc_id: n for p, n in others.items()}
        if pool.dc_id in dcs:
            raise _manifest_error(
                "DuplicateDcLane",
                f"DC {pool.dc_id} already has lane {dcs[pool.dc_id]}",
                lane=lane,
                dc_id=pool.dc_id,
            )
        self.indexer_domain = domain
        self.pools[lane] = pool

    def replica(
        self,
        lane: int,
        *,
        pool_id: PoolId | None = None,
        consumer_instance: ConsumerInstanceId | int | None = None,
    ) -> LaneReplica:
        """The lane's replica (created on first use) writing into this table's column;
        ``pool_id`` names the lane's pool (once: a lane keeps its pool)."""
        _check_lane(lane)
        if not (self.configured_lanes >> lane) & 1:
            raise _manifest_error(
                "UnconfiguredLane", f"lane {lane} is not configured in this table", lane=lane
            )
        bound = self.pools.get(lane)
        if pool_id is not None and bound is not None and pool_id != bound:
            raise _assignment_error(lane, "WrongLaneOwner", f"the lane is pool {bound}'s")
        if pool_id is not None and bound is None:
            self._bind(lane, pool_id)
            if lane in self.replicas:
                self.replicas[lane].pool_id = pool_id
        if lane not in self.replicas:
            self.replicas[lane] = LaneReplica(
                lane,
                self.format,
                self.storage[:, lane],
                pool_id=self.pools.get(lane),
                consumer_instance=(
                    self.consumer_instance if consumer_instance is None else consumer_instance
                ),
                binder=self._bind,
            )
        return self.replicas[lane]

    def lane_words(self, lane: int) -> npt.NDArray[np.uint64]:
        """A copy of lane ``lane``'s column: ``bucket_count`` u64 words, bucket order."""
        return self.storage[:, lane].copy()

    def ready_mask(self) -> int:
        """Bitmask (bit = lane) of the configured lanes whose replica is ready."""
        mask = 0
        for lane, rep in self.replicas.items():
            if rep.ready:
                mask |= 1 << lane
        return mask & self.configured_lanes

    def probe(self, fingerprint: int, bucket_a: int, bucket_b: int) -> int:
        """Lane bitmask of lanes whose word at a OR b holds ``fingerprint``."""
        hit = (self._slots[bucket_a] == fingerprint).any(axis=1) | (
            self._slots[bucket_b] == fingerprint
        ).any(axis=1)
        return int(np.packbits(hit, bitorder="little").view("<u2")[0])

    def probe_hash(self, h: int) -> int:
        """Lane bitmask for one u64 sequence hash: its fingerprint and two buckets, then
        :meth:`probe`."""
        fp, a, b = self.addressing.prepare_ints(h)
        return self.probe(fp, a, b)

    def probe_many(self, hashes: npt.ArrayLike) -> npt.NDArray[np.uint16]:
        """Lane bitmask per hash, vectorised (``uint16`` each, bit = lane)."""
        fp, a, b = self.addressing.prepare_many(hashes)
        f = fp[:, None, None]
        hit = (self._slots[a.astype(np.intp)] == f).any(axis=2) | (
            self._slots[b.astype(np.intp)] == f
        ).any(axis=2)
        packed = np.packbits(hit, axis=1, bitorder="little")
        out: npt.NDArray[np.uint16] = packed.view("<u2")[:, 0].astype(np.uint16)
        return out

    def find_prefix_matches(
        self, local_hashes: Sequence[int] | npt.NDArray[np.uint64], verification_window: int = 2
    ) -> dict[int, int] | None:
        """Per ready lane, the prefix depth (blocks) of a request's local block hashes.

        None when no configured lane is ready (upstream ``Unavailable``). Every position's mask
        is computed in one vectorised call; the search then reads them as its probes.
        """
        ready = self.ready_mask()
        if ready == 0:
            return None
        seq = sequence_hashes(local_hashes)
        masks = self.probe_many(seq).tolist() if len(seq) else []
        depths = find_prefix_depths(len(seq), ready, verification_window, masks.__getitem__)
        return {lane: depths[lane] for lane in range(MAX_LANES) if (ready >> lane) & 1}


def sequence_hashes(local_hashes: Sequence[int] | npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Canonical sequence hashes of a request's local block hashes (ckf.md §1.2): the rolling
    chain."""
    return compute_seq_hash_for_block(local_hashes)


# ---------------------------------------------------------------------------------------------
# Prefix search (search.rs, newest)
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FallbackStats:
    """Upstream's fallback counters of a prefix search: lanes that missed at their window's
    left edge, lanes the fallback scan took up, and the probes it made."""

    left_edge_lanes: int = 0
    activated_lanes: int = 0
    probe_calls: int = 0
    lane_probes: int = 0
    provenance_skips: int = 0


@dataclass(frozen=True, slots=True)
class SearchTraceEvent:
    """One probe: ``phase`` in initial/exponential/binary/verification/fallback."""

    phase: str
    position: int
    lanes: int


@dataclass(slots=True)
class PrefixSearchResult:
    """Each lane's matched prefix depth in blocks, the fallback counters, the probes made."""

    depths: list[int]
    fallback: FallbackStats = field(default_factory=FallbackStats)
    probe_calls: int = 0


def _lane_mask(lanes: int) -> int:
    return 0xFFFF if lanes >= 16 else (1 << lanes) - 1


def check_verification_window(window: int) -> None:
    """``CkfError`` ``Usage`` where the prefix search refuses ``window``
    (``verification_window_fault``, the range's one statement)."""
    if fault := verification_window_fault(window):
        why = f"verification_window {fault}, got {window}"
        raise CkfError(CkfVariant.Usage, why, field="verification_window", actual=window)


def search_prefix_depths(
    sequence_len: int,
    initial_mask: int,
    verification_window: int,
    probe: ProbeFn,
    *,
    lanes: int = MAX_LANES,
    fallback: bool = True,
    trace: list[SearchTraceEvent] | None = None,
) -> PrefixSearchResult:
    """``find_prefix_depths`` with upstream's fallback stats and an optional probe trace.

    ``probe(position)`` returns the lane bitmask of hits at that position. ``fallback=False``
    is upstream's test-only ``fixed_window_prefix_depths``.
    """
    if not 1 <= lanes <= MAX_LANES:
        why = f"lanes must be in 1..=16, got {lanes}"
        raise CkfError(CkfVariant.Usage, why, field="lanes", actual=lanes)
    check_verification_window(verification_window)
    result = PrefixSearchResult([0] * lanes)
    if sequence_len == 0:
        return result
    search = _Search(sequence_len, lanes, probe, trace)
    configured = initial_mask & _lane_mask(lanes)
    search.active = configured & search.probe("initial", 0, configured)
    if search.active:
        search.exponential()
        search.binary()
        result.depths, start, left_edge = search.verify(verification_window)
        if fallback:
            search.fall_back(result.depths, start, left_edge, result.fallback)
    result.probe_calls = search.calls
    return result


class _Search:
    """One prefix search's state: each lane's bracket ``lower`` (a hit) .. ``upper`` (a miss,
    or the sequence's end), the hit before ``lower`` (``pred``), and the probes made."""

    def __init__(
        self, n: int, lanes: int, probe: ProbeFn, trace: list[SearchTraceEvent] | None
    ) -> None:
        self.n, self.lanes, self._probe, self.trace = n, range(lanes), probe, trace
        self.calls = 0
        self.active = 0
        self.lower, self.pred, self.upper = [0] * lanes, [0] * lanes, [n] * lanes

    def probe(self, phase: str, position: int, lanes_bits: int) -> int:
        self.calls += 1
        if self.trace is not None:
            self.trace.append(SearchTraceEvent(phase, position, lanes_bits))
        return self._probe(position)

    def _narrow(self, members: int, hits: int, position: int) -> None:
        """Each member lane's bracket at ``position``: up to it on a hit, down to it on a miss."""
        for lane in self.lanes:
            bit = 1 << lane
            if members & bit:
                if hits & bit:
                    self.pred[lane] = self.lower[lane]
                    self.lower[lane] = position
                else:
                    self.upper[lane] = position

    def exponential(self) -> None:
        """Positions 1, 2, 4, ...: a lane stops sampling at its first miss."""
        sampling, pos = self.active, 1
        while pos < self.n and sampling:
            hits = self.probe("exponential", pos, sampling)
            self._narrow(sampling, hits, pos)
            sampling &= hits
            pos *= 2

    def binary(self) -> None:
        """Bisect every bracket; equal midpoints share a probe, groups in first-lane order."""
        lower, upper = self.lower, self.upper
        while True:
            groups: dict[int, int] = {}
            for lane in self.lanes:
                if (self.active >> lane) & 1 and upper[lane] - lower[lane] > 1:
                    mid = lower[lane] + (upper[lane] - lower[lane]) // 2
                    groups[mid] = groups.get(mid, 0) | (1 << lane)
            if not groups:
                return
            for position, members in groups.items():
                self._narrow(members, self.probe("binary", position, members), position)

    def verify(self, window: int) -> tuple[list[int], list[int], int]:
        """The ``window`` positions below each tentative depth, in position order: a miss
        lowers the lane's depth to it. (depths, each window's start, the lanes whose miss was
        at their window's left edge)."""
        depths, start = [0] * len(self.lanes), [0] * len(self.lanes)
        vgroups: dict[int, int] = {}
        for lane in self.lanes:
            bit = 1 << lane
            if self.active & bit:
                depths[lane] = self.upper[lane]
                start[lane] = max(self.upper[lane] - window, 0)
                for p in range(start[lane], self.upper[lane]):
                    vgroups[p] = vgroups.get(p, 0) | bit
        verifying, left_edge = self.active, 0
        for position in sorted(vgroups):
            participants = vgroups[position] & verifying
            if not participants:
                continue
            misses = participants & ~self.probe("verification", position, participants)
            for lane in self.lanes:
                bit = 1 << lane
                if misses & bit:
                    depths[lane] = position
                    if position == start[lane]:
                        left_edge |= bit
            verifying &= ~misses
        return depths, start, left_edge

    def fall_back(
        self, depths: list[int], start: list[int], lanes: int, stats: FallbackStats
    ) -> None:
        """Upstream's fallback: a lane whose window missed at its left edge scans up from the
        hit before its bracket (``pred``) to the window, and its depth is the first miss."""
        stats.left_edge_lanes = lanes.bit_count()
        nxt, end = self._fallback_ranges(start, lanes, stats)
        lanes &= sum(1 << lane for lane in nxt)
        stats.activated_lanes = lanes.bit_count()
        while lanes:
            position = min(nxt[lane] for lane in self.lanes if (lanes >> lane) & 1)
            participants = sum(
                1 << lane for lane in self.lanes if (lanes >> lane) & 1 and nxt[lane] == position
            )
            misses = participants & ~self.probe("fallback", position, participants)
            stats.probe_calls += 1
            stats.lane_probes += participants.bit_count()
            for lane in self.lanes:
                bit = 1 << lane
                if not participants & bit:
                    continue
                if misses & bit:
                    depths[lane] = position
                    lanes &= ~bit
                    continue
                nxt[lane] += 1
                if nxt[lane] == end[lane]:
                    lanes &= ~bit

    def _fallback_ranges(
        self, start: list[int], lanes: int, stats: FallbackStats
    ) -> tuple[dict[int, int], dict[int, int]]:
        """Each falling-back lane's scan ``pred + 1 .. start`` (a lane whose ``pred`` is not
        below its window is a provenance skip; an empty range scans nothing)."""
        nxt: dict[int, int] = {}
        end: dict[int, int] = {}
        for lane in self.lanes:
            if not (lanes >> lane) & 1:
                continue
            s, e = self.pred[lane] + 1, start[lane]
            if self.pred[lane] >= e:
                stats.provenance_skips += 1
            elif s != e:
                nxt[lane], end[lane] = s, e
        return nxt, end


def find_prefix_depths(
    sequence_len: int,
    initial_mask: int,
    verification_window: int,
    probe: ProbeFn,
    *,
    lanes: int = MAX_LANES,
) -> list[int]:
    """Per-lane prefix depth by upstream's advisory search (see ``search_prefix_depths``)."""
    return search_prefix_depths(
        sequence_len, initial_mask, verification_window, probe, lanes=lanes
    ).depths


def linear_prefix_depths(
    sequence_len: int, initial_mask: int, probe: ProbeFn, *, lanes: int = MAX_LANES
) -> list[int]:
    """The exact reference: AND the masks position by position; depth = last set position + 1."""
    depths = [0] * lanes
    active = initial_mask & _lane_mask(lanes)
    for position in range(sequence_len):
        if not active:
            break
        active &= probe(position)
        for lane in range(lanes):
            if (active >> lane) & 1:
                depths[lane] = position + 1
    return depths


def _ranges(lanes: list[int]) -> str:
    """``[0-3, 7]``: lane numbers as runs."""
    runs: list[list[int]] = []
    for k in lanes:
        if runs and runs[-1][1] == k - 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    return "[" + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) + "]"

"""The CKF consumer: lane replicas fed by snapshots and deltas, a 16-lane table, prefix search.

Upstream ``global.rs`` (``GlobalCkfLaneIngestor``, ``TransposedCkfTable<16>``) and ``search.rs``.
Storage is bucket-major with the 16 lanes of a bucket contiguous, exactly as upstream, so one
probe reads two rows. Probing many hashes at once is vectorised; ``find_prefix_depths`` follows
the newest ``search.rs`` schedule probe for probe (exponential → grouped binary → verification
window → left-edge fallback scan), which is what makes its stats (probe calls, lane probes,
provenance skips) comparable to upstream's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._lane import DcCkfDelta, DcCkfSnapshot, IngestOutcome, Lane
from cbi1kit.errors import LaneError
from cbi1kit.hashing._blocks import compute_seq_hash_for_block
from cbi1kit.hashing._identity import (
    MAX_LANES,
    ConsumerDrainMarker,
    ConsumerInstanceId,
    DcCkfFormatIdentity,
    LaneLease,
    PoolId,
    ProducerIdentity,
)

__all__ = [
    "CkfLaneTable",
    "FallbackStats",
    "LaneReplica",
    "PrefixSearchResult",
    "SearchTraceEvent",
    "find_prefix_depths",
    "linear_prefix_depths",
    "search_prefix_depths",
    "sequence_hashes",
]

ProbeFn = Callable[[int], int]
_ALL_LANES = (1 << MAX_LANES) - 1


# ---------------------------------------------------------------------------------------------
# Lane ingestion
# ---------------------------------------------------------------------------------------------


def _assignment_error(lane: int, reason: str) -> LaneError:
    """``Assignment``: a lease or identity the manifest does not allow; nothing changes."""
    return LaneError(
        "Assignment", reason, message=f"lane {lane}: cannot assign: {reason}", lane=lane
    )


class LaneReplica(Lane):
    """One consumer lane (upstream ``GlobalCkfLaneIngestor``) writing into a words column: the
    thin :class:`Lane` plus what the consumer protocol adds above it, leases and identities.

    The manifest constraints are ``format`` and, if given, ``pool_id`` and ``consumer_instance``.
    """

    def __init__(
        self,
        lane: int,
        format: DcCkfFormatIdentity,
        words: npt.NDArray[np.uint64] | None = None,
        *,
        pool_id: PoolId | None = None,
        consumer_instance: ConsumerInstanceId | int | None = None,
    ) -> None:
        if not 0 <= lane < MAX_LANES:
            raise _assignment_error(lane, "physical lane must be in 0..16")
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

    # -- control ----------------------------------------------------------------------------
    def assign(self, identity: ProducerIdentity, lease: LaneLease) -> None:
        """Take a new lease: clears readiness and ``installed_sequence``."""
        if self.consumer_instance is not None and lease.consumer_instance != self.consumer_instance:
            raise _assignment_error(self.lane, "lease belongs to another consumer instance")
        if lease.physical_lane != self.lane:
            raise _assignment_error(self.lane, f"lease is for lane {lease.physical_lane}")
        if self.pool_id is not None and identity.pool_id != self.pool_id:
            raise _assignment_error(self.lane, "producer pool differs from the manifest's")
        if identity.format != self.format:
            raise _assignment_error(self.lane, "producer format differs from the manifest's")
        if self.lease is not None and lease.assignment_epoch <= self.lease.assignment_epoch:
            raise _assignment_error(
                self.lane,
                f"assignment epoch {lease.assignment_epoch} is not after "
                f"{self.lease.assignment_epoch}",
            )
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
    """Up to 16 lanes of one format in a bucket-major ``(bucket_count, 16) uint64`` array."""

    def __init__(self, format: DcCkfFormatIdentity, configured_lanes: int = _ALL_LANES) -> None:
        self.format = format
        self.addressing = CkfAddressing(format.bucket_count, format.seed)
        self.configured_lanes = configured_lanes & _ALL_LANES
        self.storage = np.zeros((format.bucket_count, MAX_LANES), dtype=np.uint64)
        self._slots = self.storage.view(np.uint16).reshape(format.bucket_count, MAX_LANES, 4)
        self.replicas: dict[int, LaneReplica] = {}

    def replica(
        self,
        lane: int,
        *,
        pool_id: PoolId | None = None,
        consumer_instance: ConsumerInstanceId | int | None = None,
    ) -> LaneReplica:
        """The lane's replica (created on first use) writing into this table's column."""
        if lane not in self.replicas:
            if not (self.configured_lanes >> lane) & 1:
                raise _assignment_error(lane, "lane is not configured in this table")
            self.replicas[lane] = LaneReplica(
                lane,
                self.format,
                self.storage[:, lane],
                pool_id=pool_id,
                consumer_instance=consumer_instance,
            )
        return self.replicas[lane]

    def lane_words(self, lane: int) -> npt.NDArray[np.uint64]:
        return self.storage[:, lane].copy()

    def ready_mask(self) -> int:
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
    """Canonical sequence hashes of a request's local block hashes (§1.2): the rolling chain."""
    return compute_seq_hash_for_block(local_hashes)


# ---------------------------------------------------------------------------------------------
# Prefix search (search.rs, newest)
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FallbackStats:
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
    depths: list[int]
    fallback: FallbackStats = field(default_factory=FallbackStats)
    probe_calls: int = 0


def _lane_mask(lanes: int) -> int:
    return 0xFFFF if lanes >= 16 else (1 << lanes) - 1


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
        raise ValueError(f"lanes must be in 1..=16, got {lanes}")
    if not 1 <= verification_window <= 8:
        raise ValueError(f"verification_window must be in 1..=8, got {verification_window}")
    result = PrefixSearchResult([0] * lanes)
    if sequence_len == 0:
        return result
    calls = 0

    def do_probe(phase: str, position: int, lanes_bits: int) -> int:
        nonlocal calls
        calls += 1
        if trace is not None:
            trace.append(SearchTraceEvent(phase, position, lanes_bits))
        return probe(position)

    n = sequence_len
    lane_ids = range(lanes)
    configured = initial_mask & _lane_mask(lanes)
    active = configured & do_probe("initial", 0, configured)
    if active == 0:
        result.probe_calls = calls
        return result
    lower = [0] * lanes
    pred = [0] * lanes
    upper = [n] * lanes

    # exponential phase: a lane stops sampling at its first miss
    sampling = active
    pos = 1
    while pos < n and sampling:
        hits = do_probe("exponential", pos, sampling)
        for lane in lane_ids:
            bit = 1 << lane
            if sampling & bit:
                if hits & bit:
                    pred[lane] = lower[lane]
                    lower[lane] = pos
                else:
                    upper[lane] = pos
        sampling &= hits
        pos *= 2

    # grouped binary phase: equal midpoints share a probe; groups in first-lane order
    while True:
        groups: dict[int, int] = {}
        for lane in lane_ids:
            if (active >> lane) & 1 and upper[lane] - lower[lane] > 1:
                mid = lower[lane] + (upper[lane] - lower[lane]) // 2
                groups[mid] = groups.get(mid, 0) | (1 << lane)
        if not groups:
            break
        for position, members in groups.items():
            hits = do_probe("binary", position, members)
            for lane in lane_ids:
                bit = 1 << lane
                if members & bit:
                    if hits & bit:
                        pred[lane] = lower[lane]
                        lower[lane] = position
                    else:
                        upper[lane] = position

    # verification window below each tentative depth
    depths = [0] * lanes
    start = [0] * lanes
    vgroups: dict[int, int] = {}
    for lane in lane_ids:
        bit = 1 << lane
        if active & bit:
            depths[lane] = upper[lane]
            start[lane] = max(upper[lane] - verification_window, 0)
            for p in range(start[lane], upper[lane]):
                vgroups[p] = vgroups.get(p, 0) | bit
    verifying = active
    fallback_lanes = 0
    for position in sorted(vgroups):
        participants = vgroups[position] & verifying
        if not participants:
            continue
        misses = participants & ~do_probe("verification", position, participants)
        for lane in lane_ids:
            bit = 1 << lane
            if misses & bit:
                depths[lane] = position
                if position == start[lane]:
                    fallback_lanes |= bit
        verifying &= ~misses

    stats = result.fallback
    if fallback:
        stats.left_edge_lanes = fallback_lanes.bit_count()
        nxt = [0] * lanes
        end = [0] * lanes
        for lane in lane_ids:
            bit = 1 << lane
            if not fallback_lanes & bit:
                continue
            s, e = pred[lane] + 1, start[lane]
            if pred[lane] >= e:
                stats.provenance_skips += 1
                fallback_lanes &= ~bit
            elif s == e:
                fallback_lanes &= ~bit
            else:
                nxt[lane], end[lane] = s, e
        stats.activated_lanes = fallback_lanes.bit_count()
        while fallback_lanes:
            position = min(nxt[lane] for lane in lane_ids if (fallback_lanes >> lane) & 1)
            participants = 0
            for lane in lane_ids:
                if (fallback_lanes >> lane) & 1 and nxt[lane] == position:
                    participants |= 1 << lane
            misses = participants & ~do_probe("fallback", position, participants)
            stats.probe_calls += 1
            stats.lane_probes += participants.bit_count()
            for lane in lane_ids:
                bit = 1 << lane
                if not participants & bit:
                    continue
                if misses & bit:
                    depths[lane] = position
                    fallback_lanes &= ~bit
                    continue
                nxt[lane] += 1
                if nxt[lane] == end[lane]:
                    fallback_lanes &= ~bit
    result.depths = depths
    result.probe_calls = calls
    return result


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

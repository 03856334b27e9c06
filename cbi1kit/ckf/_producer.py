"""The CKF producer (upstream ``DcCkfState``, ``dc.rs``) and its publisher (``publication.rs``).

One filter per DC pool. Each (worker, dp_rank) member's events become canonical sequence hashes
(docs/spec/ckf.md §1.2) through a per-member lineage keyed by the engine's opaque external block
hash. A canonical hash holds at most one fingerprint while it has owners and is resident. A drain
ships, in first-touch order, the buckets whose word differs from its first-touch original, and
nothing for a net reversion (ckf.md §4.1). The publisher numbers batches, not events.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._lane import DcCkfDelta, DcCkfSnapshot
from cbi1kit.ckf._limits import DEFAULT_SEED, DEFAULT_VERIFICATION_WINDOW, verification_window_fault
from cbi1kit.ckf._table import DEFAULT_MAX_KICKS, MAX_KICKS, CuckooTable, SplitMix64, lane_rng_seed
from cbi1kit.errors import CkfError, CkfVariant, KvCacheEventError, KvCacheEventVariant
from cbi1kit.hashing._blocks import CHAIN_XXH3_SEED
from cbi1kit.hashing._identity import (
    ConsumerDrainMarker,
    DcCkfFormatIdentity,
    LaneLease,
    ProducerIdentity,
)

MAX_OWNERS = 0xFFFF_FFFF
_U64 = 0xFFFF_FFFF_FFFF_FFFF

WorkerWithDpRank = tuple[int, int]
"""A pool member: ``(worker_id, dp_rank)``; ordered as a tuple (assumed upstream order)."""


def _hx(v: int) -> str:
    return f"0x{v:016x}"


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def _config_error(variant: str, field_name: str, value: Any, reason: str) -> CkfError:
    """``CkfError`` ``Config``: a ``CkfConfig`` upstream rejects (``subvariant`` is its
    ``CkfConfigError`` variant)."""
    return CkfError(
        CkfVariant.Config,
        subvariant=variant,
        message=f"invalid CkfConfig ({variant}): {field_name}={value}: {reason}",
        field=field_name,
        actual=value,
    )


def _event_error(
    variant: KvCacheEventVariant, member: WorkerWithDpRank | None, message: str, **context: Any
) -> KvCacheEventError:
    """An event outcome upstream reports as ``KvCacheEventError::<variant>``."""
    who = "" if member is None else f"worker {member[0]} dp_rank {member[1]}: "
    return KvCacheEventError(
        variant, message=f"{variant}: {who}{message}", member=member, **context
    )


def _publisher_fenced(reason: str, last_sequence: int) -> CkfError:
    """The publisher is fenced (``DeliveryUncertain`` / ``SequenceExhausted``) until a barrier."""
    return CkfError(
        CkfVariant.PublisherFenced,
        subvariant=reason,
        message=f"publisher fenced ({reason}) at sequence {last_sequence}: "
        "a new lease and barrier snapshot are needed",
        reason=reason,
        last_sequence=last_sequence,
    )


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------


def bucket_count_for(expected_blocks_per_dc: int) -> int:
    """Buckets for ``n`` expected blocks: next_pow2(max(ceil(5n/16), 2)), i.e. 80 % load."""
    n = expected_blocks_per_dc
    if n <= 0:
        raise _config_error("ExpectedCapacityZero", "expected_blocks_per_dc", n, "must be >= 1")
    if 5 * n + 15 > _U64:
        raise _config_error("CapacityOverflow", "expected_blocks_per_dc", n, "overflows usize")
    required = max((5 * n + 15) // 16, 2)
    count = 1 << (required - 1).bit_length()
    if count > 1 << 63:
        raise _config_error("CapacityOverflow", "expected_blocks_per_dc", n, "overflows usize")
    return count


@dataclass(frozen=True, slots=True)
class CkfConfig:
    """Producer configuration (upstream ``CkfConfig``); validated on construction.

    ``expected_blocks_per_dc`` is checked lazily by :meth:`bucket_count`, as upstream
    (``CkfConfig::new(0)`` constructs; its ``bucket_count()`` errs).
    """

    expected_blocks_per_dc: int = 1
    seed: int = DEFAULT_SEED
    max_kicks: int = DEFAULT_MAX_KICKS
    verification_window: int = DEFAULT_VERIFICATION_WINDOW
    publish_every_n_events: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.seed <= _U64:
            raise _config_error("InvalidSeed", "seed", self.seed, "must be a u64")
        if not 1 <= self.max_kicks <= MAX_KICKS:
            raise _config_error(
                "InvalidMaxKicks", "max_kicks", self.max_kicks, f"must be in 1..={MAX_KICKS}"
            )
        if why := verification_window_fault(self.verification_window):
            raise _config_error(
                "InvalidVerificationWindow", "verification_window", self.verification_window, why
            )
        if self.publish_every_n_events < 1:
            raise _config_error(
                "InvalidPublishCadence",
                "publish_every_n_events",
                self.publish_every_n_events,
                "must be >= 1",
            )

    def bucket_count(self) -> int:
        """Buckets for ``expected_blocks_per_dc`` (``bucket_count_for``); errs on 0."""
        return bucket_count_for(self.expected_blocks_per_dc)

    def format(self) -> DcCkfFormatIdentity:
        """The ``DcCkfFormatIdentity`` a producer with this config publishes under."""
        return DcCkfFormatIdentity(seed=self.seed, bucket_count=self.bucket_count())


# ---------------------------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------------------------


class StorageTier(enum.StrEnum):
    """Where a stored block lives; only ``DEVICE`` (GPU) events target primary residency."""

    DEVICE = "device"
    HOST_PINNED = "host_pinned"
    DISK = "disk"
    EXTERNAL = "external"


#: Cleared-event residency domains: ``None`` (legacy) and ``"primary"`` apply,
#: ``"cache_owner"`` is ignored, anything else is ``UnsupportedResidencyDomain``.
_RESIDENCY_APPLY = frozenset({"primary"})
_RESIDENCY_IGNORE = frozenset({"cache_owner"})


@dataclass(frozen=True, slots=True)
class StoredBlock:
    """One stored block: the engine's opaque id and the token (local) block hash."""

    block_hash: int
    tokens_hash: int


@dataclass(frozen=True, slots=True)
class KvStored:
    """A worker stored ``blocks``, chained after the block ``parent_hash`` where given."""

    worker_id: int
    blocks: tuple[StoredBlock, ...]
    parent_hash: int | None = None
    dp_rank: int = 0
    start_position: int | None = None
    storage_tier: StorageTier = StorageTier.DEVICE


@dataclass(frozen=True, slots=True)
class KvRemoved:
    """A worker evicted the blocks of ``block_hashes`` from ``storage_tier``."""

    worker_id: int
    block_hashes: tuple[int, ...]
    dp_rank: int = 0
    storage_tier: StorageTier = StorageTier.DEVICE


@dataclass(frozen=True, slots=True)
class KvCleared:
    """A worker cleared every block it held (``residency_domain`` as the event names it)."""

    worker_id: int
    dp_rank: int = 0
    residency_domain: str | None = None


KvEvent = KvStored | KvRemoved | KvCleared


def canonical_chain(tokens_hashes: Iterable[int], parent: int | None = None) -> list[int]:
    """Canonical sequence hashes of consecutive blocks (root = tokens hash, then chained)."""
    out: list[int] = []
    prev = parent
    for t in tokens_hashes:
        prev = t if prev is None else _child(prev, t)
        out.append(prev)
    return out


def _child(parent: int, tokens_hash: int) -> int:
    # Scalar twin of _xxh3.xxh3_64_u64_pair(parent, tokens_hash, 1337); the chain is sequential.
    return xxhash.xxh3_64_intdigest(
        parent.to_bytes(8, "little") + tokens_hash.to_bytes(8, "little"), CHAIN_XXH3_SEED
    )


# ---------------------------------------------------------------------------------------------
# Publication values
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class DcCkfPublicationBatch:
    """Absolute bucket images (bucket uint32, word uint64) in first-touch order."""

    buckets: npt.NDArray[np.uint32]
    values: npt.NDArray[np.uint64]

    def __len__(self) -> int:
        return len(self.buckets)

    def images(self) -> list[tuple[int, int]]:
        """The batch as ``(bucket, word)`` pairs, in first-touch order."""
        return list(zip(self.buckets.tolist(), self.values.tolist(), strict=True))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DcCkfPublicationBatch):
            return NotImplemented
        return self.images() == other.images()

    __hash__ = None  # type: ignore[assignment]


@dataclass(slots=True)
class Ownership:
    """How many (member, external) mappings own a canonical hash, and whether it is stored."""

    owners: int
    resident: bool


@dataclass(frozen=True, slots=True)
class EventOutcome:
    """What ``DcCkfState.apply`` did: ``applied`` is False for ignored non-primary events."""

    applied: bool
    error: KvCacheEventError | None = None
    batch: DcCkfPublicationBatch | None = None


# ---------------------------------------------------------------------------------------------
# The producer state
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Counters:
    capacity_failures: int = 0
    unknown_removals: int = 0
    events_applied: int = 0
    events_ignored: int = 0
    batches_drained: int = 0
    images_drained: int = 0


class DcCkfState:
    """One DC pool's filter, ownership and publication window (upstream ``DcCkfState``)."""

    def __init__(self, config: CkfConfig) -> None:
        bucket_count = config.bucket_count()
        if bucket_count > 1 << 32:
            # Batches carry uint32 bucket indices (the CBI1 image field); CBI1 caps at 2^24.
            raise _config_error(
                "CapacityOverflow",
                "expected_blocks_per_dc",
                config.expected_blocks_per_dc,
                "more than 2^32 buckets cannot be published",
            )
        self.config = config
        self.format = config.format()
        self.addressing = CkfAddressing(seed=config.seed, bucket_count=bucket_count)
        self.table = CuckooTable(self.addressing)
        self.rng = SplitMix64(lane_rng_seed(config.seed, 0))
        self._lineage: dict[WorkerWithDpRank, dict[int, int]] = {}
        self._owners: dict[int, Ownership] = {}
        self.resident_count = 0
        self.counters = _Counters()
        self._dirty: dict[int, int] = {}
        self.pending_events = 0

    # -- read side ---------------------------------------------------------------------------
    @property
    def bucket_count(self) -> int:
        """Buckets in the filter (a power of two)."""
        return self.addressing.bucket_count

    @property
    def capacity_failures(self) -> int:
        """Canonical hashes that found no slot within ``max_kicks`` (never stored)."""
        return self.counters.capacity_failures

    @property
    def unknown_removals(self) -> int:
        """Removals of blocks the member had not stored: counted no-ops."""
        return self.counters.unknown_removals

    def words(self) -> npt.NDArray[np.uint64]:
        """A copy of the filter's bucket words (u64, bucket order)."""
        return self.table.words()

    def members(self) -> list[WorkerWithDpRank]:
        """Every member (``(worker_id, dp_rank)``) with a lineage, sorted."""
        return sorted(self._lineage)

    def lineage(self, member: WorkerWithDpRank) -> dict[int, int]:
        """A copy of the member's ``external → canonical`` map."""
        return dict(self._lineage.get(member, {}))

    def ownership(self, canonical: int) -> Ownership | None:
        """A copy of a canonical hash's ownership, or None when nothing owns it."""
        own = self._owners.get(canonical)
        return None if own is None else Ownership(own.owners, own.resident)

    def resident_canonicals(self) -> npt.NDArray[np.uint64]:
        """Every canonical hash that currently holds a fingerprint."""
        return np.fromiter((c for c, o in self._owners.items() if o.resident), dtype=np.uint64)

    def owner_count(self) -> int:
        """Distinct canonical hashes with at least one owner."""
        return len(self._owners)

    def export_state(self) -> tuple[object, ...]:
        """Everything but the event-cadence counter, as plain values (for exact comparisons)."""
        return (
            self.table.words_list(),
            self.rng.state,
            {m: dict(lin) for m, lin in self._lineage.items()},
            {c: (o.owners, o.resident) for c, o in self._owners.items()},
            self.resident_count,
            self.counters.capacity_failures,
            list(self._dirty.items()),
        )

    # -- events ------------------------------------------------------------------------------
    def apply(self, event: KvEvent) -> EventOutcome:
        """Apply one event the way ``DcCkfState`` does, then drain if the cadence is reached.

        Validation errors are returned (not raised) in the outcome, after an all-or-nothing
        rejection; they still count toward the cadence, as upstream.
        """
        member = (event.worker_id, event.dp_rank)
        if isinstance(event, KvCleared):
            domain = event.residency_domain
            if domain is not None and domain not in _RESIDENCY_APPLY:
                if domain in _RESIDENCY_IGNORE:
                    self.counters.events_ignored += 1
                    return EventOutcome(applied=False)
                return EventOutcome(
                    False,
                    _event_error(
                        KvCacheEventVariant.UnsupportedResidencyDomain,
                        member,
                        f"unsupported residency domain {domain!r}",
                        domain=domain,
                    ),
                )
        elif event.storage_tier is not StorageTier.DEVICE:
            self.counters.events_ignored += 1
            return EventOutcome(applied=False)

        self.pending_events += 1
        self.counters.events_applied += 1
        error: KvCacheEventError | None = None
        try:
            if isinstance(event, KvStored):
                failed = self.store(
                    member,
                    [(b.block_hash, b.tokens_hash) for b in event.blocks],
                    parent_hash=event.parent_hash,
                    start_position=event.start_position,
                )
                if failed:
                    canonicals = tuple(failed)
                    shown = ", ".join(_hx(c) for c in canonicals[:4])
                    more = "" if len(canonicals) <= 4 else f", … ({len(canonicals)} in all)"
                    error = _event_error(
                        KvCacheEventVariant.CapacityExhausted,
                        member,
                        f"no slot for canonical {shown}{more} (omitted, counted)",
                        canonicals=canonicals,
                    )
            elif isinstance(event, KvRemoved):
                self.remove(member, event.block_hashes)
            else:
                self.remove_member(member)
        except KvCacheEventError as exc:
            error = exc
        batch = None
        if self.pending_events >= self.config.publish_every_n_events:
            batch = self.drain()
        return EventOutcome(True, error, batch)

    def store(
        self,
        member: WorkerWithDpRank,
        blocks: Sequence[tuple[int, int]],
        *,
        parent_hash: int | None = None,
        start_position: int | None = None,
    ) -> tuple[int, ...]:
        """Store ``(external block_hash, tokens_hash)`` blocks; all-or-nothing validation.

        Raises ParentBlockNotFound / InvalidBlockSequence / OwnershipDegreeOverflow with nothing
        changed. Returns the canonical hashes omitted for capacity (lineage and ownership of those
        stay committed, siblings stay applied).
        """
        if not blocks:
            return ()
        lineage = self._lineage.get(member, {})
        prev = self._parent_of(member, lineage, parent_hash, start_position)
        new_map, candidates, reoffered = _derive(member, lineage, prev, blocks)
        increments = Counter(new_map.values())
        self._check_owners(member, increments)
        # commit
        owners = self._owners
        for c, k in increments.items():
            own = owners.get(c)
            if own is None:
                owners[c] = Ownership(k, False)
            else:
                own.owners += k
        if new_map:
            self._lineage.setdefault(member, {}).update(new_map)
        failed = [c for c in candidates if not self._offer(c, self.config.max_kicks)]
        self.counters.capacity_failures += len(failed)
        for c in reoffered:
            self._offer(c, 0)  # relocation-free re-offer: one RNG draw
        return tuple(failed)

    def _parent_of(
        self,
        member: WorkerWithDpRank,
        lineage: dict[int, int],
        parent_hash: int | None,
        start_position: int | None,
    ) -> int | None:
        """The canonical hash the stored blocks chain from (None: the root)."""
        if parent_hash is not None:
            if parent_hash not in lineage:
                raise _event_error(
                    KvCacheEventVariant.ParentBlockNotFound,
                    member,
                    f"parent block {_hx(parent_hash)} is not in this member's lineage",
                    parent_hash=parent_hash,
                )
            return lineage[parent_hash]
        if start_position is not None and start_position != 0:
            raise _event_error(
                KvCacheEventVariant.InvalidBlockSequence,
                member,
                f"start_position {start_position} without a parent block",
                start_position=start_position,
            )
        return None

    def _check_owners(self, member: WorkerWithDpRank, increments: Counter[int]) -> None:
        """``OwnershipDegreeOverflow`` before anything changes, if a count would pass u32."""
        for c, k in increments.items():
            own = self._owners.get(c)
            total = (0 if own is None else own.owners) + k
            if total > MAX_OWNERS:
                raise _event_error(
                    KvCacheEventVariant.OwnershipDegreeOverflow,
                    member,
                    f"canonical {_hx(c)} would reach {total} owners (> u32::MAX)",
                    canonical=c,
                    owners=total,
                )

    def _offer(self, c: int, max_kicks: int) -> bool:
        """Insert canonical ``c`` unless resident (its buckets' words before, dirty); whether it
        is resident after."""
        own = self._owners[c]
        if own.resident:
            return True
        touched = self.table.insert(c, self.rng, max_kicks)
        if touched is None:
            return False
        for bk, before in touched:
            self._dirty.setdefault(bk, before)
        own.resident = True
        self.resident_count += 1
        return True

    def remove(self, member: WorkerWithDpRank, block_hashes: Iterable[int]) -> None:
        """Remove external blocks in order; unknown ones are counted no-ops."""
        for ext in block_hashes:
            self._remove_one(member, ext)

    def _remove_one(self, member: WorkerWithDpRank, ext: int) -> None:
        lineage = self._lineage.get(member)
        if lineage is None or ext not in lineage:
            self.counters.unknown_removals += 1
            return
        c = lineage[ext]
        own = self._owners[c]
        if own.owners == 1:
            if own.resident:
                try:
                    bk, before = self.table.delete(c)
                except CkfError as exc:
                    raise _event_error(
                        KvCacheEventVariant.IndexerInvariantViolation,
                        member,
                        str(exc),
                        canonical=exc.context["item"],
                    ) from exc
                self._dirty.setdefault(bk, before)
                self.resident_count -= 1
            del self._owners[c]
        else:
            own.owners -= 1
        del lineage[ext]
        if not lineage:
            del self._lineage[member]

    def remove_member(self, member: WorkerWithDpRank) -> None:
        """Forget every block of one member (a primary-targeting Cleared); no drain."""
        lineage = self._lineage.get(member)
        if lineage is None:
            return
        for ext in list(lineage):
            self._remove_one(member, ext)

    def remove_rank(self, member: WorkerWithDpRank) -> DcCkfPublicationBatch | None:
        """``remove_member`` then drain immediately."""
        self.remove_member(member)
        return self.drain()

    def remove_worker(self, worker_id: int) -> DcCkfPublicationBatch | None:
        """Remove every dp_rank of one worker, then drain."""
        for member in sorted(m for m in self._lineage if m[0] == worker_id):
            self.remove_member(member)
        return self.drain()

    # -- publication -------------------------------------------------------------------------
    def drain(self) -> DcCkfPublicationBatch | None:
        """Ship changed dirty buckets in first-touch order; None if nothing net changed."""
        if self.pending_events == 0 and not self._dirty:
            return None
        words = self.table._words
        changed = [(bk, words[bk]) for bk, orig in self._dirty.items() if words[bk] != orig]
        self._dirty.clear()
        self.pending_events = 0
        if not changed:
            return None
        self.counters.batches_drained += 1
        self.counters.images_drained += len(changed)
        return DcCkfPublicationBatch(
            np.array([bk for bk, _ in changed], dtype=np.uint32),
            np.array([w for _, w in changed], dtype=np.uint64),
        )

    flush = drain

    def dirty_buckets(self) -> list[tuple[int, int]]:
        """The open window: ``(bucket, original word)`` in first-touch order."""
        return list(self._dirty.items())

    def barrier_snapshot(self) -> tuple[DcCkfPublicationBatch | None, npt.NDArray[np.uint64]]:
        """Copy every word first, then drain the pending tail (the copy includes its effect)."""
        words = self.table.words()
        return self.drain(), words


# ---------------------------------------------------------------------------------------------
# The publisher
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class DcCkfPublisher:
    """Numbers drained batches under a consumer lease (upstream ``DcCkfPublisher``).

    ``sink``, if given, receives each delta; an exception from it fences the publisher
    (``DeliveryUncertain``) without advancing the sequence.
    """

    identity: ProducerIdentity
    last_sequence: int = 0
    lease: LaneLease | None = None
    sink: Callable[[DcCkfDelta], None] | None = None
    fenced: str | None = None
    dropped_batches: int = field(default=0)

    def publish(self, batch: DcCkfPublicationBatch) -> DcCkfDelta | None:
        """Sequence one batch; None (dropped, ``NoSubscriber``) when there is no lease."""
        if self.fenced is not None:
            raise _publisher_fenced(self.fenced, self.last_sequence)
        if self.lease is None:
            self.dropped_batches += 1
            return None
        if self.last_sequence >= _U64:
            self.fenced = "SequenceExhausted"
            raise _publisher_fenced(self.fenced, self.last_sequence)
        delta = DcCkfDelta(
            self.identity,
            self.lease,
            self.last_sequence,
            self.last_sequence + 1,
            batch.buckets,
            batch.values,
        )
        if self.sink is not None:
            try:
                self.sink(delta)
            except Exception as exc:
                self.fenced = "DeliveryUncertain"
                raise _publisher_fenced(self.fenced, self.last_sequence) from exc
        self.last_sequence += 1
        return delta

    def snapshot_after_barrier(
        self, state: DcCkfState, new_lease: LaneLease
    ) -> tuple[DcCkfDelta | None, DcCkfSnapshot]:
        """Barrier, ship the tail under the old lease, then snapshot at N under ``new_lease``."""
        if state.format != (ours := self.identity.format):
            why = f"state format {state.format} differs from the publisher's {ours}"
            raise CkfError(CkfVariant.Usage, why, field="state", expected=ours, actual=state.format)
        tail, words = state.barrier_snapshot()
        tail_delta = None
        if self.fenced is None and tail is not None:
            try:
                tail_delta = self.publish(tail)
            except CkfError as exc:
                if exc.variant is not CkfVariant.PublisherFenced:
                    raise
                tail_delta = None
        self.lease = new_lease
        self.fenced = None
        return tail_delta, DcCkfSnapshot(self.identity, new_lease, self.last_sequence, words)

    def exact_drain_marker(self) -> ConsumerDrainMarker:
        """``(lease, last_sequence)``: what a consumer must reach to hold everything published;
        ``PublisherFenced`` ``NoSubscriber`` without a lease."""
        if self.lease is None:
            raise _publisher_fenced("NoSubscriber", self.last_sequence)
        return ConsumerDrainMarker(self.lease, self.last_sequence)


def _derive(
    member: WorkerWithDpRank,
    lineage: dict[int, int],
    prev: int | None,
    blocks: Sequence[tuple[int, int]],
) -> tuple[dict[int, int], dict[int, None], dict[int, None]]:
    """The stored blocks' canonical hashes chained from ``prev``: the new (external ->
    canonical) mappings, the canonicals to insert, and those offered again (already mapped,
    not new in this event); ``InvalidBlockSequence`` where a block is mapped to another."""
    new_map: dict[int, int] = {}
    candidates: dict[int, None] = {}
    reoffered: dict[int, None] = {}
    for ext, tokens_hash in blocks:
        c = tokens_hash if prev is None else _child(prev, tokens_hash)
        existing = lineage.get(ext)
        if existing is None:
            existing = new_map.get(ext)
        if existing is not None:
            if existing != c:
                raise _event_error(
                    KvCacheEventVariant.InvalidBlockSequence,
                    member,
                    f"block {_hx(ext)} is mapped to canonical {_hx(existing)}, "
                    f"this event derives {_hx(c)}",
                    block_hash=ext,
                    existing=existing,
                    computed=c,
                )
            reoffered[c] = None
        else:
            new_map[ext] = c
            candidates[c] = None
        prev = c
    for c in candidates:
        reoffered.pop(c, None)
    return new_map, candidates, reoffered

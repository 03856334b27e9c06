"""Producer: validation all-or-nothing, ownership, dirty window, publisher sequencing/fencing."""

from __future__ import annotations

import numpy as np
import pytest
from errorcheck import raises_variant
from hypothesis import given, settings, strategies as st

from cbi1kit.ckf._lane import DcCkfDelta
from cbi1kit.ckf._producer import (
    CkfConfig,
    DcCkfPublisher,
    DcCkfState,
    KvCleared,
    KvRemoved,
    KvStored,
    Ownership,
    StorageTier,
    StoredBlock,
    canonical_chain,
)
from cbi1kit.errors import CkfError
from cbi1kit.hashing._identity import LaneLease, ProducerIdentity
from cbi1kit.hashing._pools import (
    CacheSemanticsId,
    DcId,
    IdentitySource,
    IndexerDomainId,
    PoolId,
    RoutingScopeId,
)

W = (1, 0)  # member (worker 1, dp_rank 0)


def blocks(*pairs: tuple[int, int]) -> tuple[StoredBlock, ...]:
    return tuple(StoredBlock(e, t) for e, t in pairs)


def state(expected: int = 64, **kw: int) -> DcCkfState:
    return DcCkfState(CkfConfig(expected, **kw))


@pytest.mark.parametrize(
    ("kwargs", "variant"),
    [
        ({"max_kicks": 0}, "InvalidMaxKicks"),
        ({"max_kicks": 4097}, "InvalidMaxKicks"),
        ({"verification_window": 0}, "InvalidVerificationWindow"),
        ({"verification_window": 9}, "InvalidVerificationWindow"),
        ({"publish_every_n_events": 0}, "InvalidPublishCadence"),
        ({"seed": -1}, "InvalidSeed"),
    ],
)
def test_config_validation(kwargs: dict[str, int], variant: str) -> None:
    with raises_variant(CkfError, "Config") as info:
        CkfConfig(1, **kwargs)  # type: ignore[arg-type]
    assert info.value.subvariant == variant


def test_config_defaults() -> None:
    c = CkfConfig()
    assert (c.seed, c.max_kicks, c.verification_window, c.publish_every_n_events) == (
        0x5DEECE66D1B54A33,
        500,
        2,
        1,
    )
    assert CkfConfig(1, max_kicks=4096).max_kicks == 4096


def _populated() -> DcCkfState:
    s = state(publish_every_n_events=1000)
    s.apply(KvStored(1, blocks((10, 100), (11, 101), (12, 102))))
    s.apply(KvStored(2, blocks((20, 100), (21, 101))))
    return s


@pytest.mark.parametrize(
    ("event", "variant"),
    [
        (KvStored(1, blocks((30, 5)), parent_hash=999), "ParentBlockNotFound"),
        # parent known to another member only
        (KvStored(1, blocks((30, 5)), parent_hash=20), "ParentBlockNotFound"),
        (KvStored(1, blocks((30, 5)), start_position=3), "InvalidBlockSequence"),
        # block 10 already maps to root(100); here it would be root(7)
        (KvStored(1, blocks((40, 6), (10, 7))), "InvalidBlockSequence"),
        # the same external twice in one batch with different canonicals
        (KvStored(1, blocks((50, 8), (50, 9))), "InvalidBlockSequence"),
    ],
)
def test_validation_errors_are_all_or_nothing(event: KvStored, variant: str) -> None:
    s = _populated()
    before = s.export_state()
    outcome = s.apply(event)
    assert outcome.applied
    assert outcome.error is not None
    assert outcome.error.variant == variant
    assert outcome.error.member == (event.worker_id, event.dp_rank)
    assert s.export_state() == before


def test_start_position_zero_without_parent_is_fine() -> None:
    s = state()
    assert s.apply(KvStored(1, blocks((1, 1)), start_position=0)).error is None


def test_ownership_overflow_is_checked_before_commit() -> None:
    s = _populated()
    c = canonical_chain([100])[0]
    s._owners[c] = Ownership(0xFFFF_FFFF, True)
    before = s.export_state()
    outcome = s.apply(KvStored(3, blocks((1, 100), (2, 55))))
    assert outcome.error is not None
    assert outcome.error.variant == "OwnershipDegreeOverflow"
    assert s.export_state() == before


def test_chained_store_uses_parent_canonical() -> None:
    s = state()
    s.apply(KvStored(1, blocks((10, 100), (11, 101))))
    s.apply(KvStored(1, blocks((12, 102)), parent_hash=11))
    assert s.lineage(W) == dict(zip([10, 11, 12], canonical_chain([100, 101, 102]), strict=True))


def test_ownership_counts_aliases_and_residency() -> None:
    s = state()
    c = canonical_chain([100])[0]
    s.apply(KvStored(1, blocks((10, 100))))
    s.apply(KvStored(1, blocks((11, 100))))  # alias in the same member: a second owner
    s.apply(KvStored(2, blocks((20, 100))))
    assert s.ownership(c) == Ownership(3, True)
    assert s.resident_count == 1
    assert int(np.count_nonzero(s.words())) == 1
    s.apply(KvRemoved(1, (10,)))
    s.apply(KvRemoved(2, (20,)))
    assert s.ownership(c) == Ownership(1, True)
    assert np.count_nonzero(s.words()) == 1
    s.apply(KvRemoved(1, (11,)))
    assert s.ownership(c) is None
    assert s.resident_count == 0
    assert not s.words().any()
    assert s.members() == []


def test_unknown_removal_is_a_counted_noop() -> None:
    s = _populated()
    before = s.export_state()
    s.apply(KvRemoved(1, (999,)))
    s.apply(KvRemoved(7, (10,)))  # known external, wrong member
    assert s.unknown_removals == 2
    assert s.export_state() == before


def test_non_primary_events_are_ignored_and_not_counted() -> None:
    s = state(publish_every_n_events=2)
    out = s.apply(KvStored(1, blocks((1, 1)), storage_tier=StorageTier.HOST_PINNED))
    assert not out.applied
    assert s.pending_events == 0
    assert not s.words().any()
    assert not s.apply(KvCleared(1, residency_domain="cache_owner")).applied
    bad = s.apply(KvCleared(1, residency_domain="mystery"))
    assert bad.error is not None
    assert bad.error.variant == "UnsupportedResidencyDomain"
    assert s.pending_events == 0


def test_cleared_removes_only_that_rank() -> None:
    s = state()
    s.apply(KvStored(1, blocks((10, 100)), dp_rank=0))
    s.apply(KvStored(1, blocks((10, 200)), dp_rank=1))
    s.apply(KvCleared(1, dp_rank=0))
    assert s.members() == [(1, 1)]
    assert s.resident_count == 1


def test_remove_worker_and_rank_drain_immediately() -> None:
    s = state(publish_every_n_events=100)
    s.apply(KvStored(1, blocks((10, 100)), dp_rank=0))
    s.apply(KvStored(1, blocks((11, 101)), dp_rank=1))
    s.apply(KvStored(2, blocks((20, 102))))
    s.drain()
    batch = s.remove_rank((2, 0))
    assert batch is not None
    assert len(batch) == 1
    assert batch.values.tolist() == [int(s.words()[batch.buckets[0]])]
    batch = s.remove_worker(1)
    assert batch is not None
    assert s.members() == []
    assert not s.words().any()
    assert set(batch.values.tolist()) <= {0} | set(s.words().tolist())


def test_capacity_failure_keeps_lineage_and_reoffer_admits_later() -> None:
    s = DcCkfState(CkfConfig(1))  # 2 buckets, 8 slots
    for t in range(1, 9):
        s.apply(KvStored(1, blocks((t, t))))
    out = s.apply(KvStored(1, blocks((9, 9))))
    assert out.error is not None
    assert out.error.variant == "CapacityExhausted"
    assert out.error.canonicals == (9,)  # type: ignore[attr-defined]
    assert s.ownership(9) == Ownership(1, False)
    assert s.lineage(W)[9] == 9
    assert s.capacity_failures == 1
    # repeat store while full: a silent re-offer, not counted again
    rng_before = s.rng.state
    assert s.apply(KvStored(1, blocks((9, 9)))).error is None
    assert s.capacity_failures == 1
    assert s.rng.state != rng_before  # the re-offer consumed its one draw
    # free room, re-offer again: now it becomes resident
    s.apply(KvRemoved(1, (1, 2)))
    s.apply(KvStored(1, blocks((9, 9))))
    assert s.ownership(9) == Ownership(1, True)


def test_dirty_window_first_touch_original_and_order() -> None:
    s = state(publish_every_n_events=100)
    s.apply(KvStored(1, blocks((10, 100))))
    s.apply(KvStored(1, blocks((11, 101))))
    window = s.dirty_buckets()
    assert all(orig == 0 for _, orig in window)  # first-touch originals, not later values
    batch = s.drain()
    assert batch is not None
    assert batch.buckets.dtype == np.uint32
    assert batch.values.dtype == np.uint64
    assert batch.buckets.tolist() == [bk for bk, _ in window]  # first-touch order
    assert batch.values.tolist() == [int(s.words()[bk]) for bk, _ in window]
    assert s.drain() is None


def test_net_reversion_is_dropped_from_the_batch() -> None:
    s = state(publish_every_n_events=100)
    s.apply(KvStored(1, blocks((10, 100))))
    s.drain()
    w0 = s.words()
    s.apply(KvStored(1, blocks((11, 101))))  # will be reverted
    s.apply(KvStored(1, blocks((12, 102))))  # stays
    s.apply(KvRemoved(1, (11,)))
    touched = [bk for bk, _ in s.dirty_buckets()]
    batch = s.drain()
    assert batch is not None
    changed = set(np.flatnonzero(s.words() != w0).tolist())
    assert set(batch.buckets.tolist()) == changed
    assert len(touched) > len(batch)  # a touched bucket was dropped as a net reversion
    assert batch.buckets.tolist() == [bk for bk in touched if bk in changed]
    # a pure reversion yields no batch at all
    s.apply(KvStored(1, blocks((13, 103))))
    s.apply(KvRemoved(1, (13,)))
    assert s.dirty_buckets()
    assert s.drain() is None


def test_cadence_counts_noop_and_failed_events() -> None:
    s = state(publish_every_n_events=3)
    assert s.apply(KvStored(1, blocks((10, 100)))).batch is None
    assert s.apply(KvRemoved(1, (999,))).batch is None
    out = s.apply(KvStored(1, blocks((1, 1)), parent_hash=12345))  # rejected, still counted
    assert out.error is not None
    assert out.batch is not None
    assert s.pending_events == 0


def test_barrier_snapshot_copy_includes_tail() -> None:
    s = state(publish_every_n_events=100)
    s.apply(KvStored(1, blocks((10, 100))))
    tail, words = s.barrier_snapshot()
    assert tail is not None
    assert words.tolist() == s.words().tolist()
    for bk, v in tail.images():
        assert int(words[bk]) == v


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40)), max_size=120))
def test_replaying_batches_reproduces_words(ops: list[tuple[int, int]]) -> None:
    s = state(expected=16, publish_every_n_events=2)
    replica = s.words()
    for kind, x in ops:
        ev = KvStored(x % 3, blocks((x, x * 7 + 1))) if kind < 2 else KvRemoved(x % 3, (x,))
        out = s.apply(ev)
        if out.batch is not None:
            replica[out.batch.buckets.astype(np.intp)] = out.batch.values
    tail = s.drain()
    if tail is not None:
        replica[tail.buckets.astype(np.intp)] = tail.values
    assert replica.tolist() == s.words().tolist()
    occupied = sum(1 for w in s.words().tolist() for k in range(4) if (w >> (16 * k)) & 0xFFFF)
    assert occupied == s.resident_count


# -- publisher ---------------------------------------------------------------------------------


def _publisher(s: DcCkfState, **kw: object) -> DcCkfPublisher:
    pool_id = PoolId(
        IndexerDomainId(
            CacheSemanticsId(b"\x05" * 16, IdentitySource.EXPLICIT),
            RoutingScopeId(b"\x00" * 16, IdentitySource.EXPLICIT),
        ),
        DcId(5),
    )
    identity = ProducerIdentity(
        pool_id=pool_id, producer_incarnation=1, layout_generation=1, format=s.format
    )
    return DcCkfPublisher(identity, **kw)  # type: ignore[arg-type]


def test_publisher_sequencing_and_snapshot_after_barrier() -> None:
    s = state(publish_every_n_events=100)
    pub = _publisher(s)
    s.apply(KvStored(1, blocks((10, 100))))
    batch = s.drain()
    assert batch is not None
    assert pub.publish(batch) is None  # no lease: dropped, sequence unchanged
    assert pub.last_sequence == 0
    lease1 = LaneLease(9, 0, 1)
    s.apply(KvStored(1, blocks((11, 101))))
    tail, snap = pub.snapshot_after_barrier(s, lease1)
    assert tail is None  # the old lease was absent: the tail is not sequenced
    assert snap.sequence == 0
    assert snap.lease == lease1
    s.apply(KvStored(1, blocks((12, 102))))
    d = pub.publish(s.drain())  # type: ignore[arg-type]
    assert d is not None
    assert (d.base_sequence, d.sequence, d.lease) == (0, 1, lease1)
    # a new barrier with a pending tail: the tail goes out under the OLD lease as N-1 → N
    s.apply(KvStored(1, blocks((13, 103))))
    lease2 = LaneLease(9, 0, 2)
    tail, snap = pub.snapshot_after_barrier(s, lease2)
    assert tail is not None
    assert (tail.base_sequence, tail.sequence, tail.lease) == (1, 2, lease1)
    assert (snap.sequence, snap.lease) == (2, lease2)
    assert pub.exact_drain_marker().expected_sequence == 2
    s.apply(KvStored(1, blocks((14, 104))))
    d = pub.publish(s.drain())  # type: ignore[arg-type]
    assert d is not None
    assert (d.base_sequence, d.sequence, d.lease) == (2, 3, lease2)


def test_sink_failure_fences_until_barrier() -> None:
    s = state(publish_every_n_events=100)
    fail = [True]
    sent: list[DcCkfDelta] = []

    def sink(delta: DcCkfDelta) -> None:
        if fail[0]:
            raise OSError("link down")
        sent.append(delta)

    pub = _publisher(s, sink=sink)
    pub.snapshot_after_barrier(s, LaneLease(1, 0, 1))
    s.apply(KvStored(1, blocks((10, 100))))
    batch = s.drain()
    assert batch is not None
    with raises_variant(CkfError, "PublisherFenced") as info:
        pub.publish(batch)
    assert info.value.reason == "DeliveryUncertain"
    assert pub.last_sequence == 0
    with raises_variant(CkfError, "PublisherFenced"):
        pub.publish(batch)
    fail[0] = False
    _, snap = pub.snapshot_after_barrier(s, LaneLease(1, 0, 2))
    assert pub.fenced is None
    assert snap.sequence == 0
    assert snap.buckets.tolist() == s.words().tolist()


def test_sequence_exhaustion_fences() -> None:
    s = state()
    pub = _publisher(s, last_sequence=2**64 - 1, lease=LaneLease(1, 0, 1))
    batch = s.apply(KvStored(1, blocks((10, 100)))).batch
    assert batch is not None
    with raises_variant(CkfError, "PublisherFenced") as info:
        pub.publish(batch)
    assert info.value.reason == "SequenceExhausted"

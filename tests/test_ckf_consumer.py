"""Consumer: lane-ingestor rules (each test fails if its rule is broken), probes, search."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from errorcheck import raises_variant
from hypothesis import given, settings, strategies as st

from cbi1kit.ckf._consumer import (
    CkfLaneTable,
    find_prefix_depths,
    linear_prefix_depths,
    sequence_hashes,
)
from cbi1kit.ckf._lane import DcCkfDelta, DcCkfSnapshot, IngestOutcome
from cbi1kit.ckf._producer import (
    CkfConfig,
    DcCkfPublisher,
    DcCkfState,
    KvStored,
    StoredBlock,
    canonical_chain,
)
from cbi1kit.ckf._stats import (
    FprMeasurement,
    estimated_false_positive_rate,
    lane_stats,
    measure_false_positive_rate,
    producer_stats,
)
from cbi1kit.errors import LaneError
from cbi1kit.hashing._identity import ConsumerDrainMarker, LaneLease, ProducerIdentity
from cbi1kit.hashing._pools import (
    CacheSemanticsId,
    DcId,
    IdentitySource,
    IndexerDomainId,
    PoolId,
    RoutingScopeId,
)
from cbi1kit.hashing._xxh3 import xxh3_64_u64_pair


def domain(n: int) -> IndexerDomainId:
    """A distinct indexer domain per ``n`` (explicit digests)."""
    return IndexerDomainId(
        CacheSemanticsId(bytes([n]) * 16, IdentitySource.EXPLICIT),
        RoutingScopeId(b"\x00" * 16, IdentitySource.EXPLICIT),
    )


def pool(n: int, dc: int | None = None) -> PoolId:
    """A pool of domain ``n`` in DC ``dc`` (default ``n``: a distinct pool per ``n``)."""
    return PoolId(domain(n), DcId(n if dc is None else dc))


CONFIG = CkfConfig(64, seed=0x5EED)
FORMAT = CONFIG.format()
NB = FORMAT.bucket_count  # 32
IDENT = ProducerIdentity(
    pool_id=pool(3), producer_incarnation=1, layout_generation=1, format=FORMAT
)
LEASE = LaneLease(consumer_instance=7, physical_lane=2, assignment_epoch=1)


def _ready():  # type: ignore[no-untyped-def]
    table = CkfLaneTable(FORMAT)
    rep = table.replica(2)
    rep.assign(IDENT, LEASE)
    words = np.zeros(FORMAT.bucket_count, dtype=np.uint64)
    words[5] = 0x1234
    assert rep.install_snapshot(DcCkfSnapshot(IDENT, LEASE, 4, words)) is (
        IngestOutcome.SNAPSHOT_INSTALLED
    )
    return table, rep


def _delta(base: int, seq: int, images: list[tuple[int, int]], **kw: object) -> DcCkfDelta:
    return DcCkfDelta(
        kw.get("identity", IDENT),  # type: ignore[arg-type]
        kw.get("lease", LEASE),  # type: ignore[arg-type]
        base,
        seq,
        np.array([b for b, _ in images], dtype=np.uint32),
        np.array([v for _, v in images], dtype=np.uint64),
    )


def test_snapshot_then_delta_applies() -> None:
    table, rep = _ready()
    assert rep.ready
    assert rep.installed_sequence == 4
    assert rep.apply_delta(_delta(4, 5, [(5, 0), (9, 77)])) is IngestOutcome.DELTA_APPLIED
    assert rep.installed_sequence == 5
    assert table.lane_words(2)[[5, 9]].tolist() == [0, 77]
    assert table.ready_mask() == 1 << 2


def test_foreign_lease_is_ignored() -> None:
    table, rep = _ready()
    other = LaneLease(7, 2, 99)
    assert rep.apply_delta(_delta(4, 5, [(1, 1)], lease=other)) is (
        IngestOutcome.IGNORED_FOREIGN_LEASE
    )
    assert rep.ready
    assert rep.installed_sequence == 4
    assert int(table.lane_words(2)[1]) == 0


@pytest.mark.parametrize("seq", [3, 4])
def test_stale_or_duplicate_delta_is_ignored(seq: int) -> None:
    table, rep = _ready()
    assert rep.apply_delta(_delta(seq - 1, seq, [(1, 1)])) is (
        IngestOutcome.IGNORED_STALE_OR_DUPLICATE
    )
    assert rep.ready
    assert int(table.lane_words(2)[1]) == 0


def test_stale_snapshot_is_ignored() -> None:
    _, rep = _ready()
    words = np.ones(FORMAT.bucket_count, dtype=np.uint64)
    assert rep.install_snapshot(DcCkfSnapshot(IDENT, LEASE, 4, words)) is (
        IngestOutcome.IGNORED_STALE_OR_DUPLICATE
    )
    assert rep.ready
    assert int(rep.words[0]) == 0


@pytest.mark.parametrize(
    ("delta", "variant"),
    [
        (_delta(5, 6, [(1, 1)]), "BaseSequenceMismatch"),  # gap
        (_delta(4, 6, [(1, 1)]), "SequenceStep"),
        (_delta(4, 5, []), "EmptyDelta"),
        (_delta(4, 5, [(NB, 1)]), "BucketIndex"),
        (_delta(4, 5, [(1, 1), (1, 2)]), "DuplicateBucket"),
        (
            _delta(4, 5, [(1, 1)], identity=ProducerIdentity(pool(3), 2, 1, FORMAT)),
            "IdentityMismatch",
        ),
    ],
)
def test_delta_faults_clear_readiness(delta: DcCkfDelta, variant: str) -> None:
    table, rep = _ready()
    before = table.lane_words(2)
    with raises_variant(LaneError, "Fault") as info:
        rep.apply_delta(delta)
    assert info.value.subvariant == variant
    assert not rep.ready
    assert table.ready_mask() == 0
    assert table.lane_words(2).tolist() == before.tolist()
    with raises_variant(LaneError, "AwaitingSnapshot"):
        rep.apply_delta(_delta(4, 5, [(1, 1)]))


def test_snapshot_faults() -> None:
    _, rep = _ready()
    with raises_variant(LaneError, "Fault") as info:
        rep.install_snapshot(DcCkfSnapshot(IDENT, LEASE, 9, np.zeros(NB, dtype=np.uint64)))
    assert info.value.subvariant == "SnapshotWhileReady"
    assert not rep.ready
    # recovery needs a new lease + snapshot; a wrong-length snapshot faults
    lease2 = LaneLease(7, 2, 2)
    rep.assign(IDENT, lease2)
    with raises_variant(LaneError, "Fault") as info:
        rep.install_snapshot(DcCkfSnapshot(IDENT, lease2, 9, np.zeros(NB // 2, dtype=np.uint64)))
    assert info.value.subvariant == "BucketCount"
    ok = rep.install_snapshot(DcCkfSnapshot(IDENT, lease2, 9, np.zeros(NB, dtype=np.uint64)))
    assert ok is IngestOutcome.SNAPSHOT_INSTALLED


def test_assign_rules() -> None:
    """Upstream ``validate_assignment``: each broken rule is its GlobalCkfAssignmentError."""
    table = CkfLaneTable(FORMAT)
    rep = table.replica(2, consumer_instance=7, pool_id=pool(3))
    rep.assign(IDENT, LEASE)
    with raises_variant(LaneError, "Assignment.StaleAssignmentEpoch"):
        rep.assign(IDENT, LEASE)
    with raises_variant(LaneError, "Assignment.WrongPhysicalLane"):
        rep.assign(IDENT, LaneLease(7, 3, 5))
    with raises_variant(LaneError, "Assignment.WrongConsumerInstance"):
        rep.assign(IDENT, LaneLease(8, 2, 5))
    with raises_variant(LaneError, "Assignment.WrongLaneOwner"):
        rep.assign(ProducerIdentity(pool(4), 1, 1, FORMAT), LaneLease(7, 2, 5))
    other_format = CkfConfig(64, seed=1).format()
    with raises_variant(LaneError, "Assignment.WrongFormat"):
        rep.assign(ProducerIdentity(pool(3), 1, 1, other_format), LaneLease(7, 2, 5))
    assert rep.lease == LEASE  # a refused assignment changes nothing


def test_manifest_rules() -> None:
    """Upstream ``GlobalCkfManifest::new``: one indexer domain, no pool twice, a lane in 0..16,
    at least one lane; a replica only on a configured lane (``claim_lane``)."""
    with raises_variant(LaneError, "Manifest.MixedIndexerDomain") as info:
        CkfLaneTable(FORMAT, pools={0: pool(1, 10), 1: pool(2, 11)})
    assert info.value.lane == 1
    with raises_variant(LaneError, "Manifest.MixedIndexerDomain"):
        CkfLaneTable(FORMAT, pools={0: pool(1, 10)}, indexer_domain=domain(2))
    with raises_variant(LaneError, "Manifest.DuplicatePool"):
        CkfLaneTable(FORMAT, pools={0: pool(1, 10), 5: pool(1, 10)})
    with raises_variant(LaneError, "Manifest.InvalidLane"):
        CkfLaneTable(FORMAT, pools={16: pool(1, 10)})
    with raises_variant(LaneError, "Manifest.NoConfiguredLanes"):
        CkfLaneTable(FORMAT, pools={})
    with raises_variant(LaneError, "Manifest.NoConfiguredLanes"):
        CkfLaneTable(FORMAT, 0)
    table = CkfLaneTable(FORMAT, pools={0: pool(1, 10), 3: pool(1, 13)})
    assert table.configured_lanes == 0b1001 and table.indexer_domain == domain(1)
    with raises_variant(LaneError, "Manifest.UnconfiguredLane"):
        table.replica(1)
    with raises_variant(LaneError, "Manifest.InvalidLane"):
        table.replica(16)
    rep = table.replica(3)
    assert rep.pool_id == pool(1, 13)
    with raises_variant(LaneError, "Assignment.WrongLaneOwner"):
        rep.assign(ProducerIdentity(pool(1, 10), 1, 1, FORMAT), LaneLease(1, 3, 1))


def test_lanes_named_by_their_first_assignment_keep_the_manifest_rules() -> None:
    """Without pools up front a lane takes the pool of its first valid assignment, under the
    manifest's rules; a refused assignment binds nothing."""
    table = CkfLaneTable(FORMAT)
    table.replica(0).assign(ProducerIdentity(pool(1, 10), 1, 1, FORMAT), LaneLease(1, 0, 1))
    second = table.replica(1)
    with raises_variant(LaneError, "Manifest.MixedIndexerDomain"):
        second.assign(ProducerIdentity(pool(2, 11), 1, 1, FORMAT), LaneLease(1, 1, 1))
    with raises_variant(LaneError, "Manifest.DuplicatePool"):
        second.assign(ProducerIdentity(pool(1, 10), 1, 1, FORMAT), LaneLease(1, 1, 1))
    other_format = CkfConfig(64, seed=1).format()
    with raises_variant(LaneError, "Assignment.WrongFormat"):
        second.assign(ProducerIdentity(pool(1, 11), 1, 1, other_format), LaneLease(1, 1, 1))
    assert second.pool_id is None and second.lease is None and 1 not in table.pools
    second.assign(ProducerIdentity(pool(1, 11), 1, 1, FORMAT), LaneLease(1, 1, 1))
    assert table.pools == {0: pool(1, 10), 1: pool(1, 11)}
    with raises_variant(LaneError, "Assignment.WrongLaneOwner"):  # the lane keeps its pool
        second.assign(ProducerIdentity(pool(1, 12), 1, 1, FORMAT), LaneLease(1, 1, 2))
    second.assign(ProducerIdentity(pool(1, 11), 2, 2, FORMAT), LaneLease(1, 1, 2))  # new generation


def test_drain_marker() -> None:
    _, rep = _ready()
    rep.check_drain_marker(ConsumerDrainMarker(LEASE, 4))
    with raises_variant(LaneError, "Fault"):
        rep.check_drain_marker(ConsumerDrainMarker(LEASE, 5))
    assert not rep.ready


def test_sequence_hashes_match_vectorised_chain_step() -> None:
    rng = np.random.default_rng(1)
    local = rng.integers(0, 2**64, size=20, dtype=np.uint64)
    seq = sequence_hashes(local)
    assert int(seq[0]) == int(local[0])
    assert seq[1:].tolist() == xxh3_64_u64_pair(seq[:-1], local[1:], 1337).tolist()


def test_producer_to_consumer_end_to_end_and_probe() -> None:
    s = DcCkfState(CONFIG)
    pub = DcCkfPublisher(IDENT)
    table = CkfLaneTable(FORMAT)
    rep = table.replica(2)
    rep.assign(IDENT, LEASE)
    locals_ = [101, 102, 103, 104, 105, 106]
    s.apply(KvStored(1, tuple(StoredBlock(i, t) for i, t in enumerate(locals_[:3]))))
    _, snap = pub.snapshot_after_barrier(s, LEASE)
    rep.install_snapshot(snap)
    batch = s.apply(
        KvStored(1, tuple(StoredBlock(10 + i, t) for i, t in enumerate(locals_[3:])), parent_hash=2)
    ).batch
    assert batch is not None
    delta = pub.publish(batch)
    assert delta is not None
    assert rep.apply_delta(delta) is IngestOutcome.DELTA_APPLIED
    assert table.lane_words(2).tolist() == s.words().tolist()
    masks = table.probe_many(sequence_hashes(locals_)).tolist()
    assert masks == [1 << 2] * 6
    assert [table.probe_hash(c) for c in canonical_chain(locals_)] == masks
    assert table.find_prefix_matches(locals_) == {2: 6}
    assert table.find_prefix_matches([*locals_[:2], 999]) == {2: 2}


@settings(max_examples=200, deadline=None)
@given(
    depths=st.lists(st.integers(0, 70), min_size=1, max_size=16),
    n=st.integers(0, 70),
    window=st.integers(1, 8),
)
def test_search_equals_linear_without_holes(depths: list[int], n: int, window: int) -> None:
    lanes = len(depths)

    def membership(p: int) -> int:
        return sum(1 << lane for lane, d in enumerate(depths) if p < d)

    mask = (1 << lanes) - 1
    assert find_prefix_depths(n, mask, window, membership, lanes=lanes) == linear_prefix_depths(
        n, mask, membership, lanes=lanes
    )


@settings(max_examples=200, deadline=None)
@given(
    depths=st.lists(st.integers(0, 70), min_size=1, max_size=16),
    n=st.integers(1, 70),
    fps=st.sets(st.tuples(st.integers(0, 15), st.integers(0, 69)), max_size=6),
)
def test_false_positives_only_inflate(depths: list[int], n: int, fps: set[tuple[int, int]]) -> None:
    """False positives beyond the true prefix can only raise a depth, never lower it."""
    lanes = len(depths)

    def membership(p: int) -> int:
        exact = sum(1 << lane for lane, d in enumerate(depths) if p < d)
        return exact | sum(1 << lane for lane, q in fps if q == p and lane < lanes)

    mask = (1 << lanes) - 1
    got = find_prefix_depths(n, mask, 2, membership, lanes=lanes)
    linear = linear_prefix_depths(n, mask, membership, lanes=lanes)
    assert all(g >= lin for g, lin in zip(got, linear, strict=True))
    assert all(g <= n for g in got)


def test_search_equals_linear_on_real_lanes_with_false_positives() -> None:
    """16 lanes of real words at high load (so false positives occur) and hole-free prefixes."""
    rng = np.random.default_rng(2024)
    config = CkfConfig(1024, seed=0x5EED)  # 512 buckets
    fmt = config.format()
    table = CkfLaneTable(fmt)
    queries = [rng.integers(1, 2**63, size=64, dtype=np.uint64).tolist() for _ in range(40)]
    for lane in range(16):
        ident = ProducerIdentity(pool(1, 100 + lane), 1, 1, fmt)  # one domain, a DC per lane
        s = DcCkfState(config)
        for qi, q in enumerate(queries):
            k = int(rng.integers(0, 65))
            chain = tuple(StoredBlock(qi * 1000 + x, int(t)) for x, t in enumerate(q[:k]))
            outcome = s.apply(KvStored(1, chain))
            assert outcome.error is None or outcome.error.variant == "CapacityExhausted"
        # fill to high load with unrelated roots: injects false positives
        for j in range(300):
            s.apply(KvStored(2, (StoredBlock(j, int(rng.integers(1, 2**63))),)))
        rep = table.replica(lane)
        lease = LaneLease(1, lane, 1)
        rep.assign(ident, lease)
        rep.install_snapshot(DcCkfSnapshot(ident, lease, 1, s.words()))
    mismatch_seen = 0
    for q in queries:
        masks = table.probe_many(sequence_hashes(q)).tolist()
        linear = linear_prefix_depths(64, 0xFFFF, masks.__getitem__)
        got = find_prefix_depths(64, 0xFFFF, 2, masks.__getitem__)
        # masks with holes may legitimately differ (advisory search); hole-free ones must agree
        for lane in range(16):
            bits = [(m >> lane) & 1 for m in masks]
            hole_free = all(bits[i] >= bits[i + 1] for i in range(63))
            if hole_free:
                assert got[lane] == linear[lane]
            else:
                mismatch_seen += got[lane] != linear[lane]
    stats = lane_stats(table.lane_words(0), addressing=table.addressing, fpr_probes=200_000, seed=1)
    assert stats.load_factor > 0.3
    assert stats.measured_fpr is not None
    assert stats.measured_fpr < 5 * stats.estimated_fpr + 1e-4


def test_stats_vocabulary() -> None:
    s = DcCkfState(CkfConfig(800, seed=3))  # 256 buckets, load ≈ 0.78
    for i in range(800):
        s.apply(KvStored(1, (StoredBlock(i, i * 2654435761 + 1),)))
    st_ = producer_stats(s, fpr_probes=100_000, seed=5)
    assert st_.buckets == 256
    assert st_.slots == 1024
    assert st_.occupied_slots == st_.resident_items == s.resident_count
    assert st_.load_factor == pytest.approx(st_.occupied_slots / 1024)
    assert st_.owners == 800
    assert st_.inserts == s.resident_count
    assert st_.bits_per_item == pytest.approx(64 * 256 / s.resident_count)
    assert st_.estimated_fpr == pytest.approx(8 * st_.load_factor * 65538 / 2**32)
    assert estimated_false_positive_rate(0.8) == pytest.approx(9.8e-5, rel=0.01)
    assert st_.measured_fpr is not None
    assert abs(st_.measured_fpr - st_.estimated_fpr) < 6e-5


def test_measured_fpr_counts_distinct_probes_and_carries_its_interval() -> None:
    s = DcCkfState(CkfConfig(800, seed=3))
    for i in range(800):
        s.apply(KvStored(1, (StoredBlock(i, i * 2654435761 + 1),)))
    resident = s.resident_canonicals()
    got = measure_false_positive_rate(s.words(), s.addressing, 50_000, 9, resident)
    # 50,000 random u64s are distinct and not resident (a collision is ~2^-33 likely)
    assert got.probes == 50_000
    again = measure_false_positive_rate(s.words(), s.addressing, 50_000, 9, resident)
    assert again == got  # seeded
    low, high = got.interval
    assert low <= got.rate <= high
    assert producer_stats(s, fpr_probes=50_000, seed=9).fpr == got
    figures = producer_stats(s, fpr_probes=50_000, seed=9).as_dict()
    assert figures["fpr_probes"] == 50_000 and figures["false_positives"] == got.false_positives
    assert (figures["measured_fpr_low"], figures["measured_fpr_high"]) == (low, high)
    assert "fpr" not in figures and "fpr_probes" not in lane_stats(s.words()).as_dict()


def test_wilson_interval() -> None:
    """Its closed form at k = 0 (upper bound z²/(n+z²)) and symmetry k <-> n-k; then its
    coverage: over seeded binomial draws the interval holds p about 95 % of the time."""
    z2 = 1.959963984540054**2
    assert FprMeasurement(0, 100).interval == (0.0, pytest.approx(z2 / (100 + z2)))
    low, high = FprMeasurement(3, 40).interval
    mirror = FprMeasurement(37, 40).interval
    assert (low, high) == (pytest.approx(1 - mirror[1]), pytest.approx(1 - mirror[0]))
    assert FprMeasurement(0, 0).interval == (0.0, 1.0)
    rng = np.random.default_rng(14)
    for p, n in ((6e-5, 200_000), (1e-4, 50_000), (0.3, 40)):
        draws = rng.binomial(n, p, size=4000)
        held = [lo <= p <= hi for lo, hi in (FprMeasurement(int(k), n).interval for k in draws)]
        assert 0.92 < np.mean(held) < 0.985, (p, n, np.mean(held))


def test_fpr_against_an_estimate_says_where_it_falls() -> None:
    inside = FprMeasurement(14, 200_000)  # 7e-5, interval ≈ [4.2e-5, 1.2e-4]
    assert "inside" in inside.against(6e-5)
    assert "below the interval" in inside.against(1e-5)
    assert "above the interval" in inside.against(5e-4)
    assert "7.0× the estimate" in inside.against(1e-5)
    assert "14 false positives in 200,000 distinct absent probes" in str(inside)


def _first_power_of_two_at_least(d: int) -> int:
    return 1 << max(d - 1, 0).bit_length()


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 96), window=st.sampled_from([1, 2, 4, 8]), data=st.data())
def test_search_equals_linear_on_hole_free_masks_with_false_positives(
    n: int, window: int, data: st.DataObject
) -> None:
    """Hole-free true prefixes plus injected false-positive bits beyond them (ckf.md §5.2).

    Per lane with true depth ``d`` (bits set at ``0..d``, clear at ``d``), ``linear`` is ``d``.
    The search can only land on a hit it probes, and it never probes at or beyond the first
    sampled miss ``P`` (the first power of two ``>= d`` when ``P < n``, else ``n``). A false
    positive in ``(d, d + W)`` is harmless: the verification window ``[upper - W, upper)`` then
    still contains ``d`` and stops there. So equality is guaranteed whenever no false positive
    sits at ``P`` itself (that would extend the exponential phase) and every one in ``(d, P)``
    lies in ``(d, d + W)``; false positives beyond ``P`` are never probed. With false positives
    anywhere, the search may only over-report (never below ``linear``).
    """
    lanes = data.draw(st.integers(1, 16))
    masks = [0] * n
    free_masks = [0] * n  # same prefixes, false positives anywhere beyond d
    for lane in range(lanes):
        d = data.draw(st.integers(0, n))
        for p in range(d):
            masks[p] |= 1 << lane
            free_masks[p] |= 1 << lane
        if d >= n:
            continue
        big_p = _first_power_of_two_at_least(d) if d else 0
        if d == 0:
            allowed = list(range(1, n))  # an inactive lane stays 0 whatever follows
        else:
            near = range(d + 1, min(d + window, n))
            far = range(big_p + 1, n) if big_p < n else range(0)
            allowed = sorted((set(near) | set(far)) - {big_p})  # a hit at P extends sampling
        for p in data.draw(st.lists(st.sampled_from(allowed), max_size=8)) if allowed else []:
            masks[p] |= 1 << lane
        for p in data.draw(st.lists(st.integers(d + 1, n - 1), max_size=8)) if d + 1 < n else []:
            free_masks[p] |= 1 << lane
    mask = (1 << lanes) - 1
    linear = linear_prefix_depths(n, mask, masks.__getitem__, lanes=lanes)
    got = find_prefix_depths(n, mask, window, masks.__getitem__, lanes=lanes)
    assert got == linear
    linear_free = linear_prefix_depths(n, mask, free_masks.__getitem__, lanes=lanes)
    got_free = find_prefix_depths(n, mask, window, free_masks.__getitem__, lanes=lanes)
    assert linear_free == linear  # the injected bits are all beyond the true prefix
    assert all(g >= lin for g, lin in zip(got_free, linear_free, strict=True))


def test_false_positive_at_a_sampled_position_inflates_the_depth() -> None:
    """The guarantee above is tight: an FP at a sampled position past d (outside d + W) is seen."""
    masks = [1, 1, 1, 0, 1, 0, 0, 0]  # d = 3; a false positive at the sampled position 4
    assert linear_prefix_depths(8, 1, masks.__getitem__, lanes=1) == [3]
    assert find_prefix_depths(8, 1, 1, masks.__getitem__, lanes=1)[0] > 3
    # W = 2: the search still overshoots to 5, but the window [3, 5) holds d and stops there
    assert find_prefix_depths(8, 1, 2, masks.__getitem__, lanes=1) == [3]


@pytest.mark.parametrize("window", [-1, 0, 1, 2, 7, 8, 9, 64])
def test_the_verification_window_has_one_range_everywhere(window: int) -> None:
    """The producer's CkfConfig, the consumer's prefix search and explain refuse the same
    windows (``verification_window_fault``, the one statement of the range)."""
    from cbi1kit.analysis._shorthands import explain
    from cbi1kit.ckf._limits import MAX_VERIFICATION_WINDOW
    from cbi1kit.ckf._producer import CkfConfig
    from cbi1kit.errors import CkfError, LaneError

    def accepts(call: Callable[[], object], error: type[Exception]) -> bool:
        try:
            call()
        except error as exc:  # refused for the window, or for another reason after it
            return "verification_window" not in str(exc)
        except Exception:  # refused for another reason: the window itself passed
            return True
        return True

    _NO_CAPTURE = "no-such.kvrcap"
    expected = 1 <= window <= MAX_VERIFICATION_WINDOW
    assert accepts(lambda: CkfConfig(64, verification_window=window), CkfError) == expected
    assert accepts(lambda: find_prefix_depths(4, 1, window, lambda _p: 1), ValueError) == expected
    assert (
        accepts(lambda: explain(_NO_CAPTURE, model="m", verification_window=window), LaneError)
        == expected
    )

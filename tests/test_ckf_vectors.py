"""Every VERIFIED test vector of ckf.md §6, then the DERIVED ones as cross-checks."""

from __future__ import annotations

import pytest
from errorcheck import raises_variant

from cbi1kit.ckf._addressing import CkfAddressing, CkfProbe
from cbi1kit.ckf._bucket import (
    bucket_contains,
    bucket_first,
    bucket_first_empty,
    bucket_with_slot,
    pack_slots,
)
from cbi1kit.ckf._consumer import (
    SearchTraceEvent,
    find_prefix_depths,
    linear_prefix_depths,
    search_prefix_depths,
)
from cbi1kit.ckf._producer import (
    CkfConfig,
    DcCkfState,
    KvStored,
    StoredBlock,
    bucket_count_for,
    canonical_chain,
)
from cbi1kit.ckf._table import SplitMix64, lane_rng_seed
from cbi1kit.errors import CkfError

TEST_SEED = 0x123456789ABCDEF0

# -- VERIFIED ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("h", "fp", "a", "b"),
    [
        (0, 7750, 587, 372),
        (1, 64153, 348, 36),
        (0x0123456789ABCDEF, 45802, 865, 909),
        (0xFFFFFFFFFFFFFFFF, 31767, 112, 217),
    ],
)
def test_addressing_table(h: int, fp: int, a: int, b: int) -> None:
    addressing = CkfAddressing(seed=TEST_SEED, bucket_count=1024)
    assert addressing.prepare(h) == CkfProbe(fp, a, b)
    vfp, va, vb = addressing.prepare_many([h])
    assert (int(vfp[0]), int(va[0]), int(vb[0])) == (fp, a, b)


def test_addressing_first_ten_thousand_hashes() -> None:
    addressing = CkfAddressing(seed=TEST_SEED, bucket_count=1024)
    for h in range(10_000):
        fp, a, b = addressing.prepare_ints(h)
        assert fp != 0
        assert a != b
        assert addressing.alt(b, fp) == a


def test_sequence_hash_chain() -> None:
    assert canonical_chain([0x0123456789ABCDEF, 0x1111222233334444, 0xDEADBEEFCAFEBABE]) == [
        0x0123456789ABCDEF,
        0x98E7E55F299CF592,
        0x65D53B99C5252D19,
    ]


@pytest.mark.parametrize(
    ("expected", "buckets"),
    [(1, 2), (16, 8), (1_048_576, 524_288), (2048, 1024), (32, 16), (64, 32)],
)
def test_bucket_count_values(expected: int, buckets: int) -> None:
    assert bucket_count_for(expected) == buckets
    assert CkfConfig(expected).bucket_count() == buckets


def test_bucket_count_zero_is_an_error() -> None:
    config = CkfConfig(0)  # constructs, as upstream
    with raises_variant(CkfError, "Config") as info:
        config.bucket_count()
    assert info.value.subvariant == "ExpectedCapacityZero"


def test_relay_config_format_bucket_count() -> None:
    assert CkfConfig(2048, seed=42).format().bucket_count == 1024


def test_packed_bucket_cases() -> None:
    word = pack_slots([1, 0x1234, 0x8000, 0xFFFF])
    for fp in (1, 0x1234, 0x8000, 0xFFFF):
        assert bucket_contains(word, fp)
    for fp in (2, 0x1235, 0xFFFE):
        assert not bucket_contains(word, fp)
    assert bucket_first_empty(word) is None
    assert bucket_first(word, 1) == 0
    assert bucket_first(word, 0x8000) == 2
    assert bucket_first_empty(bucket_with_slot(word, 1, 0)) == 1


def _lanes(depths: list[int], holes: set[tuple[int, int]] = frozenset()) -> object:  # type: ignore[assignment]
    def membership(position: int) -> int:
        mask = 0
        for lane, depth in enumerate(depths):
            if position < depth and (lane, position) not in holes:
                mask |= 1 << lane
        return mask

    return membership


def test_terminal_window_contract() -> None:
    masks = [1, 1, 1, 0, 1, 1, 1, 1]
    assert find_prefix_depths(8, 1, 1, masks.__getitem__, lanes=1) == [8]
    assert find_prefix_depths(8, 1, 8, masks.__getitem__, lanes=1) == [3]
    assert linear_prefix_depths(8, 1, masks.__getitem__, lanes=1) == [3]


def test_fallback_groups_lanes_and_repairs_clipped_false_pivot() -> None:
    probed: list[int] = []

    def membership(p: int) -> int:
        return 0b11 if p < 40 or p == 48 else 0

    def probe(p: int) -> int:
        probed.append(p)
        return membership(p)

    result = search_prefix_depths(65, 0b11, 2, probe, lanes=2)
    assert result.depths == linear_prefix_depths(65, 0b11, membership, lanes=2) == [40, 40]
    assert 17 not in probed
    for p in range(33, 41):
        assert probed.count(p) == 1
    fb = result.fallback
    assert (fb.left_edge_lanes, fb.activated_lanes, fb.probe_calls, fb.lane_probes) == (2, 2, 8, 16)
    assert fb.provenance_skips == 0


def test_staggered_fallback_cursors() -> None:
    def membership(p: int) -> int:
        return int(p < 44 or p == 48) | (int(p < 42 or p == 44) << 1)

    trace: list[SearchTraceEvent] = []
    result = search_prefix_depths(65, 0b11, 2, membership, lanes=2, trace=trace)
    assert result.depths == [44, 42]
    fb = result.fallback
    assert (fb.left_edge_lanes, fb.activated_lanes, fb.probe_calls, fb.lane_probes) == (
        2,
        2,
        12,
        14,
    )
    assert fb.provenance_skips == 0
    expected = (
        [(p, 0b01) for p in range(33, 41)]
        + [(p, 0b11) for p in range(41, 43)]
        + [(p, 0b01) for p in range(43, 45)]
    )
    assert [(e.position, e.lanes) for e in trace if e.phase == "fallback"] == expected


def test_valid_fallback_lane_progresses_while_second_order_lane_is_skipped() -> None:
    def membership(p: int) -> int:
        return int(p < 40 or p == 48) | (int(p < 41 or 48 <= p <= 51) << 1)

    trace: list[SearchTraceEvent] = []
    result = search_prefix_depths(65, 0b11, 8, membership, lanes=2, trace=trace)
    assert result.depths == [40, 44]
    fb = result.fallback
    assert (fb.left_edge_lanes, fb.activated_lanes, fb.probe_calls, fb.lane_probes) == (2, 1, 8, 8)
    assert fb.provenance_skips == 1
    assert [(e.position, e.lanes) for e in trace if e.phase == "fallback"] == [
        (p, 0b01) for p in range(33, 41)
    ]


def test_second_order_provenance_skip_without_inverted_range() -> None:
    def membership(p: int) -> int:
        return int(p < 41 or 48 <= p <= 51)

    result = search_prefix_depths(65, 1, 8, membership, lanes=1)
    assert linear_prefix_depths(65, 1, membership, lanes=1) == [41]
    assert result.depths == [44]
    fb = result.fallback
    assert (fb.left_edge_lanes, fb.activated_lanes, fb.probe_calls, fb.provenance_skips) == (
        1,
        0,
        0,
        1,
    )


def test_false_predecessor_residual() -> None:
    def membership(p: int) -> int:
        return int(p < 20 or p in (32, 48))

    result = search_prefix_depths(65, 1, 8, membership, lanes=1)
    assert linear_prefix_depths(65, 1, membership, lanes=1) == [20]
    assert result.depths == [33]
    fb = result.fallback
    assert (fb.left_edge_lanes, fb.activated_lanes, fb.probe_calls, fb.provenance_skips) == (
        1,
        1,
        1,
        0,
    )


def test_divergent_d16_depths_and_binary_schedule() -> None:
    depths = [3, 3, 6, 7, 11, 11, 15, 17, 3, 6, 11, 15, 17, 7, 3, 11]
    trace: list[SearchTraceEvent] = []
    result = search_prefix_depths(17, 0xFFFF, 1, _lanes(depths), trace=trace)  # type: ignore[arg-type]
    assert result.depths == depths
    assert [(e.position, e.lanes) for e in trace if e.phase == "binary"] == [
        (3, 0x4103),
        (6, 0x220C),
        (12, 0x8C70),
        (5, 0x0204),
        (7, 0x2008),
        (10, 0x8430),
        (14, 0x0840),
        (11, 0x8430),
        (15, 0x0840),
    ]


def test_exponential_schedule() -> None:
    trace: list[SearchTraceEvent] = []
    result = search_prefix_depths(9, 1, 1, lambda _p: 1, lanes=1, trace=trace)
    assert result.depths == [9]
    assert [(e.phase, e.position) for e in trace[:5]] == [
        ("initial", 0),
        ("exponential", 1),
        ("exponential", 2),
        ("exponential", 4),
        ("exponential", 8),
    ]


def test_overlapping_verification_windows() -> None:
    holes = {(0, 5), (0, 7), (1, 7), (2, 6), (2, 9), (3, 5)}
    trace: list[SearchTraceEvent] = []
    membership = _lanes([9, 10, 11, 12], holes)
    result = search_prefix_depths(17, 0b1111, 4, membership, lanes=4, trace=trace)  # type: ignore[arg-type]
    assert result.depths == [5, 7, 9, 12]
    assert [(e.position, e.lanes) for e in trace if e.phase == "verification"] == [
        (5, 0b0001),
        (6, 0b0010),
        (7, 0b0110),
        (8, 0b1100),
        (9, 0b1100),
        (10, 0b1000),
        (11, 0b1000),
    ]


def test_second_order_provenance_full_map() -> None:
    def membership(p: int) -> int:
        return int(p < 20 or p in (32, 48)) | (int(p < 30) << 1)

    assert find_prefix_depths(65, 0b11, 8, membership, lanes=2) == [33, 30]


def test_mixed_d16() -> None:
    depths = [8, 12, 20, 20, 28, 36, 44, 52, 60, 24, 40, 16, 48, 56, 32, 18]

    def membership(p: int) -> int:
        mask = 0
        for lane, depth in enumerate(depths):
            present = p < depth or (lane == 15 and p in (32, 64))
            mask |= int(present) << lane
        return mask

    result = find_prefix_depths(65, 0xFFFF, 2, membership)
    assert result[15] == 33
    assert result[8] == 60


@pytest.mark.parametrize("offset", range(2, 9))
def test_window_eight_repairs_holes_at_offsets(offset: int) -> None:
    n = 33
    hole = n - offset
    masks = [1] * n
    masks[hole] = 0
    one = search_prefix_depths(n, 1, 1, masks.__getitem__, lanes=1, fallback=False).depths
    eight = search_prefix_depths(n, 1, 8, masks.__getitem__, lanes=1, fallback=False).depths
    assert one == [n]
    assert eight == [hole]
    assert linear_prefix_depths(n, 1, masks.__getitem__, lanes=1) == [hole]


def test_holes_beyond_the_terminal_window_remain_advisory() -> None:
    n = 33
    masks = [1] * n
    masks[n - 9] = 0
    assert search_prefix_depths(n, 1, 8, masks.__getitem__, lanes=1, fallback=False).depths == [n]
    assert linear_prefix_depths(n, 1, masks.__getitem__, lanes=1) == [n - 9]


def test_empty_and_zero_searches() -> None:
    assert find_prefix_depths(0, 0b1111, 2, lambda _p: 0xFFFF, lanes=4) == [0] * 4
    assert find_prefix_depths(8, 0b1111, 2, lambda _p: 0, lanes=4) == [0] * 4


# -- standard SplitMix64 values, and DERIVED ---------------------------------------------------


def test_splitmix_from_zero() -> None:
    rng = SplitMix64(0)
    assert [rng.next(), rng.next()] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]


def test_lane_rng_seed_derived() -> None:
    seed = lane_rng_seed(0x5DEECE66D1B54A33, 0)
    assert seed == 0xC050D0A84124DB84
    rng = SplitMix64(seed)
    assert [rng.next() for _ in range(3)] == [
        0x8D0956E040739722,
        0x116C72C2242D8178,
        0x5ECB896FE0120182,
    ]
    assert lane_rng_seed(0x123456789ABCDEF0, 0) == 0xE4BFD77704923BDC


def test_default_seed_root_batch_derived() -> None:
    state = DcCkfState(CkfConfig(32))
    assert state.bucket_count == 16
    chain = canonical_chain([1, 2, 3])
    assert chain == [0x1, 0xE853D985BBDE7CF0, 0x4B2F854BDAE0F16F]
    assert [state.addressing.prepare_ints(c) for c in chain] == [
        (47807, 15, 13),
        (47315, 2, 15),
        (55657, 10, 13),
    ]
    blocks = tuple(StoredBlock(0xE000 + i, t) for i, t in enumerate([1, 2, 3]))
    outcome = state.apply(KvStored(worker_id=1, blocks=blocks))
    assert outcome.error is None
    words = state.words().tolist()
    assert {i: w for i, w in enumerate(words) if w} == {2: 0xB8D3, 10: 0xD969, 15: 0xBABF}


def test_two_bucket_fill_and_first_capacity_failure_derived() -> None:
    state = DcCkfState(CkfConfig(1))
    for token in range(1, 9):
        assert state.apply(KvStored(1, (StoredBlock(token, token),))).error is None
    rng_before = state.rng.state
    words_before = state.words().tolist()
    outcome = state.apply(KvStored(1, (StoredBlock(9, 9),)))
    assert outcome.error is not None
    assert outcome.error.variant == "CapacityExhausted"
    assert state.words().tolist() == words_before == [0x62DCD73D63A2C24A, 0x75706FC208DCBABF]
    expected = SplitMix64(rng_before)
    for _ in range(501):
        expected.next()
    assert state.rng.state == expected.state
    assert state.capacity_failures == 1


def test_relay_setup_derived() -> None:
    import xxhash

    local = xxhash.xxh3_64_intdigest(
        b"".join(t.to_bytes(4, "little") for t in [11, 22, 33, 44]), 1337
    )
    assert local == 0x3923808A6FC8987A
    state = DcCkfState(CkfConfig(2048, seed=42))
    assert state.addressing.prepare_ints(local) == (30764, 813, 1010)
    state.apply(KvStored(1, (StoredBlock(77, local),)))
    assert int(state.words()[813]) == 0x782C

"""Cuckoo table properties: no false negatives, rollback, deletion order, occupancy."""

from __future__ import annotations

import numpy as np
from errorcheck import raises_variant
from hypothesis import given, settings, strategies as st

from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._bucket import (
    bucket_occupancy,
    lane_occupancy,
    lane_slots,
    pack_slots,
    unpack_slots,
)
from cbi1kit.ckf._table import MAX_KICKS, CuckooTable, SplitMix64
from cbi1kit.errors import CkfError

SEED = 0x123456789ABCDEF0


def _copies(table: CuckooTable, item: int) -> int:
    fp, a, b = table.addressing.prepare_ints(item)
    return unpack_slots(table.word(a)).count(fp) + unpack_slots(table.word(b)).count(fp)


@settings(max_examples=60, deadline=None)
@given(
    log2=st.integers(1, 6),
    items=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=300, unique=True),
    data=st.data(),
)
def test_insert_delete_keeps_resident_items_findable(
    log2: int, items: list[int], data: st.DataObject
) -> None:
    table = CuckooTable(CkfAddressing(seed=SEED, bucket_count=1 << log2))
    rng = SplitMix64(data.draw(st.integers(0, 2**64 - 1)))
    max_kicks = data.draw(st.integers(0, 64))
    resident: list[int] = []
    for item in items:
        before_words = table.words_list()
        before_rng = SplitMix64(rng.state)
        touched = table.insert(item, rng, max_kicks)
        if touched is None:
            assert table.words_list() == before_words  # byte-identical rollback
            for _ in range(1 + max_kicks):
                before_rng.next()
            assert rng.state == before_rng.state  # 1 + K draws consumed
        else:
            resident.append(item)
            for bk, before in touched:
                assert 0 <= bk < table.bucket_count
                assert isinstance(before, int)
        assert all(table.contains(r) for r in resident)
        assert lane_occupancy(table.words()) == len(resident)
        if resident and data.draw(st.booleans()):
            victim = resident.pop(data.draw(st.integers(0, len(resident) - 1)))
            table.delete(victim)
            assert all(table.contains(r) for r in resident)
            assert lane_occupancy(table.words()) == len(resident)


def test_failed_kick_walk_rolls_back_every_write() -> None:
    addressing = CkfAddressing(seed=SEED, bucket_count=2)
    full = [pack_slots([1, 2, 3, 4]), pack_slots([5, 6, 7, 8])]
    table = CuckooTable(addressing, np.array(full, dtype=np.uint64))
    rng = SplitMix64(1)
    assert table.insert(999, rng, 1) is None
    assert table.words_list() == full
    expected = SplitMix64(1)
    expected.next()
    expected.next()
    assert rng.state == expected.state


def test_relocation_free_reoffer_draws_once_and_writes_nothing() -> None:
    addressing = CkfAddressing(seed=SEED, bucket_count=2)
    full = [pack_slots([1, 2, 3, 4]), pack_slots([5, 6, 7, 8])]
    table = CuckooTable(addressing, np.array(full, dtype=np.uint64))
    rng = SplitMix64(5)
    assert table.insert(12345, rng, 0) is None
    expected = SplitMix64(5)
    expected.next()
    assert rng.state == expected.state
    assert table.words_list() == full


def test_kick_walk_moves_items_and_reports_writes_in_order() -> None:
    addressing = CkfAddressing(seed=SEED, bucket_count=16)
    table = CuckooTable(addressing)
    rng = SplitMix64(11)
    snapshots = []
    stored = []
    for item in range(64):
        before = table.words_list()
        touched = table.insert(item, rng, 500)
        if touched is None:
            assert table.words_list() == before
            continue
        stored.append(item)
        # replaying the reported writes' "before" values in reverse restores the old table
        words = table.words_list()
        for bk, prior in reversed(touched):
            words[bk] = prior
        assert words == before
        snapshots.append(touched)
    assert any(len(t) > 1 for t in snapshots)  # at least one insert needed kicks
    assert all(table.contains(i) for i in stored)


def test_identical_representations_keep_separate_copies_and_delete_lowest_slot() -> None:
    addressing = CkfAddressing(seed=SEED, bucket_count=2)
    table = CuckooTable(addressing)
    rng = SplitMix64(0)
    reps: dict[tuple[int, int, int], int] = {}
    first = second = None
    for h in range(1_000_000):
        fp, a, b = addressing.prepare_ints(h)
        key = (fp, min(a, b), max(a, b))
        if key in reps:
            first, second = reps[key], h
            break
        reps[key] = h
    assert first is not None and second is not None
    table.insert(first, rng, 20)
    table.insert(second, rng, 20)
    assert _copies(table, first) == 2
    fp, a, _ = addressing.prepare_ints(first)
    slots_before = unpack_slots(table.word(a))
    bk, _ = table.delete(first)
    assert _copies(table, first) == 1
    if fp in slots_before:
        assert bk == a
        lowest = slots_before.index(fp)
        assert unpack_slots(table.word(a))[lowest] == 0


def test_delete_absent_raises() -> None:
    table = CuckooTable(CkfAddressing(seed=SEED, bucket_count=16))
    with raises_variant(CkfError, "FingerprintNotFound") as info:
        table.delete(42)
    assert info.value.item == 42


def test_store_remove_churn_drains_every_slot() -> None:
    table = CuckooTable(CkfAddressing(seed=SEED, bucket_count=64))
    rng = SplitMix64(3)
    hashes = list(range(10_000, 10_128))
    for h in hashes:
        assert table.insert(h, rng, 500) is not None
    for h in reversed(hashes):
        table.delete(h)
    assert table.words_list() == [0] * 64


@settings(max_examples=60, deadline=None)
@given(
    log2=st.integers(1, 8),
    seed=st.integers(0, (1 << 64) - 1),
    rng_state=st.integers(0, (1 << 64) - 1),
    max_kicks=st.sampled_from([0, 1, 2, 17, 500, MAX_KICKS]),
    items=st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=300),
)
def test_the_compiled_insert_equals_its_python_reference(
    log2: int, seed: int, rng_state: int, max_kicks: int, items: list[int]
) -> None:
    """Every insert, to failure and past it (roll-backs included), writes the same words, the
    same (bucket, before) pairs, and leaves the RNG where the reference does."""
    from cbi1kit.ckf._kick import insert_walk_reference

    addressing = CkfAddressing(seed=seed, bucket_count=1 << log2)
    table = CuckooTable(addressing)
    rng = SplitMix64(rng_state)
    words = [0] * (1 << log2)
    state = rng.state
    t_bucket, t_before = [0] * (MAX_KICKS + 1), [0] * (MAX_KICKS + 1)
    for item in items:
        fp, a, b = addressing.prepare_ints(item)
        got = table.insert_prepared(fp, a, b, rng, max_kicks)
        n, state = insert_walk_reference(
            words, addressing._delta_list, fp, a, b, state, max_kicks, t_bucket, t_before
        )
        assert rng.state == state
        assert got == (None if n < 0 else list(zip(t_bucket[:n], t_before[:n], strict=True)))
        assert table.words_list() == words


def test_a_kick_budget_beyond_the_scratch_space_is_refused() -> None:
    table = CuckooTable(CkfAddressing(seed=SEED, bucket_count=16))
    with raises_variant(CkfError, "InvalidMaxKicks"):
        table.insert(1, SplitMix64(1), MAX_KICKS + 1)


@settings(max_examples=60, deadline=None)
@given(
    log2=st.integers(1, 8),
    seed=st.integers(0, (1 << 64) - 1),
    rng_state=st.integers(0, (1 << 64) - 1),
    max_kicks=st.sampled_from([0, 1, 2, 17, 500, MAX_KICKS]),
    items=st.lists(st.integers(0, (1 << 64) - 1), max_size=2100),
)
def test_insert_many_is_insert_prepared_item_by_item_up_to_the_first_failure(
    log2: int, seed: int, rng_state: int, max_kicks: int, items: list[int]
) -> None:
    """The same words, RNG state and counters as inserting each item in turn and stopping at
    the first failure (rolled back); offering the rest again carries on from there."""
    addressing = CkfAddressing(seed=seed, bucket_count=1 << log2)
    fp, a, b = addressing.prepare_many(np.array(items, dtype=np.uint64))
    one, many = CuckooTable(addressing), CuckooTable(addressing)
    rng_one, rng_many = SplitMix64(rng_state), SplitMix64(rng_state)
    start = 0
    while start <= len(items):
        k = many.insert_many(fp[start:], a[start:], b[start:], rng_many, max_kicks)
        expected = 0
        for f, x, y in zip(
            fp[start:].tolist(), a[start:].tolist(), b[start:].tolist(), strict=True
        ):
            if one.insert_prepared(f, x, y, rng_one, max_kicks) is None:
                break
            expected += 1
        assert k == expected
        assert many.words_list() == one.words_list()
        assert rng_many.state == rng_one.state
        assert (many.inserts, many.insert_failures) == (one.inserts, one.insert_failures)
        start += k + 1  # past the failed item (or past the end)


def test_insert_many_fills_a_table_to_its_first_failure() -> None:
    addressing = CkfAddressing(seed=SEED, bucket_count=1 << 10)
    items = np.random.default_rng(5).integers(0, 2**64, 8 << 10, dtype=np.uint64)
    table = CuckooTable(addressing)
    k = table.insert_many(*addressing.prepare_many(items), SplitMix64(9), 500)
    assert 0.9 < k / (4 << 10) < 1.0  # a cuckoo filter of 4 slots fills to ~95%
    assert table.insert_failures == 1
    assert all(_copies(table, int(item)) >= 1 for item in items[:k])
    with raises_variant(CkfError, "InvalidMaxKicks"):
        table.insert_many([1], [0], [1], SplitMix64(1), MAX_KICKS + 1)


_EDGE_WORDS = [
    0,
    1,
    1 << 15,
    1 << 16,
    1 << 63,
    0xFFFF,
    0xFFFF << 48,
    2**64 - 1,
    0x8000_0001_0000_0100,
]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=64), st.integers(0, 2**32 - 1))
def test_bucket_occupancy_counts_nonzero_slots(words: list[int], seed: int) -> None:
    """The byte-sum count equals counting the nonzero slots of each word's slot view, on
    hypothesis' words, the edge words and random lanes with slots emptied at random."""
    rng = np.random.default_rng(seed)
    lane = rng.integers(0, 2**64, size=256, dtype=np.uint64, endpoint=False)
    slots = lane.view(np.uint16).copy()
    slots[rng.random(slots.size) < 0.5] = 0
    for arr in (np.array(words + _EDGE_WORDS, dtype=np.uint64), slots.view(np.uint64)):
        got = bucket_occupancy(arr)
        assert got.dtype == np.uint8
        assert got.tolist() == np.count_nonzero(lane_slots(arr), axis=1).tolist()
        assert int(got.sum()) == lane_occupancy(arr)


def test_bucket_occupancy_keeps_the_input_shape() -> None:
    assert bucket_occupancy(np.uint64(0xFFFF_0000_0001)).shape == ()
    assert int(bucket_occupancy(np.uint64(0xFFFF_0000_0001))) == 2
    grid = np.arange(12, dtype=np.uint64).reshape(3, 4)
    assert bucket_occupancy(grid).shape == (3, 4)
    assert bucket_occupancy(grid[:, ::-1]).tolist() == (grid[:, ::-1] != 0).astype(int).tolist()
    assert bucket_occupancy([]).shape == (0,)


def test_bucket_of_names_the_bucket_that_holds_an_item() -> None:
    addressing = CkfAddressing(seed=11, bucket_count=64)
    table = CuckooTable(addressing)
    rng = SplitMix64(3)
    items = [i * 0x9E3779B97F4A7C15 % 2**64 for i in range(1, 120)]
    stored = [i for i in items if table.insert(i, rng, MAX_KICKS) is not None]
    for item in stored:  # kicks move residents: wherever it is now, a or b
        fp, a, b = addressing.prepare_ints(item)
        bucket = table.bucket_of(item)
        assert bucket in (a, b) and fp in unpack_slots(table.word(bucket))
    table.delete(stored[0])
    assert table.bucket_of(stored[0]) is None or table.contains(stored[0])  # a twin fp remains

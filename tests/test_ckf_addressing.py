"""Vectorised addressing against a scalar reference built on the ``xxhash`` library."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash
from errorcheck import raises_variant
from hypothesis import given, settings, strategies as st

from cbi1kit.ckf._addressing import ALT_DOMAIN, CkfAddressing, CkfProbe
from cbi1kit.ckf._bucket import (
    bucket_slot,
    bucket_with_slot,
    lane_contains,
    lane_occupancy,
    lane_slots,
    pack_slots,
    unpack_slots,
)
from cbi1kit.ckf._limits import DEFAULT_SEED
from cbi1kit.errors import CkfError
from cbi1kit.hashing._xxh3 import BLOCK

U64 = st.integers(0, 2**64 - 1)


def reference_prepare(h: int, bucket_count: int, seed: int) -> tuple[int, int, int]:
    mask = bucket_count - 1
    mixed = xxhash.xxh3_64_intdigest(h.to_bytes(8, "little"), seed)
    fp = (mixed & 0xFFFF) or 1
    a = (mixed >> 16) & mask
    return fp, a, reference_alt(a, fp, bucket_count, seed)


def reference_alt(bucket: int, fp: int, bucket_count: int, seed: int) -> int:
    d = xxhash.xxh3_64_intdigest(fp.to_bytes(2, "little"), seed ^ ALT_DOMAIN) & (bucket_count - 1)
    return bucket ^ (d or 1)


@pytest.mark.parametrize("bucket_count", [2, 16, 1024, 1 << 19, 1 << 24])
@pytest.mark.parametrize("seed", [0, 42, 0x5DEECE66D1B54A33, 2**64 - 1])
def test_vectorised_prepare_equals_scalar_reference(bucket_count: int, seed: int) -> None:
    rng = np.random.default_rng(bucket_count ^ (seed & 0xFFFF))
    hashes = rng.integers(0, 2**64, size=2000, dtype=np.uint64)
    hashes[:4] = [0, 1, 2**63, 2**64 - 1]
    fp, a, b = CkfAddressing(seed=seed, bucket_count=bucket_count).prepare_many(hashes)
    assert fp.dtype == np.uint16
    assert a.dtype == b.dtype == np.uint64
    got = list(zip(fp.tolist(), a.tolist(), b.tolist(), strict=True))
    assert got == [reference_prepare(h, bucket_count, seed) for h in hashes.tolist()]


@settings(max_examples=300)
@given(h=U64, seed=U64, log2=st.integers(1, 30))
def test_scalar_prepare_and_alt_properties(h: int, seed: int, log2: int) -> None:
    bucket_count = 1 << log2
    addressing = CkfAddressing(seed=seed, bucket_count=bucket_count)
    fp, a, b = addressing.prepare_ints(h)
    assert (fp, a, b) == reference_prepare(h, bucket_count, seed)
    assert fp != 0
    assert a != b
    assert addressing.alt(b, fp) == a
    assert addressing.alt(a, fp) == b
    other = (a + 1) % bucket_count
    assert addressing.alt(addressing.alt(other, fp), fp) == other
    assert addressing.alt(other, fp) != other


def test_alt_many_matches_scalar() -> None:
    rng = np.random.default_rng(7)
    buckets = rng.integers(0, 4096, size=500, dtype=np.uint64)
    fps = rng.integers(1, 1 << 16, size=500, dtype=np.uint16)
    got = CkfAddressing(seed=99, bucket_count=4096).alt_many(buckets, fps).tolist()
    assert got == [
        reference_alt(int(bk), int(f), 4096, 99) for bk, f in zip(buckets, fps, strict=False)
    ]


@pytest.mark.parametrize("bucket_count", [0, 1, 3, 1000])
def test_bad_bucket_counts_rejected(bucket_count: int) -> None:
    with raises_variant(CkfError, "Addressing") as info:
        CkfAddressing(seed=1, bucket_count=bucket_count)
    assert info.value.bucket_count == bucket_count


@given(slots=st.lists(st.integers(0, 0xFFFF), min_size=4, max_size=4))
def test_pack_unpack_round_trip(slots: list[int]) -> None:
    word = pack_slots(slots)
    assert unpack_slots(word) == tuple(slots)
    assert [bucket_slot(word, i) for i in range(4)] == slots
    # slot 0 is the least significant u16: LE bytes are slot0_lo, slot0_hi, ...
    assert word.to_bytes(8, "little") == b"".join(s.to_bytes(2, "little") for s in slots)
    for i in range(4):
        replaced = bucket_with_slot(word, i, 0xABCD)
        assert unpack_slots(replaced) == tuple(0xABCD if j == i else s for j, s in enumerate(slots))


def test_lane_views() -> None:
    rng = np.random.default_rng(3)
    words = rng.integers(0, 2**64, size=256, dtype=np.uint64)
    words[::3] &= np.uint64(0x0000FFFF0000FFFF)
    slots = lane_slots(words)
    assert slots.shape == (256, 4)
    assert slots.dtype == np.uint16
    assert [tuple(r) for r in slots.tolist()] == [unpack_slots(w) for w in words.tolist()]
    assert lane_occupancy(words) == sum(
        sum(1 for s in unpack_slots(w) if s) for w in words.tolist()
    )
    buckets = rng.integers(0, 256, size=100)
    fps = slots[buckets, rng.integers(0, 4, size=100)]
    fps[fps == 0] = 1
    got = lane_contains(words, buckets, fps).tolist()
    assert got == [
        int(f) in unpack_slots(int(words[bk])) for bk, f in zip(buckets, fps, strict=False)
    ]


def raw_fingerprint(h: int, seed: int) -> int:
    """The spec's ``xxh3_64(le_u64(h), seed) & 0xFFFF`` before the nonzero rule (ckf.md §1.3)."""
    return xxhash.xxh3_64_intdigest(h.to_bytes(8, "little"), seed) & 0xFFFF


def zero_fingerprint_hashes(seed: int, start: int, count: int) -> list[int]:
    """The first ``count`` hashes from ``start`` up whose raw fingerprint is 0 (~1 in 65,536)."""
    found: list[int] = []
    for h in range(start, start + 64 * (1 << 16)):
        if raw_fingerprint(h, seed) == 0:
            found.append(h)
            if len(found) == count:
                return found
    raise AssertionError(f"no {count} zero raw fingerprints from {start} under seed {seed:#x}")


@pytest.mark.parametrize(
    ("bucket_count", "seed"),
    [(1024, DEFAULT_SEED), (1024, 0x123456789ABCDEF0), (1 << 24, 0)],
    ids=["default-seed", "spec-seed", "seed-0"],
)
def test_a_raw_fingerprint_of_zero_becomes_one(bucket_count: int, seed: int) -> None:
    """0 marks an empty slot, so a hash whose low 16 mixed bits are 0 is stored as 1 (ckf.md
    §1.3); random hashes meet this 1 time in 65,536, so the hashes here are searched for."""
    rng = np.random.default_rng(18)
    high = int(rng.integers(1 << 63, 2**64 - (1 << 23), dtype=np.uint64))
    zeros = zero_fingerprint_hashes(seed, 0, 3) + zero_fingerprint_hashes(seed, high, 2)
    addressing = CkfAddressing(seed=seed, bucket_count=bucket_count)
    mask = bucket_count - 1
    expected = []
    for h in zeros:
        mixed = xxhash.xxh3_64_intdigest(h.to_bytes(8, "little"), seed)
        assert mixed & 0xFFFF == 0  # the raw value really is 0
        a = (mixed >> 16) & mask  # bucket a is unaffected by the rule
        expected.append((1, a, a ^ addressing.delta(1)))
    # scalar paths
    assert [addressing.prepare_ints(h) for h in zeros] == expected
    assert [addressing.prepare(h) for h in zeros] == [CkfProbe(*e) for e in expected]
    # vectorised paths, with the hashes among others and on both sides of a block boundary
    hashes = rng.integers(0, 2**64, size=BLOCK + 64, dtype=np.uint64)
    where = [0, 17, BLOCK - 1, BLOCK, BLOCK + 63]
    hashes[where] = zeros
    fp, a, b = addressing.prepare_many(hashes)
    got = list(zip(fp[where].tolist(), a[where].tolist(), b[where].tolist(), strict=True))
    assert got == expected
    assert fp.min() >= 1


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(1, 20))
@settings(max_examples=200)
def test_an_items_anatomy_is_prepare_step_by_step(h: int, seed: int, log2: int) -> None:
    """Each step the notebook shows is the one prepare takes (#46)."""
    addressing = CkfAddressing(seed=seed, bucket_count=1 << log2)
    got = addressing.anatomy(h)
    mixed = xxhash.xxh3_64_intdigest(h.to_bytes(8, "little"), seed)
    assert got.mixed == mixed and (got.fingerprint, got.bucket_a, got.bucket_b) == (
        addressing.prepare_ints(h)
    )
    assert got.fingerprint == ((mixed & 0xFFFF) or 1) and got.bucket_a == (mixed >> 16) & (
        (1 << log2) - 1
    )
    assert got.bucket_b == got.bucket_a ^ got.delta and got.delta >= 1
    assert (
        f"bucket b     {got.bucket_b}" in str(got) and got.to_dict()["mixed"] == f"0x{mixed:016x}"
    )


def test_a_word_reads_slot_0_from_its_low_bits() -> None:
    from cbi1kit.ckf._bucket import slots_text

    lines = slots_text(0x0000_AB12_0000_0007).splitlines()
    assert lines[1].split()[:5] == ["slot", "0", "bits", "0-15", "0x0007"]
    assert lines[3].split()[4] == "0xab12" and lines[2].endswith("empty")

"""The numpy xxh3_64 short-input paths equal the xxhash library, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash

from cbi1kit.hashing._xxh3 import xxh3_64_u16, xxh3_64_u64, xxh3_64_u64_pair

EDGES = [0, 1, 2, 0xFF, 0xFFFF, 0xFFFFFFFF, 1 << 32, 1 << 63, (1 << 64) - 1, 0x5EED, 1337]
SEEDS = [0, 1, 1337, 0x5EED, 0x9E3779B97F4A7C15, (1 << 64) - 1, 1 << 63]


def _values(n: int = 2000) -> np.ndarray:
    rng = np.random.default_rng(20261130)
    v = rng.integers(0, 1 << 64, n, dtype=np.uint64, endpoint=False)
    v[: len(EDGES)] = EDGES
    return v


def _le(x: int, width: int) -> bytes:
    return int(x).to_bytes(width, "little")


@pytest.mark.parametrize("seed", SEEDS)
def test_u64_matches_xxhash(seed: int) -> None:
    v = _values()
    want = [xxhash.xxh3_64_intdigest(_le(x, 8), seed) for x in v.tolist()]
    assert xxh3_64_u64(v, seed).tolist() == want


@pytest.mark.parametrize("seed", SEEDS)
def test_u16_matches_xxhash(seed: int) -> None:
    v = _values() & np.uint64(0xFFFF)
    want = [xxhash.xxh3_64_intdigest(_le(x, 2), seed) for x in v.tolist()]
    assert xxh3_64_u16(v, seed).tolist() == want


@pytest.mark.parametrize("seed", SEEDS)
def test_pair_matches_xxhash(seed: int) -> None:
    a = _values()
    b = np.roll(a, 7)
    want = [
        xxhash.xxh3_64_intdigest(_le(x, 8) + _le(y, 8), seed)
        for x, y in zip(a.tolist(), b.tolist(), strict=True)
    ]
    assert xxh3_64_u64_pair(a, b, seed).tolist() == want


def test_pair_broadcasts_a_scalar_parent() -> None:
    b = _values(100)
    assert (
        xxh3_64_u64_pair(5, b, 1337).tolist()
        == xxh3_64_u64_pair(np.full(100, 5, np.uint64), b, 1337).tolist()
    )


def test_rejects_float_input() -> None:
    with pytest.raises(TypeError):
        xxh3_64_u64(np.array([1.0]), 0)

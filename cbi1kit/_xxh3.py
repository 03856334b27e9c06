"""Exact, vectorised xxh3_64 for the short fixed-width inputs Dynamo hashes by the million.

The CKF addresses an item with ``xxh3_64(u64 LE, seed)`` (8 bytes) and its alternate bucket with
``xxh3_64(u16 LE, seed)`` (2 bytes); the sequence-hash chain hashes ``parent ‖ block`` (16 bytes).
Calling the ``xxhash`` binding once per value costs ~150 ns of Python overhead each; these numpy
versions follow the reference algorithm (XXH3_len_1to3 / 4to8 / 9to16) in uint64 lanes, where
numpy's wrapping arithmetic is exactly the C code's. The tests pin them to the ``xxhash`` library
on random and edge inputs.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["xxh3_64_u16", "xxh3_64_u64", "xxh3_64_u64_pair"]

U64Array = npt.NDArray[np.uint64]

# The first 56 bytes of XXH3's default secret (kSecret) are all the short paths read.
_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248e"
)
_PRIME_MX1 = np.uint64(0x165667919E3779F9)
_PRIME_MX2 = np.uint64(0x9FB21C651E98DF25)
_PRIME64_2 = np.uint64(0xC2B2AE3D27D4EB4F)
_PRIME64_3 = np.uint64(0x165667B19E3779F9)
_MASK32 = np.uint64(0xFFFFFFFF)


def _le32(offset: int) -> int:
    return int.from_bytes(_SECRET[offset : offset + 4], "little")


def _le64(offset: int) -> int:
    return int.from_bytes(_SECRET[offset : offset + 8], "little")


def _u(x: int) -> np.uint64:
    return np.uint64(x & 0xFFFF_FFFF_FFFF_FFFF)


def _as_u64(values: npt.ArrayLike) -> U64Array:
    arr = np.asarray(values)
    if arr.dtype != np.uint64:
        if arr.dtype.kind not in "ui":
            raise TypeError(f"expected unsigned integers, got dtype {arr.dtype}")
        arr = arr.astype(np.uint64)
    return arr


def _sh(n: int) -> np.uint64:
    return np.uint64(n)


def _rotl(x: U64Array, r: int) -> U64Array:
    return (x << _sh(r)) | (x >> _sh(64 - r))


def _bswap64(x: U64Array) -> U64Array:
    out: U64Array = x.byteswap()
    return out


def _mul128_fold64(a: U64Array, b: U64Array) -> U64Array:
    """Low ^ high half of the full 128-bit product, from four exact 32×32→64 products."""
    a_lo, a_hi = a & _MASK32, a >> _sh(32)
    b_lo, b_hi = b & _MASK32, b >> _sh(32)
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    lo_hi = a_lo * b_hi
    hi_hi = a_hi * b_hi
    cross = (lo_lo >> _sh(32)) + (hi_lo & _MASK32) + lo_hi
    upper = (hi_lo >> _sh(32)) + (cross >> _sh(32)) + hi_hi
    lower = (cross << _sh(32)) | (lo_lo & _MASK32)
    folded: U64Array = lower ^ upper
    return folded


def _xxh64_avalanche(h: U64Array) -> U64Array:
    h = h ^ (h >> _sh(33))
    h = h * _PRIME64_2
    h = h ^ (h >> _sh(29))
    h = h * _PRIME64_3
    return h ^ (h >> _sh(32))


def _xxh3_avalanche(h: U64Array) -> U64Array:
    h = h ^ (h >> _sh(37))
    h = h * _PRIME_MX1
    return h ^ (h >> _sh(32))


def _rrmxmx(h: U64Array, length: int) -> U64Array:
    h = h ^ (_rotl(h, 49) ^ _rotl(h, 24))
    h = h * _PRIME_MX2
    h = h ^ ((h >> _sh(35)) + _sh(length))
    h = h * _PRIME_MX2
    return h ^ (h >> _sh(28))


def xxh3_64_u16(values: npt.ArrayLike, seed: int) -> U64Array:
    """xxh3_64 of each value's 2 little-endian bytes (XXH3_len_1to3 with len = 2)."""
    v = _as_u64(values) & _sh(0xFFFF)
    c1 = v & _sh(0xFF)  # input[0]
    c2 = v >> _sh(8)  # input[len >> 1] == input[1]
    c3 = c2  # input[len - 1] == input[1]
    combined = (c1 << _sh(16)) | (c2 << _sh(24)) | c3 | _sh(2 << 8)
    bitflip = _u((_le32(0) ^ _le32(4)) + seed)
    return _xxh64_avalanche(combined ^ bitflip)


def xxh3_64_u64(values: npt.ArrayLike, seed: int) -> U64Array:
    """xxh3_64 of each value's 8 little-endian bytes (XXH3_len_4to8 with len = 8)."""
    v = _as_u64(values)
    seed &= 0xFFFF_FFFF_FFFF_FFFF
    swapped = int.from_bytes((seed & 0xFFFFFFFF).to_bytes(4, "little"), "big")
    seed ^= swapped << 32
    bitflip = _u((_le64(8) ^ _le64(16)) - seed)
    # input1 = LE32(bytes 0..4) = low half; input2 = LE32(bytes 4..8) = high half.
    input64 = (v >> _sh(32)) + ((v & _MASK32) << _sh(32))
    return _rrmxmx(input64 ^ bitflip, 8)


def xxh3_64_u64_pair(first: npt.ArrayLike, second: npt.ArrayLike, seed: int = 0) -> U64Array:
    """xxh3_64 of ``first ‖ second`` as 16 little-endian bytes (XXH3_len_9to16 with len = 16).

    This is the sequence-hash chain step: ``xxh3_64(parent_le ‖ block_le)``.
    """
    lo_in, hi_in = np.broadcast_arrays(_as_u64(first), _as_u64(second))
    bitflip1 = _u((_le64(24) ^ _le64(32)) + seed)
    bitflip2 = _u((_le64(40) ^ _le64(48)) - seed)
    input_lo = lo_in ^ bitflip1
    input_hi = hi_in ^ bitflip2
    acc = _sh(16) + _bswap64(input_lo) + input_hi + _mul128_fold64(input_lo, input_hi)
    return _xxh3_avalanche(acc)

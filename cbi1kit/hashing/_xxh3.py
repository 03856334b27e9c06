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

U64Array = npt.NDArray[np.uint64]

# XXH3's default 192-byte secret (xxhash.h, XXH3_kSecret) and its primes: the short paths here
# read the first 56 bytes; the compiled long path (``_envelope_scan``) reads all of it.
SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)
PRIME32_1 = np.uint64(0x9E3779B1)
PRIME32_2 = np.uint64(0x85EBCA77)
PRIME32_3 = np.uint64(0xC2B2AE3D)
PRIME64_1 = np.uint64(0x9E3779B185EBCA87)
PRIME64_2 = np.uint64(0xC2B2AE3D27D4EB4F)
PRIME64_3 = np.uint64(0x165667B19E3779F9)
PRIME64_4 = np.uint64(0x85EBCA77C2B2AE63)
PRIME64_5 = np.uint64(0x27D4EB2F165667C5)
PRIME_MX1 = np.uint64(0x165667919E3779F9)
PRIME_MX2 = np.uint64(0x9FB21C651E98DF25)
_MASK32 = np.uint64(0xFFFFFFFF)


def _le32(offset: int) -> int:
    return int.from_bytes(SECRET[offset : offset + 4], "little")


def _le64(offset: int) -> int:
    return int.from_bytes(SECRET[offset : offset + 8], "little")


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


def _bswap64(x: U64Array) -> U64Array:
    out: U64Array = x.byteswap()
    return out


def mul128_fold64(a: U64Array, b: U64Array) -> U64Array:
    """Low ^ high half of the full 128-bit product, from four exact 32×32→64 products.

    These three run on uint64 arrays here and, compiled by numba, on scalars in the envelope
    kernels (``_envelope_scan``): plain numpy expressions, no Python helpers."""
    a_lo, a_hi = a & _MASK32, a >> np.uint64(32)
    b_lo, b_hi = b & _MASK32, b >> np.uint64(32)
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    lo_hi = a_lo * b_hi
    hi_hi = a_hi * b_hi
    cross = (lo_lo >> np.uint64(32)) + (hi_lo & _MASK32) + lo_hi
    upper = (hi_lo >> np.uint64(32)) + (cross >> np.uint64(32)) + hi_hi
    lower = (cross << np.uint64(32)) | (lo_lo & _MASK32)
    folded: U64Array = lower ^ upper
    return folded


def xxh64_avalanche(h: U64Array) -> U64Array:
    h = h ^ (h >> np.uint64(33))
    h = h * PRIME64_2
    h = h ^ (h >> np.uint64(29))
    h = h * PRIME64_3
    return h ^ (h >> np.uint64(32))


def xxh3_avalanche(h: U64Array) -> U64Array:
    h = h ^ (h >> np.uint64(37))
    h = h * PRIME_MX1
    return h ^ (h >> np.uint64(32))


def xxh3_64_u16(values: npt.ArrayLike, seed: int) -> U64Array:
    """xxh3_64 of each value's 2 little-endian bytes (XXH3_len_1to3 with len = 2)."""
    v = _as_u64(values) & _sh(0xFFFF)
    c1 = v & _sh(0xFF)  # input[0]
    c2 = v >> _sh(8)  # input[len >> 1] == input[1]
    c3 = c2  # input[len - 1] == input[1]
    combined = (c1 << _sh(16)) | (c2 << _sh(24)) | c3 | _sh(2 << 8)
    bitflip = _u((_le32(0) ^ _le32(4)) + seed)
    return xxh64_avalanche(combined ^ bitflip)


#: Elements per block in the fused kernels: three u64 arrays of this size (input slice, output
#: slice, one scratch) stay in L2, so the ~20 passes of a block never go back to memory.
BLOCK = 1 << 15


def u64_constant(seed: int) -> np.uint64:
    """The per-seed constant of :func:`xxh3_u64_into` (bitflip folded through rrmxmx's rotates).

    XXH3_len_4to8 (len 8) hashes ``x = rotl(v, 32) ^ bitflip``, and rrmxmx starts with
    ``x ^ rotl(x, 49) ^ rotl(x, 24)`` = ``rotl(v, 32) ^ rotl(v, 17) ^ rotl(v, 56) ^ C`` with
    ``C = bitflip ^ rotl(bitflip, 49) ^ rotl(bitflip, 24)``, so no half swap is materialised.
    """
    seed &= 0xFFFF_FFFF_FFFF_FFFF
    swapped = int.from_bytes((seed & 0xFFFFFFFF).to_bytes(4, "little"), "big")
    seed ^= swapped << 32
    bf = ((_le64(8) ^ _le64(16)) - seed) & 0xFFFF_FFFF_FFFF_FFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (64 - r))) & 0xFFFF_FFFF_FFFF_FFFF

    return np.uint64(bf ^ rotl(bf, 49) ^ rotl(bf, 24))


_S8, _S17, _S24, _S28, _S32, _S35, _S47, _S56 = (
    np.uint64(n) for n in (8, 17, 24, 28, 32, 35, 47, 56)
)


def xxh3_u64_into(v: U64Array, c: np.uint64, out: U64Array, tmp: U64Array) -> U64Array:
    """``out[:] = xxh3_64(le_u64(v), seed)`` for one block, with ``c = u64_constant(seed)``.

    Every step writes into ``out`` or ``tmp`` (no temporaries); ``v``, ``out`` and ``tmp`` are
    equal-length, distinct uint64 arrays. Callers process large inputs in :data:`BLOCK`-sized
    slices so the whole chain runs in cache.
    """
    h, t = out, tmp
    np.left_shift(v, _S32, out=h)  # rotl(v, 32): the swapped LE32 halves
    np.right_shift(v, _S32, out=t)
    h ^= t
    np.left_shift(v, _S17, out=t)  # rotl(v, 17)
    h ^= t
    np.right_shift(v, _S47, out=t)
    h ^= t
    np.left_shift(v, _S56, out=t)  # rotl(v, 56)
    h ^= t
    np.right_shift(v, _S8, out=t)
    h ^= t
    h ^= c
    h *= PRIME_MX2
    np.right_shift(h, _S35, out=t)
    t += _S8  # + len
    h ^= t
    h *= PRIME_MX2
    np.right_shift(h, _S28, out=t)
    h ^= t
    return h


def xxh3_64_u64(values: npt.ArrayLike, seed: int) -> U64Array:
    """xxh3_64 of each value's 8 little-endian bytes (XXH3_len_4to8 with len = 8)."""
    v = np.ascontiguousarray(_as_u64(values))
    flat = v.reshape(-1)
    out = np.empty_like(flat)
    tmp = np.empty(min(BLOCK, flat.size), dtype=np.uint64)
    c = u64_constant(seed)
    for lo in range(0, flat.size, BLOCK):
        hi = min(lo + BLOCK, flat.size)
        xxh3_u64_into(flat[lo:hi], c, out[lo:hi], tmp[: hi - lo])
    result: U64Array = out.reshape(v.shape)
    return result


def xxh3_64_u64_pair(first: npt.ArrayLike, second: npt.ArrayLike, seed: int = 0) -> U64Array:
    """xxh3_64 of ``first ‖ second`` as 16 little-endian bytes (XXH3_len_9to16 with len = 16).

    This is the sequence-hash chain step: ``xxh3_64(parent_le ‖ block_le)``.
    """
    lo_in, hi_in = np.broadcast_arrays(_as_u64(first), _as_u64(second))
    bitflip1 = _u((_le64(24) ^ _le64(32)) + seed)
    bitflip2 = _u((_le64(40) ^ _le64(48)) - seed)
    input_lo = lo_in ^ bitflip1
    input_hi = hi_in ^ bitflip2
    acc = _sh(16) + _bswap64(input_lo) + input_hi + mul128_fold64(input_lo, input_hi)
    return xxh3_avalanche(acc)

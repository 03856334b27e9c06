"""The block-hash and sequence-hash loops as compiled kernels, for inputs of many blocks.

:func:`block_hashes` calls python-xxhash's C ``XXH3_64bits_withSeed`` (bound in
:mod:`cbi1kit.hashing._c_xxh3`) once per window from numba, saving ~150 ns of interpreter per
call. :func:`seq_hash_chains` runs each chain serially with XXH3's 16-byte path
(``XXH3_len_9to16``), the arithmetic of :func:`cbi1kit.hashing._xxh3.xxh3_64_u64_pair`. numba
keys its disk cache on this file alone, so every compiled constant is written here
(``tests/test_hashing.py`` checks them against ``_xxh3``). Imported lazily; ``_blocks`` falls
back to its Python loops when this module cannot load. See docs/kernels.md.
"""

from __future__ import annotations

import contextlib
from typing import Final

import numba
import numpy as np
import numpy.typing as npt

from cbi1kit.hashing._c_xxh3 import c_xxh3_seeded

U64Array = npt.NDArray[np.uint64]

# ------------------------------------------------------------------------ the C library's XXH3


def _blocks(
    buf: npt.NDArray[np.uint8], n: int, stride: int, width: int, seed: np.uint64, out: U64Array
) -> None:
    base = np.uint64(buf.ctypes.data)
    for i in range(n):
        out[i] = c_xxh3_seeded(base + np.uint64(i * stride), width, seed)


# ------------------------------------------------------------------------- the 16-byte XXH3

_u64 = np.uint64
# XXH3's kSecret bytes 24..56 as little-endian u64 words, with the chain's seed (1337) folded
# in: bitflip1 = (secret[24:32] ^ secret[32:40]) + seed, bitflip2 = (secret[40:48] ^
# secret[48:56]) - seed (XXH3_len_9to16_64b).
_CHAIN_SEED: Final = 1337
_SECRET_24_56: Final = (
    0x1F67B3B7A4A44072,
    0x78E5C0CC4EE679CB,
    0x2172FFCC7DD05A82,
    0x8E2443F7744608B8,
)
_BITFLIP1: Final = _u64(((_SECRET_24_56[0] ^ _SECRET_24_56[1]) + _CHAIN_SEED) % (1 << 64))
_BITFLIP2: Final = _u64(((_SECRET_24_56[2] ^ _SECRET_24_56[3]) - _CHAIN_SEED) % (1 << 64))
_PRIME_MX1: Final = _u64(0x165667919E3779F9)
_LO32: Final = _u64(0xFFFFFFFF)
_S8, _S24, _S32, _S37, _S40, _S56 = (_u64(n) for n in (8, 24, 32, 37, 40, 56))
# byte k of a word moved to byte 7 - k: the masks of bytes 1..6
_M1, _M2, _M3, _M4, _M5, _M6 = (_u64(0xFF << (8 * k)) for k in range(1, 7))
_LEN16: Final = _u64(16)


def _chains(
    flat: U64Array, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64], out: U64Array
) -> None:
    for k in range(starts.shape[0]):
        s = starts[k]
        n = lengths[k]
        if n == 0:
            continue
        h = flat[s]
        out[s] = h
        for j in range(s + 1, s + n):
            lo = h ^ _BITFLIP1
            hi = flat[j] ^ _BITFLIP2
            # bswap64(lo), written out (no intrinsics): LLVM folds it into one instruction
            sw = (
                (lo << _S56)
                | ((lo << _S40) & _M6)
                | ((lo << _S24) & _M5)
                | ((lo << _S8) & _M4)
                | ((lo >> _S8) & _M3)
                | ((lo >> _S24) & _M2)
                | ((lo >> _S40) & _M1)
                | (lo >> _S56)
            )
            # the 128-bit product's halves from four 32x32 -> 64 products, folded by xor
            a_lo, a_hi = lo & _LO32, lo >> _S32
            b_lo, b_hi = hi & _LO32, hi >> _S32
            lo_lo = a_lo * b_lo
            hi_lo = a_hi * b_lo
            lo_hi = a_lo * b_hi
            cross = (lo_lo >> _S32) + (hi_lo & _LO32) + lo_hi
            upper = (hi_lo >> _S32) + (cross >> _S32) + a_hi * b_hi
            lower = (cross << _S32) | (lo_lo & _LO32)
            acc = _LEN16 + sw + hi + (lower ^ upper)
            acc = acc ^ (acc >> _S37)
            acc = acc * _PRIME_MX1
            h = acc ^ (acc >> _S32)
            out[j] = h


_BLOCKS = numba.njit(nogil=True, boundscheck=False)(_blocks)
_CHAINS = numba.njit(nogil=True, boundscheck=False)(_chains)
# a disk cache where one can be written (keyed on this file: the C function the block loop
# calls is XXH3's fixed API, bound by name in _c_xxh3); otherwise compile in memory
for _kernel in (_BLOCKS, _CHAINS):
    with contextlib.suppress(Exception):
        _kernel.enable_caching()


def block_hashes(buf: bytes, n: int, stride: int, width: int, seed: int) -> U64Array:
    """``xxh3_64(buf[i * stride : i * stride + width], seed)`` for ``i < n``.

    The caller guarantees ``(n - 1) * stride + width <= len(buf)``."""
    out = np.empty(n, dtype=np.uint64)
    if n:
        _BLOCKS(np.frombuffer(buf, dtype=np.uint8), n, stride, width, np.uint64(seed), out)
    return out


def seq_hash_chains(
    flat: U64Array, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> U64Array:
    """The rolling chain over ``flat[starts[k] : starts[k] + lengths[k]]`` for every ``k``,
    in the same layout (positions no chain covers are copied from ``flat``).

    The caller guarantees that the chains lie inside ``flat`` and do not overlap."""
    flat = np.ascontiguousarray(flat, dtype=np.uint64)
    out = flat.copy()
    _CHAINS(
        flat,
        np.ascontiguousarray(starts, dtype=np.int64),
        np.ascontiguousarray(lengths, dtype=np.int64),
        out,
    )
    return out

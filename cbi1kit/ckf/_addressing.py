"""CKF addressing: a canonical sequence hash → (fingerprint, bucket a, bucket b).

Upstream ``addressing.rs`` (one version, 3de782fb). The fingerprint is the LOW 16 bits of
``xxh3_64(h_le, seed)`` (0 promoted to 1, so 0 can mean "empty slot"); bucket a is bits 16.. of
the same hash masked to the table; bucket b = a XOR delta(fp), where delta is a 2-byte xxh3 of the
fingerprint under ``seed ^ ALT_DOMAIN`` (0 promoted to 1, so a != b). Because delta depends only
on the 16-bit fingerprint, we tabulate it once per (seed, bucket_count): 65,536 entries computed in
one vectorised call, which makes ``alt`` a table lookup in the producer's sequential kick loop.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
import xxhash

from cbi1kit.errors import CkfError, CkfVariant
from cbi1kit.hashing._xxh3 import BLOCK, u64_constant, xxh3_64_u16, xxh3_u64_into

ALT_DOMAIN = 0x9E3779B97F4A7C15
_U64 = 0xFFFF_FFFF_FFFF_FFFF

U64Array = npt.NDArray[np.uint64]
U16Array = npt.NDArray[np.uint16]


def _addressing_error(bucket_count: int, seed: int, reason: str) -> CkfError:
    """``Addressing``: a bucket count or seed the CKF cannot address with."""
    return CkfError(
        CkfVariant.Addressing,
        message=f"invalid CKF addressing (bucket_count={bucket_count}, seed=0x{seed:x}): {reason}",
        bucket_count=bucket_count,
        seed=seed,
        reason=reason,
    )


@dataclass(frozen=True, slots=True)
class CkfProbe:
    """One item's representation: its fingerprint and both candidate buckets."""

    fingerprint: int
    bucket_a: int
    bucket_b: int


@dataclass(frozen=True, slots=True)
class ItemAnatomy:
    """How one item becomes a fingerprint and two buckets, step by step (``anatomy``)."""

    item: int
    seed: int
    bucket_count: int
    mixed: int  # xxh3_64 of the item's 8 little-endian bytes under the seed
    fingerprint: int
    bucket_a: int
    delta: int
    bucket_b: int

    def __str__(self) -> str:
        fp, a, b, mask = self.fingerprint, self.bucket_a, self.bucket_b, self.bucket_count - 1
        return "\n".join(
            [
                f"item         0x{self.item:016x}  (a canonical sequence hash)",
                f"xxh3_64      0x{self.mixed:016x}  (its 8 bytes little-endian, seed "
                f"0x{self.seed:x})",
                f"fingerprint  0x{fp:04x}  the low 16 bits"
                + ("" if self.mixed & 0xFFFF else " (0 made 1: 0 marks an empty slot)"),
                f"bucket a     {a}  bits 16 and up, & 0x{mask:x} ({self.bucket_count} buckets)",
                f"delta(fp)    {self.delta}  xxh3 of the fingerprint, seed ^ 0x{ALT_DOMAIN:x}, & "
                f"0x{mask:x} (0 made 1)",
                f"bucket b     {b}  a XOR delta: from (a, fp) alone, so a kick needs no item",
            ]
        )

    def to_dict(self) -> dict[str, object]:
        """The steps as JSON-ready data, 64-bit values in hex."""
        return {
            "item": f"0x{self.item:016x}",
            "seed": f"0x{self.seed:016x}",
            "mixed": f"0x{self.mixed:016x}",
            "fingerprint": self.fingerprint,
            "bucket_a": self.bucket_a,
            "delta": self.delta,
            "bucket_b": self.bucket_b,
        }


def _validate(bucket_count: int, seed: int) -> None:
    if not 0 <= seed <= _U64:
        raise _addressing_error(bucket_count, seed, "seed must be an unsigned 64-bit integer")
    if bucket_count < 2 or bucket_count & (bucket_count - 1):
        raise _addressing_error(bucket_count, seed, "bucket_count must be a power of two >= 2")
    if bucket_count > 1 << 48:
        # a and fp come from disjoint bits of one xxh3 value: at most 48 bits of bucket index.
        raise _addressing_error(bucket_count, seed, "bucket_count needs more than 48 bits")


@lru_cache(maxsize=16)
def _delta_table(bucket_count: int, seed: int) -> U64Array:
    """delta(fp) for every fp in 0..65535 (entry 0 unused: fingerprints are never 0)."""
    mask = np.uint64(bucket_count - 1)
    fps = np.arange(1 << 16, dtype=np.uint16)
    d = xxh3_64_u16(fps, seed ^ ALT_DOMAIN) & mask
    d[d == 0] = 1
    d.setflags(write=False)
    return d


#: Index of a u64's low 16-bit half in its uint16 view.
_LOW16 = 0 if sys.byteorder == "little" else 3


class CkfAddressing:
    """Addressing for one format (``bucket_count``, ``seed``); scalar and vectorised paths."""

    __slots__ = ("_delta", "_delta_list", "bucket_count", "mask", "seed")

    def __init__(self, *, seed: int, bucket_count: int) -> None:
        _validate(bucket_count, seed)
        self.bucket_count = bucket_count
        self.seed = seed
        self.mask = bucket_count - 1
        self._delta = _delta_table(bucket_count, seed)
        # Python ints for the sequential insert loop (indexing a list beats a numpy scalar).
        self._delta_list: list[int] = self._delta.tolist()

    def __repr__(self) -> str:
        return f"CkfAddressing(seed=0x{self.seed:x}, bucket_count={self.bucket_count})"

    # -- scalar ------------------------------------------------------------------------------
    def delta(self, fingerprint: int) -> int:
        """The XOR distance between an item's two buckets (>= 1)."""
        return self._delta_list[fingerprint]

    def alt(self, bucket: int, fingerprint: int) -> int:
        """The other bucket of a fingerprint in ``bucket`` (an involution; never ``bucket``)."""
        return bucket ^ self._delta_list[fingerprint]

    def prepare(self, h: int) -> CkfProbe:
        """(fingerprint, bucket_a, bucket_b) of one u64 hash."""
        fp, a, b = self.prepare_ints(h)
        return CkfProbe(fp, a, b)

    def anatomy(self, h: int) -> ItemAnatomy:
        """``prepare`` of one hash with every intermediate value, for reading it step by step."""
        mixed = xxhash.xxh3_64_intdigest(h.to_bytes(8, "little"), self.seed)
        fp, a, b = self.prepare_ints(h)
        return ItemAnatomy(h, self.seed, self.bucket_count, mixed, fp, a, self.delta(fp), b)

    def prepare_ints(self, h: int) -> tuple[int, int, int]:
        """``prepare`` as a plain tuple, for the hot sequential paths."""
        mixed = xxhash.xxh3_64_intdigest(h.to_bytes(8, "little"), self.seed)
        fp = (mixed & 0xFFFF) or 1
        a = (mixed >> 16) & self.mask
        return fp, a, a ^ self._delta_list[fp]

    # -- vectorised --------------------------------------------------------------------------
    def prepare_many(self, hashes: npt.ArrayLike) -> tuple[U16Array, U64Array, U64Array]:
        """``prepare`` over u64 hashes: (fp uint16, bucket_a uint64, bucket_b uint64).

        Runs block by block (``_xxh3.BLOCK`` hashes) with every step writing in place, so the
        mixed hash, fingerprint and both buckets of a block are produced while it is in cache.
        """
        arr = np.asarray(hashes)
        if arr.dtype != np.uint64:
            if arr.dtype.kind not in "ui":
                raise TypeError(f"expected unsigned integers, got dtype {arr.dtype}")
            arr = arr.astype(np.uint64)
        flat = np.ascontiguousarray(arr).reshape(-1)
        n = flat.size
        fp = np.empty(n, dtype=np.uint16)
        a = np.empty(n, dtype=np.uint64)
        b = np.empty(n, dtype=np.uint64)
        mixed = np.empty(min(BLOCK, n), dtype=np.uint64)
        c = u64_constant(self.seed)
        mask = np.uint64(self.mask)
        sixteen = np.uint64(16)
        one = np.uint16(1)
        delta = self._delta
        for lo in range(0, n, BLOCK):
            hi = min(lo + BLOCK, n)
            m = mixed[: hi - lo]
            ab, bb, fb = a[lo:hi], b[lo:hi], fp[lo:hi]
            xxh3_u64_into(flat[lo:hi], c, m, bb)  # b's slice is the scratch
            fb[...] = m.view(np.uint16)[_LOW16::4]  # the low 16 bits of each u64
            np.maximum(fb, one, out=fb)  # 0 -> 1
            np.right_shift(m, sixteen, out=ab)
            ab &= mask
            np.take(delta, fb, out=bb)
            bb ^= ab
        shape = arr.shape
        return fp.reshape(shape), a.reshape(shape), b.reshape(shape)

    def alt_many(self, buckets: npt.ArrayLike, fingerprints: npt.ArrayLike) -> U64Array:
        """``alt`` over arrays of buckets and (nonzero) fingerprints."""
        bk = np.asarray(buckets).astype(np.uint64, copy=False)
        fp = np.asarray(fingerprints).astype(np.uint16, copy=False)
        out: U64Array = bk ^ self._delta[fp]
        return out

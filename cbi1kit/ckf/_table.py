"""The producer's cuckoo table: SplitMix64 RNG, insert with bounded relocation, delete.

Upstream ``mutator.rs`` (same in all three stored versions). The RNG advances as upstream: one
draw picks the kick start bucket (even with ``max_kicks == 0``), one per kick the victim slot; a
failed insert rolls every write back but keeps the RNG ``1 + max_kicks`` draws on. The walk is
one compiled kernel (``_kick``); whole-lane work uses numpy via :meth:`CuckooTable.words`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.errors import CkfError, CkfVariant

SPLITMIX_INCREMENT = 0x9E3779B97F4A7C15
DEFAULT_MAX_KICKS = 500
MAX_KICKS = 4096
_U64 = 0xFFFF_FFFF_FFFF_FFFF
_SLOT = 0xFFFF


class SplitMix64:
    """SplitMix64 with its state exposed (the producer's RNG is part of its state)."""

    __slots__ = ("state",)

    def __init__(self, state: int) -> None:
        self.state = state & _U64

    def __repr__(self) -> str:
        return f"SplitMix64(state=0x{self.state:016x})"

    def next(self) -> int:
        """Advance and return the next 64-bit output."""
        self.state = z = (self.state + SPLITMIX_INCREMENT) & _U64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
        return z ^ (z >> 31)


def lane_rng_seed(seed: int, lane: int = 0) -> int:
    """Initial RNG state for a lane: one SplitMix64 output from ``seed ^ (lane+1)·INC``.

    The G3 producer uses lane 0; G2's per-lane relays used their lane index.
    """
    return SplitMix64(seed ^ (((lane + 1) * SPLITMIX_INCREMENT) & _U64)).next()


_u64 = np.uint64
#: The compiled insert and insert-many, once ``_kick`` is loaded: on the first insert, so that
#: ``import cbi1kit`` does not load numba.
_KERNELS: dict[str, Any] = {}


def _kernels() -> dict[str, Any]:
    if not _KERNELS:
        from cbi1kit.ckf._kick import insert_kernel, insert_many_kernel

        _KERNELS.update(insert=insert_kernel(), many=insert_many_kernel())
    return _KERNELS


def _first(word: int, value: int) -> int:
    """Lowest slot holding ``value`` or -1 (inlined hot-path helper)."""
    if word & _SLOT == value:
        return 0
    if (word >> 16) & _SLOT == value:
        return 1
    if (word >> 32) & _SLOT == value:
        return 2
    if (word >> 48) & _SLOT == value:
        return 3
    return -1


class CuckooTable:
    """One filter lane of packed bucket words plus the addressing that fills it.

    ``insert`` / ``delete`` report every write as ``(bucket, word_before)`` in write order so a
    caller (the producer's publication window) can keep the first "before" per bucket.
    """

    __slots__ = (
        "_t_before",
        "_t_bucket",
        "_words",
        "addressing",
        "deletes",
        "insert_failures",
        "inserts",
    )

    def __init__(self, addressing: CkfAddressing, words: npt.ArrayLike | None = None) -> None:
        self.addressing = addressing
        if words is None:
            self._words = np.zeros(addressing.bucket_count, dtype=np.uint64)
        else:
            arr = np.array(words, dtype=np.uint64)  # a copy: the table owns its words
            if arr.shape != (addressing.bucket_count,):
                n = addressing.bucket_count
                why = f"expected {n} words, got array of shape {arr.shape}"
                raise CkfError(CkfVariant.Usage, why, field="words", expected=n, actual=arr.shape)
            self._words = arr
        # the kernel's record of its writes: (bucket, word before), one per kick plus one
        self._t_bucket = np.zeros(MAX_KICKS + 1, dtype=np.int64)
        self._t_before = np.zeros(MAX_KICKS + 1, dtype=np.uint64)
        self.inserts = 0
        self.deletes = 0
        self.insert_failures = 0

    @property
    def bucket_count(self) -> int:
        """Buckets in the lane (the addressing's)."""
        return self.addressing.bucket_count

    def word(self, bucket: int) -> int:
        """Bucket ``bucket``'s packed word (four 16-bit slots) as a Python int."""
        return int(self._words[bucket])

    def words(self) -> npt.NDArray[np.uint64]:
        """A copy of every word, bucket order, as uint64."""
        return self._words.copy()

    def words_list(self) -> list[int]:
        """A copy of every word as Python ints."""
        return self._words.tolist()

    def contains(self, item: int) -> bool:
        """Whether the item's fingerprint is in either of its buckets (may be a false positive)."""
        return self.bucket_of(item) is not None

    def bucket_of(self, item: int) -> int | None:
        """The bucket holding the item's fingerprint, bucket a before b; None where neither."""
        fp, a, b = self.addressing.prepare_ints(item)
        for bucket in (a, b):
            if _first(int(self._words[bucket]), fp) >= 0:
                return bucket
        return None

    def insert(self, item: int, rng: SplitMix64, max_kicks: int) -> list[tuple[int, int]] | None:
        """Insert one item; return the writes ``[(bucket, before), ...]`` or None on failure.

        On failure the words are restored exactly (reverse order) and nothing is reported, but
        ``rng`` has advanced by ``1 + max_kicks`` draws, as upstream.
        """
        fp, a, b = self.addressing.prepare_ints(item)
        return self.insert_prepared(fp, a, b, rng, max_kicks)

    def insert_prepared(
        self, fp: int, a: int, b: int, rng: SplitMix64, max_kicks: int
    ) -> list[tuple[int, int]] | None:
        """``insert`` for an already-prepared (fingerprint, bucket_a, bucket_b)."""
        if not 0 <= max_kicks <= MAX_KICKS:
            raise CkfError(
                CkfVariant.InvalidMaxKicks, f"max_kicks {max_kicks} is outside 0..={MAX_KICKS}"
            )
        # the buckets and the budget go in as Python ints (numba types them int64, as the
        # kernel takes them); the fingerprint and the RNG state as uint64, never int64
        n, state = (_KERNELS.get("insert") or _kernels()["insert"])(
            self._words,
            self.addressing._delta,
            _u64(fp),
            a,
            b,
            _u64(rng.state),
            max_kicks,
            self._t_bucket,
            self._t_before,
        )
        rng.state = int(state)
        if n < 0:
            self.insert_failures += 1
            return None
        self.inserts += 1
        if n == 1:  # a free slot in a or b: most inserts
            return [(int(self._t_bucket[0]), int(self._t_before[0]))]
        return list(zip(self._t_bucket[:n].tolist(), self._t_before[:n].tolist(), strict=True))

    def insert_many(
        self,
        fps: npt.ArrayLike,
        a: npt.ArrayLike,
        b: npt.ArrayLike,
        rng: SplitMix64,
        max_kicks: int,
    ) -> int:
        """Insert prepared items in order, up to the first that fails; how many went in.

        Same words and RNG state as ``insert_prepared`` per item, in one compiled call that does
        not report writes (for filling a table). A failed item is rolled back and counted in
        ``insert_failures``; later items are not offered.
        """
        if not 0 <= max_kicks <= MAX_KICKS:
            raise CkfError(
                CkfVariant.InvalidMaxKicks, f"max_kicks {max_kicks} is outside 0..={MAX_KICKS}"
            )
        f = np.ascontiguousarray(fps, dtype=np.uint64)
        x = np.ascontiguousarray(a, dtype=np.int64)
        y = np.ascontiguousarray(b, dtype=np.int64)
        if not f.shape == x.shape == y.shape or f.ndim != 1:
            why = "fps, a and b must be 1-D and of one length"
            raise CkfError(CkfVariant.Usage, why, field="fps")
        n, state = _kernels()["many"](
            self._words,
            self.addressing._delta,
            f,
            x,
            y,
            _u64(rng.state),
            max_kicks,
            self._t_bucket,
            self._t_before,
        )
        rng.state = int(state)
        self.inserts += int(n)
        if n < f.shape[0]:
            self.insert_failures += 1
        return int(n)

    def delete(self, item: int) -> tuple[int, int]:
        """Clear the lowest slot equal to the item's fingerprint, bucket a before b.

        Returns the write ``(bucket, before)``; raises FingerprintNotFoundError if absent.
        """
        fp, a, b = self.addressing.prepare_ints(item)
        words = self._words
        for bk in (a, b):
            w = int(words[bk])
            i = _first(w, fp)
            if i >= 0:
                words[bk] = w & ~(_SLOT << (16 * i)) & _U64
                self.deletes += 1
                return (bk, w)
        raise CkfError(
            CkfVariant.FingerprintNotFound,
            message=f"fingerprint {fp} of item 0x{item:016x} is in neither bucket {a} nor {b}: "
            "the table and its ownership records disagree",
            item=item,
            fingerprint=fp,
            bucket_a=a,
            bucket_b=b,
        )

"""Consumer-side snapshot assembly: ordered chunks in, one complete lane out.

The rules are upstream ``SnapshotAssembly::absorb``'s, quirks included: chunk 0 always restarts
(a repeated chunk 0 or a new epoch silently resets), any other out-of-sequence chunk resets and
fails with ``ChunkSequence``, a delta fails *without* resetting, and a last chunk that leaves
buckets uncovered resets and fails with ``IncompleteCoverage``.

Upstream accumulates the sparse list of nonzero images. Here the assembly keeps each chunk's
word array (a zero-copy view when the frame bytes are immutable, a copy when the caller's buffer
could change under it) and derives the lane, the nonzero images or a copy into the consumer's own
lane on request: the same result, and the bytes are touched once more only when someone needs them.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import numpy.typing as npt

from cbi1kit.errors import Cbi1Error
from cbi1kit.wire._codec import IMAGE_DTYPE, Frame, SnapshotChunk
from cbi1kit.wire._format import U32_MAX, FilterFormat

__all__ = ["AssembledSnapshot", "SnapshotAssembly"]

Words = npt.NDArray[np.uint64]


def _stable(words: Words) -> Words:
    """The words themselves if they sit on immutable bytes, else a private copy."""
    base: object = words.base
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview) and base.readonly:
        return words
    return words.copy()


class AssembledSnapshot:
    """A complete snapshot: ``epoch`` plus the lane, held as its chunks' word arrays."""

    __slots__ = ("__dict__", "bucket_count", "epoch", "parts")

    def __init__(self, epoch: int, bucket_count: int, parts: list[tuple[int, Words]]) -> None:
        self.epoch = epoch
        self.bucket_count = bucket_count
        self.parts = parts  # (bucket_offset, words), contiguous, covering the lane

    @cached_property
    def words(self) -> Words:
        """The dense lane (``uint64``); one chunk is returned as is, more are concatenated."""
        if len(self.parts) == 1:
            return self.parts[0][1]
        return np.concatenate([w for _, w in self.parts])

    def copy_into(self, lane: Words) -> None:
        """Write the lane into ``lane`` (the consumer's own array) chunk by chunk."""
        if lane.shape != (self.bucket_count,):
            raise ValueError(f"lane has shape {lane.shape}, snapshot has {self.bucket_count}")
        for offset, words in self.parts:
            lane[offset : offset + words.shape[0]] = words

    @cached_property
    def images(self) -> npt.NDArray[np.void]:
        """Nonzero buckets as (bucket, word) images in bucket order: upstream's result."""
        pieces = []
        for offset, words in self.parts:
            nz = np.flatnonzero(words)
            piece = np.empty(nz.shape[0], dtype=IMAGE_DTYPE)
            piece["bucket"] = nz + offset
            piece["word"] = words[nz]
            pieces.append(piece)
        return np.concatenate(pieces) if pieces else np.empty(0, dtype=IMAGE_DTYPE)

    @property
    def image_count(self) -> int:
        return sum(int(np.count_nonzero(w)) for _, w in self.parts)

    def __repr__(self) -> str:
        return (
            f"AssembledSnapshot(epoch={self.epoch}, buckets={self.bucket_count}, "
            f"chunks={len(self.parts)})"
        )


class SnapshotAssembly:
    """Absorbs one snapshot's chunks in order; returns an ``AssembledSnapshot`` at the last."""

    def __init__(self, fmt: FilterFormat) -> None:
        self.format = fmt
        self.bucket_count = fmt.bucket_count
        self.reset()

    def reset(self) -> None:
        """Forget any partial snapshot."""
        self.epoch = 0
        self.chunk_count = 0
        self.next_chunk = 0
        self.next_bucket = 0
        self._parts: list[tuple[int, Words]] = []

    @property
    def in_progress(self) -> bool:
        return self.next_chunk != 0

    def _fail_sequence(self, chunk: SnapshotChunk, why: str) -> Cbi1Error:
        self.reset()
        return Cbi1Error(
            "ChunkSequence",
            f"chunk {chunk.chunk_index}/{chunk.chunk_count} at epoch {chunk.header.epoch}: {why}",
            field="snapshot.chunk_index",
        )

    def absorb(self, frame: Frame) -> AssembledSnapshot | None:
        """Take the next frame; ``None`` while chunks remain, the snapshot after the last."""
        if not isinstance(frame, SnapshotChunk):
            raise Cbi1Error(
                "ChunkSequence",
                "a delta arrived while assembling a snapshot (assembly kept)",
                field="frame.kind",
                expected="SnapshotChunk",
                actual="Delta",
            )
        index, count = frame.chunk_index, frame.chunk_count
        if count == 0 or index >= count:
            raise self._fail_sequence(frame, "chunk_index is not below a nonzero chunk_count")
        if index == 0:
            self.reset()
            self.epoch = frame.header.epoch
            self.chunk_count = count
        if index != self.next_chunk:
            raise self._fail_sequence(frame, f"expected chunk {self.next_chunk}")
        if count != self.chunk_count:
            raise self._fail_sequence(frame, f"chunk_count changed from {self.chunk_count}")
        if frame.header.epoch != self.epoch:
            raise self._fail_sequence(frame, f"epoch changed from {self.epoch}")
        if frame.header.bucket_count != self.bucket_count:
            raise self._fail_sequence(
                frame,
                f"frame declares {frame.header.bucket_count} buckets, lane has {self.bucket_count}",
            )
        if frame.bucket_offset != self.next_bucket:
            raise self._fail_sequence(
                frame, f"bucket_offset {frame.bucket_offset}, expected {self.next_bucket}"
            )
        end = self.next_bucket + frame.word_count
        if end > U32_MAX + 1 and bool(np.any(frame.words[U32_MAX + 1 - self.next_bucket :])):
            self.reset()  # upstream: a nonzero word past bucket u32::MAX is Malformed
            raise Cbi1Error(
                "Malformed", "a nonzero word lies beyond bucket u32::MAX", field="snapshot"
            )
        self._parts.append((self.next_bucket, _stable(frame.words)))
        self.next_bucket = end
        self.next_chunk += 1
        if self.next_chunk != self.chunk_count:
            return None
        if self.next_bucket != self.bucket_count:
            covered = self.next_bucket
            self.reset()
            raise Cbi1Error(
                "IncompleteCoverage",
                f"chunks covered {covered} of {self.bucket_count} buckets",
                field="snapshot.words",
                expected=self.bucket_count,
                actual=covered,
            )
        done = AssembledSnapshot(self.epoch, self.bucket_count, self._parts)
        self.reset()
        return done

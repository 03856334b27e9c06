"""Consumer-side snapshot assembly: ordered chunks in, one complete lane out.

The rules are upstream ``SnapshotAssembly::absorb``'s, quirks included: chunk 0 always restarts
(a repeated chunk 0 or a new epoch silently resets), any other out-of-sequence chunk resets and
fails with ``ChunkSequence``, a delta fails *without* resetting, and a last chunk that leaves
buckets uncovered resets and fails with ``IncompleteCoverage``.

Upstream accumulates the sparse list of nonzero images. Here each chunk's words go straight into
one contiguous lane as the chunk arrives (allocated at the first chunk, or the consumer's own
array given as ``into``), so the finished snapshot's ``words`` is that lane, with no second copy,
and the memory held is the lane plus the chunk being absorbed. ``absorb`` takes a decoded
``SnapshotChunk`` (one copy: ``decode`` already hashed it) or the frame's bytes, which it decodes
itself: the body's checksum is computed block by block as each block is copied into the lane
(the block hashed is still in cache when it is copied), one pass over the bytes. Every check
runs in ``decode``'s then ``absorb``'s order either way: a frame that fails any of them takes
the two-step path, which raises exactly what ``decode`` then ``absorb`` of a decoded frame would.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import numpy.typing as npt
import xxhash

from cbi1kit.errors import Cbi1Error
from cbi1kit.wire._codec import (
    _HEADER,
    _SNAPSHOT_PREFIX,
    IMAGE_DTYPE,
    Buffer,
    Delta,
    Frame,
    SnapshotChunk,
    _check_envelope,
    _checksum_error,
    decode,
)
from cbi1kit.wire._format import (
    FINGERPRINT_BITS,
    FORMAT_VERSION,
    HEADER_LEN,
    MAX_BUCKET_COUNT,
    SLOTS_PER_BUCKET,
    SNAPSHOT_BODY_PREFIX,
    SNAPSHOT_CHUNK_BUCKETS,
    U32_MAX,
    WORD_BYTES,
    FilterFormat,
    FrameKind,
)

__all__ = ["AssembledSnapshot", "SnapshotAssembly"]

Words = npt.NDArray[np.uint64]

#: Bytes hashed then copied at a time by the one-pass path: 256 KiB, read from memory by the
#: hash and copied while still in L2 (measured with ``benchmarks/bench_wire.py``: 64 KiB
#: blocks cost more in calls, 1 MiB ones fall out of L2).
COPY_BLOCK = 1 << 18


class AssembledSnapshot:
    """A complete snapshot: ``epoch`` and the contiguous lane ``words``."""

    __slots__ = ("__dict__", "_bounds", "bucket_count", "epoch", "words")

    def __init__(
        self, epoch: int, bucket_count: int, words: Words, bounds: list[tuple[int, int]]
    ) -> None:
        self.epoch = epoch
        self.bucket_count = bucket_count
        self.words = words  # the dense lane (uint64), filled chunk by chunk as they arrived
        self._bounds = bounds  # (bucket_offset, word_count) of each chunk, in order

    @property
    def parts(self) -> list[tuple[int, Words]]:
        """Each chunk's ``(bucket_offset, words)``: views of the lane, in chunk order."""
        return [(offset, self.words[offset : offset + n]) for offset, n in self._bounds]

    @property
    def chunk_count(self) -> int:
        return len(self._bounds)

    def copy_into(self, lane: Words) -> None:
        """Write the lane into ``lane`` (the consumer's own array); nothing to do when the
        assembly already wrote into it (``SnapshotAssembly(fmt, into=lane)``)."""
        if lane.shape != (self.bucket_count,):
            raise ValueError(f"lane has shape {lane.shape}, snapshot has {self.bucket_count}")
        if lane is not self.words:
            np.copyto(lane, self.words)

    @cached_property
    def images(self) -> npt.NDArray[np.void]:
        """Nonzero buckets as (bucket, word) images in bucket order: upstream's result."""
        nz = np.flatnonzero(self.words)
        out = np.empty(nz.shape[0], dtype=IMAGE_DTYPE)
        out["bucket"] = nz
        out["word"] = self.words[nz]
        return out

    @property
    def image_count(self) -> int:
        return int(np.count_nonzero(self.words))

    def __repr__(self) -> str:
        return (
            f"AssembledSnapshot(epoch={self.epoch}, buckets={self.bucket_count}, "
            f"chunks={len(self._bounds)})"
        )


class SnapshotAssembly:
    """Absorbs one snapshot's chunks in order; returns an ``AssembledSnapshot`` at the last.

    ``into``: the consumer's own ``uint64[bucket_count]`` lane to assemble in (every snapshot
    is written there; its contents are undefined from a snapshot's first chunk until that
    snapshot completes). Without it each snapshot gets a new lane, allocated at its chunk 0.
    """

    def __init__(self, fmt: FilterFormat, *, into: Words | None = None) -> None:
        self.format = fmt
        self.bucket_count = fmt.bucket_count
        if into is not None and (
            into.shape != (fmt.bucket_count,)
            or into.dtype != np.uint64
            or not into.flags.c_contiguous
            or not into.flags.writeable
        ):
            raise ValueError(
                f"into must be a writeable, contiguous uint64[{fmt.bucket_count}] array"
            )
        self._into = into
        self._lane: Words | None = None  # the lane being filled, until it is handed out
        self.reset()

    def reset(self) -> None:
        """Forget any partial snapshot (its lane is reused by the next one)."""
        self.epoch = 0
        self.chunk_count = 0
        self.next_chunk = 0
        self.next_bucket = 0
        self._bounds: list[tuple[int, int]] = []

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

    def _target(self, end: int) -> Words:
        """The lane, with room for buckets up to ``end`` (capped at the lane's size)."""
        lane = self._lane
        if lane is None:
            if self._into is not None:
                lane = self._into
            else:
                # a lane of a checked format is allocated whole; beyond 2^24 buckets (a format
                # built unchecked) it grows as chunks cover it
                n = self.bucket_count if self.bucket_count <= MAX_BUCKET_COUNT else 0
                lane = np.empty(n, dtype=np.uint64)
            self._lane = lane
        need = min(end, self.bucket_count)
        if lane.shape[0] < need:
            grown = np.empty(min(max(need, 2 * lane.shape[0]), self.bucket_count), np.uint64)
            grown[: self.next_bucket] = lane[: self.next_bucket]
            lane = self._lane = grown
        return lane

    def absorb(self, frame: Frame | Buffer) -> AssembledSnapshot | None:
        """Take the next frame; ``None`` while chunks remain, the snapshot after the last.

        ``frame`` is a decoded frame or a frame's bytes (decoded here against this assembly's
        format, the checksum verified as the words are copied into the lane)."""
        if not isinstance(frame, (SnapshotChunk, Delta)):
            return self._absorb_bytes(frame)
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
        start, n = self.next_bucket, frame.word_count
        end = start + n
        if end > U32_MAX + 1 and bool(np.any(frame.words[U32_MAX + 1 - start :])):
            self.reset()  # upstream: a nonzero word past bucket u32::MAX is Malformed
            raise Cbi1Error(
                "Malformed", "a nonzero word lies beyond bucket u32::MAX", field="snapshot"
            )
        # words past the lane's end (a constructed chunk) cannot complete it: not kept
        fit = max(0, min(end, self.bucket_count) - start)
        if fit:
            np.copyto(self._target(end)[start : start + fit], frame.words[:fit])
        return self._advance(start, n)

    def _advance(self, start: int, n: int) -> AssembledSnapshot | None:
        """Chunk ``next_chunk`` (``n`` words at ``start``) is in the lane: move on."""
        self._bounds.append((start, n))
        self.next_bucket = start + n
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
        lane = self._target(self.bucket_count)
        done = AssembledSnapshot(self.epoch, self.bucket_count, lane, self._bounds)
        self._lane = None  # handed out: the next snapshot gets a new lane (or ``into`` again)
        self.reset()
        return done

    def _absorb_bytes(self, data: Buffer) -> AssembledSnapshot | None:
        """A frame's bytes: the one-pass path when every check passes, else decode + absorb."""
        view = memoryview(data).cast("B")
        plan = self._plan(view)
        if plan is None:  # anything but a chunk that fits next: decode's errors, then ours
            return self.absorb(decode(self.format, view))
        epoch, count, start, n, checksum = plan
        begin = HEADER_LEN + SNAPSHOT_BODY_PREFIX
        h = xxhash.xxh3_64(view[HEADER_LEN:begin])
        # the lane's bytes from ``start``: memoryview slices copy with memcpy, at a fraction of
        # the call overhead of numpy slicing (it shows at 4 MiB a chunk)
        dst = self._target(start + n).data.cast("B")[start * WORD_BYTES :]
        end = begin + n * WORD_BYTES
        at = 0
        for i in range(begin, end, COPY_BLOCK):
            piece = view[i : min(i + COPY_BLOCK, end)]
            h.update(piece)
            size = len(piece)
            dst[at : at + size] = piece
            at += size
        actual = h.intdigest() & 0xFFFFFFFF
        if actual != checksum:
            # decode would have refused the frame before the assembly saw it: state kept (the
            # words written lie past ``next_bucket``, where nothing assembled lives yet)
            raise _checksum_error(checksum, actual)
        if start == 0:
            self.reset()
            self.epoch = epoch
            self.chunk_count = count
        return self._advance(start, n)

    def _plan(self, view: memoryview) -> tuple[int, int, int, int, int] | None:
        """(epoch, chunk_count, start, word_count, checksum) of a chunk that passes every
        check but the checksum and is the next one, to be written at ``start`` without
        touching what is assembled; ``None`` for anything else."""
        if len(view) < HEADER_LEN + SNAPSHOT_BODY_PREFIX:
            return None
        try:
            _check_envelope(view)
        except Cbi1Error:
            return None
        (_m, _v, flags, fp_bits, slots, version, seed, buckets, _dc, epoch, checksum) = (
            _HEADER.unpack_from(view)
        )
        if (
            flags != FrameKind.SNAPSHOT_CHUNK
            or version != FORMAT_VERSION
            or fp_bits != FINGERPRINT_BITS
            or slots != SLOTS_PER_BUCKET
            or seed != self.format.seed
            or buckets != self.bucket_count
        ):
            return None
        index, count, offset = _SNAPSHOT_PREFIX.unpack_from(view, HEADER_LEN)
        words_len = len(view) - HEADER_LEN - SNAPSHOT_BODY_PREFIX
        n = words_len // WORD_BYTES
        if (
            count == 0
            or index >= count
            or words_len % WORD_BYTES
            or n > SNAPSHOT_CHUNK_BUCKETS
            or offset + n > buckets
            or offset + n > U32_MAX + 1
        ):
            return None
        if index == 0:
            # a restart while another snapshot is in progress is verified before it is written
            # (a corrupt chunk 0 must leave that snapshot's chunk 0 intact)
            ok = offset == 0 and not self.in_progress
        else:
            ok = (
                index == self.next_chunk
                and count == self.chunk_count
                and epoch == self.epoch
                and offset == self.next_bucket
            )
        return (epoch, count, offset, n, checksum) if ok else None

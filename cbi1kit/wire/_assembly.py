"""Consumer-side snapshot assembly: ordered chunks in, one complete lane out.

The rules are upstream ``SnapshotAssembly::absorb``'s, quirks included (docs/spec/cbi1.md,
"Snapshot assembly"). Instead of upstream's sparse image list, each chunk's words go straight into
one lane (allocated at the first chunk, or ``into``) that becomes the snapshot's ``words``.
``absorb`` takes a decoded ``SnapshotChunk`` or the frame's bytes, checksumming each block as it
copies it; past ``STREAM_LANE_BYTES`` that pass is a numba kernel with cache-bypassing stores,
compiled on first use (``_hash_copy_reference`` is its tested Python path). A frame failing any
check takes the two-step path and raises exactly what ``decode`` then ``absorb`` would.
"""

from __future__ import annotations

import contextlib
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from cbi1kit.errors import Cbi1Error, Cbi1Variant
from cbi1kit.wire._codec import _check_envelope, _checksum_error, decode
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
from cbi1kit.wire._frames import (
    _HEADER,
    _SNAPSHOT_PREFIX,
    IMAGE_DTYPE,
    Buffer,
    Delta,
    Frame,
    SnapshotChunk,
)

Words = npt.NDArray[np.uint64]

#: Bytes hashed then copied at a time by the one-pass path in Python: 256 KiB, read from memory
#: by the hash and copied while still in L2 (measured with ``benchmarks/bench_wire.py``: 64 KiB
#: blocks cost more in calls, 1 MiB ones fall out of L2).
COPY_BLOCK = 1 << 18
#: A lane at least this large is filled by the compiled kernel (:func:`_hash_copy_kernel`),
#: whose stores bypass the cache: such a lane is not read back from cache anyway, and a plain
#: store first reads every line it fills, a third of a copy's memory traffic. A smaller lane
#: keeps the Python path (its next reader finds it in cache).
STREAM_LANE_BYTES = 16 << 20
#: Bytes the kernel hashes, then copies from L1/L2, at a time (``bench_wire``: 4 to 16 KiB
#: alike, 64 KiB slower).
KERNEL_STEP = 1 << 13


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
        """How many chunks the snapshot arrived in."""
        return len(self._bounds)

    def copy_into(self, lane: Words) -> None:
        """Write the lane into ``lane`` (the consumer's own array); nothing to do when the
        assembly already wrote into it (``SnapshotAssembly(fmt, into=lane)``)."""
        if lane.shape != (self.bucket_count,):
            why = f"lane has shape {lane.shape}, snapshot has {self.bucket_count}"
            raise Cbi1Error(Cbi1Variant.LaneArray, field="lane", actual=lane.shape, message=why)
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
        """Nonzero buckets in the lane (the length of :attr:`images`)."""
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
            why = f"into must be a writeable, contiguous uint64[{fmt.bucket_count}] array"
            raise Cbi1Error(Cbi1Variant.LaneArray, field="into", actual=into.shape, message=why)
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
        """A snapshot has begun (chunk 0 absorbed) and not yet completed."""
        return self.next_chunk != 0

    def _fail_sequence(self, chunk: SnapshotChunk, why: str) -> Cbi1Error:
        self.reset()
        return Cbi1Error(
            Cbi1Variant.ChunkSequence,
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
                Cbi1Variant.ChunkSequence,
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
                Cbi1Variant.Malformed,
                "a nonzero word lies beyond bucket u32::MAX",
                field="snapshot",
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
                Cbi1Variant.IncompleteCoverage,
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
        actual = _hash_copy(view, self._target(start + n), start) & 0xFFFFFFFF
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


# ------------------------------------------------------------------- one pass: hash and copy


def _hash_copy(view: memoryview, lane: Words, start: int) -> int:
    """XXH3-64 of the chunk frame's body, its words copied into ``lane`` from bucket ``start``
    as they are hashed: by the kernel into a lane of ``STREAM_LANE_BYTES`` or more (where it
    loads), else by :func:`_hash_copy_reference`."""
    begin = HEADER_LEN + SNAPSHOT_BODY_PREFIX
    at = start * WORD_BYTES
    dst = lane.view(np.uint8)[at : at + len(view) - begin]
    kernel = _kernel() if lane.nbytes >= STREAM_LANE_BYTES else None
    if kernel is None:
        return _hash_copy_reference(view, begin, dst.data)
    frame = np.frombuffer(view, np.uint8)
    frame.flags.writeable = False  # one compiled signature, whatever the buffer
    state = np.empty(_STATE_BYTES + 64, dtype=np.uint8)
    return int(kernel(frame, HEADER_LEN, begin, dst, state))


def _hash_copy_reference(frame: memoryview, begin: int, dst: memoryview) -> int:
    """XXH3-64 of ``frame[HEADER_LEN:]``, ``frame[begin:]`` copied into ``dst`` block by block
    (each block hashed, then copied while it is in L2): the kernel's Python reference."""
    h = xxhash.xxh3_64(frame[HEADER_LEN:begin])
    # memoryview slices copy with memcpy, at a fraction of numpy slicing's call overhead
    for at in range(0, len(frame) - begin, COPY_BLOCK):
        piece = frame[begin + at : begin + at + COPY_BLOCK]
        h.update(piece)
        dst[at : at + len(piece)] = piece
    return int(h.intdigest())


# The kernel's helpers, bound by ``_load_kernel`` (numba reads a kernel's globals when it
# compiles it; binding them at import would load numba with this module): python-xxhash's C
# XXH3 streaming calls (and the size of their state), a 16-byte store past the cache, a fence.
_c_reset: Any = None
_c_update: Any = None
_c_digest: Any = None
_STATE_BYTES: int = 0
_stream16: Any = None
_fence: Any = None


def _hash_copy_kernel(frame: Any, head: int, begin: int, dst: Any, memory: Any) -> Any:
    """What :func:`_hash_copy_reference` does, compiled (numba): XXH3-64 of ``frame[head:]``
    (its streaming state in ``memory``), each step of ``KERNEL_STEP`` bytes from ``begin``
    hashed, then copied from cache into ``dst`` with 16-byte stores that bypass it (``dst``'s
    unaligned ends byte by byte). numba keys its cache on this file alone: the only constant
    compiled in is ``KERNEL_STEP``, the rest come as arguments."""
    state = (np.uint64(memory.ctypes.data) + np.uint64(63)) & ~np.uint64(63)
    src, out = np.uint64(frame.ctypes.data), np.uint64(dst.ctypes.data)
    _c_reset(state)
    _c_update(state, src + np.uint64(head), begin - head)
    n = frame.shape[0] - begin
    for pos in range(0, n, KERNEL_STEP):
        end = min(pos + KERNEL_STEP, n)
        _c_update(state, src + np.uint64(begin + pos), end - pos)
        k = pos
        while k < end and (out + np.uint64(k)) % np.uint64(16) != 0:
            dst[k] = frame[begin + k]
            k += 1
        while k + 16 <= end:
            _stream16(out + np.uint64(k), src + np.uint64(begin + k))
            k += 16
        while k < end:
            dst[k] = frame[begin + k]
            k += 1
    _fence()  # the streamed stores are weakly ordered: done before anything after the call
    return _c_digest(state)


_KERNEL: list[Any] = []  # empty until first asked for; then the kernel, or None


def _kernel() -> Any:
    """The compiled kernel (compiled, or loaded from its cache beside this file, on first
    use); ``None`` where numba or python-xxhash's C XXH3 cannot be loaded."""
    if not _KERNEL:
        _KERNEL.append(_load_kernel())
    return _KERNEL[0]


def _load_kernel() -> Any:
    """numba and the C XXH3 imported, the kernel's helpers bound, the kernel made (it
    compiles, or loads from its disk cache, at its first call)."""
    try:
        import numba

        from cbi1kit.hashing import _c_xxh3
    except ImportError:
        return None
    stream16, fence = _intrinsics()
    globals().update(
        _c_reset=_c_xxh3.c_reset,
        _c_update=_c_xxh3.c_update,
        _c_digest=_c_xxh3.c_digest,
        _STATE_BYTES=_c_xxh3.STATE_BYTES,
        _stream16=stream16,
        _fence=fence,
    )
    kernel = numba.njit(nogil=True, boundscheck=False)(_hash_copy_kernel)
    with contextlib.suppress(Exception):  # a disk cache where one can be written
        kernel.enable_caching()
    return kernel


def _intrinsics() -> tuple[Any, Any]:
    """``stream16(dst, src)``: 16 bytes from ``src`` (any alignment) to ``dst`` (16-aligned),
    stored past the cache; ``fence()``: every store before it done before any after it."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    def stream16(typingctx: Any, dst: Any, src: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
            vector = ir.VectorType(ir.IntType(64), 2).as_pointer()
            value = builder.load(builder.inttoptr(args[1], vector), align=1)
            store = builder.store(value, builder.inttoptr(args[0], vector), align=16)
            store.set_metadata("nontemporal", builder.module.add_metadata([ir.IntType(32)(1)]))

        return types.void(types.uint64, types.uint64), codegen

    def fence(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
            builder.fence("seq_cst")

        return types.void(), codegen

    return intrinsic(stream16), intrinsic(fence)

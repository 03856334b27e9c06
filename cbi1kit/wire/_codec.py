"""CBI1 frames: encode and decode with every check upstream makes, in upstream's order.

Bodies are numpy views over the caller's buffer (no per-word Python work): a snapshot chunk's
words are a read-only ``<u8`` array, a delta's images a packed 12-byte structured array. The
decoder raises the exact upstream variant (see ``cbi1kit.errors``) with the byte offset and field
path of what it rejected. ``decode_deltas`` decodes many deltas in one call (a ``DeltaBatch``):
the same checks and errors, without the per-call cost that bounds ``decode`` on small frames.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, repeat
from operator import getitem
from typing import Any, TypeAlias, TypeVar, cast

import numpy as np
import numpy.typing as npt
import xxhash

from cbi1kit.errors import Cbi1Error, Cbi1Variant
from cbi1kit.wire._format import (
    DELTA_BODY_PREFIX,
    FINGERPRINT_BITS,
    FORMAT_VERSION,
    HEADER_LEN,
    IMAGE_BYTES,
    IMAGES_MAX_FRAME_BYTES,
    LEGACY_MAGIC,
    MAGIC,
    SLOTS_PER_BUCKET,
    SNAPSHOT_BODY_PREFIX,
    SNAPSHOT_CHUNK_BUCKETS,
    U32_MAX,
    U64_MAX,
    WIRE_VERSION,
    WORD_BYTES,
    FilterFormat,
    FrameKind,
    max_delta_images,
)
from cbi1kit.wire._layout import DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX, Layout

__all__ = [
    "IMAGE_DTYPE",
    "Buffer",
    "Delta",
    "DeltaBatch",
    "Frame",
    "FrameHeader",
    "SnapshotChunk",
    "SnapshotChunks",
    "body_checksum",
    "decode",
    "decode_deltas",
    "encode_delta",
    "encode_snapshot_chunk",
    "encode_snapshot_chunks",
    "peek_format",
]

#: One delta image exactly as on the wire: bucket u32 LE then word u64 LE, 12 bytes, no padding.
IMAGE_DTYPE: np.dtype[np.void] = np.dtype([("bucket", "<u4"), ("word", "<u8")])
assert IMAGE_DTYPE.itemsize == IMAGE_BYTES

Buffer: TypeAlias = bytes | bytearray | memoryview
ImagesLike: TypeAlias = "npt.NDArray[np.void] | Sequence[tuple[int, int]]"

_HEADER = HEADER.codec
_DELTA_PREFIX = DELTA_PREFIX.codec
_SNAPSHOT_PREFIX = SNAPSHOT_PREFIX.codec
_OFF = {f.name: f.offset for f in HEADER}
_CHECKSUM_OFFSET = _OFF["body_checksum"]
_xxh3_64 = xxhash.xxh3_64_intdigest


def body_checksum(frame: Buffer) -> int:
    """Low 32 bits of ``xxh3_64(frame[48:])``, the value the header's last field must hold."""
    return _xxh3_64(memoryview(frame)[HEADER_LEN:]) & 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """The variable header fields (upstream ``ImagesHeader``); the rest are format constants."""

    seed: int
    bucket_count: int
    dc_id: int
    epoch: int

    @property
    def format(self) -> FilterFormat:
        """The header's ``FilterFormat``, built unchecked (a received header may hold any shape)."""
        return FilterFormat.unchecked(self.seed, self.bucket_count)


class SnapshotChunk:
    """One ordered chunk of a full-lane snapshot: dense bucket words from ``bucket_offset``."""

    __slots__ = ("bucket_offset", "chunk_count", "chunk_index", "header", "words")
    kind = FrameKind.SNAPSHOT_CHUNK

    def __init__(
        self,
        header: FrameHeader,
        chunk_index: int,
        chunk_count: int,
        bucket_offset: int,
        words: npt.ArrayLike,
    ) -> None:
        self.header = header
        self.chunk_index = chunk_index
        self.chunk_count = chunk_count
        self.bucket_offset = bucket_offset
        self.words: npt.NDArray[np.uint64] = _as_words(words)

    @property
    def epoch(self) -> int:
        """The snapshot's epoch (``header.epoch``)."""
        return self.header.epoch

    @property
    def word_count(self) -> int:
        """Bucket words (u64) the chunk carries from ``bucket_offset``."""
        return int(self.words.shape[0])

    def serialize(self) -> bytes:
        """The exact frame bytes (checksum computed), with no validation of the fields."""
        return _encode_chunk(
            self.header.format,
            self.header.dc_id,
            self.header.epoch,
            self.chunk_index,
            self.chunk_count,
            self.bucket_offset,
            self.words,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SnapshotChunk):
            return NotImplemented
        return (
            self.header == other.header
            and self.chunk_index == other.chunk_index
            and self.chunk_count == other.chunk_count
            and self.bucket_offset == other.bucket_offset
            and np.array_equal(self.words, other.words)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"SnapshotChunk(index={self.chunk_index}, count={self.chunk_count}, "
            f"epoch={self.header.epoch}, bucket_count={self.header.bucket_count}, "
            f"offset={self.bucket_offset}, words={self.word_count})"
        )


class Delta:
    """One publication's absolute bucket words, advancing ``base_epoch`` to ``header.epoch``."""

    __slots__ = ("base_epoch", "header", "images")
    kind = FrameKind.DELTA

    def __init__(self, header: FrameHeader, base_epoch: int, images: ImagesLike) -> None:
        self.header = header
        self.base_epoch = base_epoch
        self.images: npt.NDArray[np.void] = _as_images(images)

    @property
    def epoch(self) -> int:
        """The epoch the delta advances to (``header.epoch``)."""
        return self.header.epoch

    @property
    def image_count(self) -> int:
        """How many (bucket, word) images the delta carries."""
        return int(self.images.shape[0])

    @property
    def buckets(self) -> npt.NDArray[np.uint32]:
        """Each image's bucket (u32): a view of ``images``."""
        return self.images["bucket"]

    @property
    def words(self) -> npt.NDArray[np.uint64]:
        """Each image's absolute bucket word (u64): a view of ``images``."""
        return self.images["word"]

    def serialize(self) -> bytes:
        """The exact frame bytes (checksum computed), with no validation of the fields."""
        return _encode_delta_bytes(
            self.header.format, self.header.dc_id, self.base_epoch, self.header.epoch, self.images
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Delta):
            return NotImplemented
        return (
            self.header == other.header
            and self.base_epoch == other.base_epoch
            and self.images.tobytes() == other.images.tobytes()
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Delta(base_epoch={self.base_epoch}, epoch={self.header.epoch}, "
            f"bucket_count={self.header.bucket_count}, images={self.image_count})"
        )


Frame: TypeAlias = SnapshotChunk | Delta


def _as_words(words: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    arr = np.asarray(words)
    if arr.dtype == np.dtype("<u8") and arr.ndim == 1:
        return arr
    if arr.size == 0:
        return np.zeros(0, dtype="<u8")
    if arr.dtype.kind not in "ui" and arr.dtype != object:
        raise Cbi1Error(
            Cbi1Variant.InvalidImage,
            f"words must be unsigned 64-bit integers, got dtype {arr.dtype}",
            field="words",
        )
    try:
        out = np.asarray(words, dtype="<u8").reshape(-1)
    except OverflowError as exc:
        raise Cbi1Error(
            Cbi1Variant.InvalidImage, f"a word is outside u64: {exc}", field="words"
        ) from None
    if arr.dtype.kind == "i" and bool((arr < 0).any()):
        raise Cbi1Error(Cbi1Variant.InvalidImage, "a word is negative", field="words")
    return out


def _as_images(images: ImagesLike) -> npt.NDArray[np.void]:
    """Images as the packed wire dtype, from a structured array or (bucket, word) pairs."""
    if isinstance(images, np.ndarray) and images.dtype.names is not None:
        if images.dtype == IMAGE_DTYPE:
            return images
        return np.asarray(images, dtype=IMAGE_DTYPE)
    pairs = list(images)
    out = np.empty(len(pairs), dtype=IMAGE_DTYPE)
    for i, pair in enumerate(pairs):
        try:
            bucket, word = pair
        except (TypeError, ValueError):
            raise Cbi1Error(
                Cbi1Variant.InvalidImage,
                f"expected a (bucket, word) pair, got {pair!r}",
                field=f"images[{i}]",
            ) from None
        if not 0 <= bucket <= U32_MAX:
            raise Cbi1Error(
                Cbi1Variant.InvalidImage,
                f"bucket {bucket} does not fit in u32",
                field=f"images[{i}].bucket",
            )
        if not 0 <= word <= U64_MAX:
            raise Cbi1Error(
                Cbi1Variant.InvalidImage,
                f"word {word} does not fit in u64",
                field=f"images[{i}].word",
            )
        out[i] = (bucket, word)
    return out


# ---------------------------------------------------------------------------------------- encode


def _header_bytes(flags: int, fmt: FilterFormat, dc_id: int, epoch: int) -> bytes:
    return _HEADER.pack(
        MAGIC,
        WIRE_VERSION,
        flags,
        FINGERPRINT_BITS,
        SLOTS_PER_BUCKET,
        FORMAT_VERSION,
        fmt.seed,
        fmt.bucket_count,
        dc_id,
        epoch,
        0,
    )


def _finish(out: bytearray) -> bytes:
    struct.pack_into("<I", out, _CHECKSUM_OFFSET, body_checksum(out))
    return bytes(out)


def _encode_delta_bytes(
    fmt: FilterFormat, dc_id: int, base_epoch: int, epoch: int, images: npt.NDArray[np.void]
) -> bytes:
    out = bytearray(_header_bytes(FrameKind.DELTA, fmt, dc_id, epoch))
    out += _DELTA_PREFIX.pack(base_epoch, images.shape[0])
    out += images.tobytes()
    return _finish(out)


def encode_delta(
    fmt: FilterFormat, dc_id: int, base_epoch: int, epoch: int, images: ImagesLike
) -> bytes:
    """A delta frame carrying ``images`` (absolute words) for ``base_epoch -> epoch``.

    Upstream's checks, in its order: more than ``max_delta_images()`` images is
    ``DeltaImageCount``; then the first image whose bucket is ``>= bucket_count`` is
    ``BucketIndex``. Images keep the caller's order (the producer's first-touch order).
    """
    if not isinstance(images, np.ndarray):
        images = list(images)
    maximum = max_delta_images()
    if len(images) > maximum:
        raise Cbi1Error(
            Cbi1Variant.DeltaImageCount,
            f"delta has {len(images)} images, exceeding the CBI1 maximum {maximum}",
            field="delta.image_count",
            expected=maximum,
            actual=len(images),
        )
    packed = _as_images(images)
    buckets = packed["bucket"]
    bad = np.flatnonzero(buckets >= fmt.bucket_count)
    if bad.size:
        i = int(bad[0])
        bucket = int(buckets[i])
        raise Cbi1Error(
            Cbi1Variant.BucketIndex,
            f"bucket {bucket} is outside the declared {fmt.bucket_count}-bucket lane",
            field=f"delta.images[{i}].bucket",
            expected=fmt.bucket_count,
            actual=bucket,
        )
    return _encode_delta_bytes(fmt, dc_id, base_epoch, epoch, packed)


def _encode_chunk(
    fmt: FilterFormat,
    dc_id: int,
    epoch: int,
    chunk_index: int,
    chunk_count: int,
    bucket_offset: int,
    words: npt.NDArray[np.uint64],
) -> bytes:
    out = bytearray(HEADER_LEN + SNAPSHOT_BODY_PREFIX + words.shape[0] * WORD_BYTES)
    out[:HEADER_LEN] = _header_bytes(FrameKind.SNAPSHOT_CHUNK, fmt, dc_id, epoch)
    _SNAPSHOT_PREFIX.pack_into(out, HEADER_LEN, chunk_index, chunk_count, bucket_offset)
    np.frombuffer(out, dtype="<u8", offset=HEADER_LEN + SNAPSHOT_BODY_PREFIX)[:] = words
    return _finish(out)


def encode_snapshot_chunk(
    fmt: FilterFormat,
    dc_id: int,
    epoch: int,
    chunk_index: int,
    chunk_count: int,
    words: npt.ArrayLike,
) -> bytes:
    """One chunk frame; ``bucket_offset`` is ``chunk_index * 524,288`` as upstream writes it."""
    return _encode_chunk(
        fmt,
        dc_id,
        epoch,
        chunk_index,
        chunk_count,
        chunk_index * SNAPSHOT_CHUNK_BUCKETS,
        _as_words(words),
    )


class SnapshotChunks(Sequence[bytes]):
    """A whole lane as chunk frames, each encoded only when asked for (4 MiB at a time)."""

    __slots__ = ("_dc_id", "_epoch", "_format", "_words")

    def __init__(
        self, fmt: FilterFormat, dc_id: int, epoch: int, words: npt.NDArray[np.uint64]
    ) -> None:
        self._format = fmt
        self._dc_id = dc_id
        self._epoch = epoch
        self._words = words

    def __len__(self) -> int:
        return (int(self._words.shape[0]) + SNAPSHOT_CHUNK_BUCKETS - 1) // SNAPSHOT_CHUNK_BUCKETS

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"chunk {index} out of range for {n} chunks")
        start = index * SNAPSHOT_CHUNK_BUCKETS
        chunk = self._words[start : start + SNAPSHOT_CHUNK_BUCKETS]
        return _encode_chunk(self._format, self._dc_id, self._epoch, index, n, start, chunk)

    def __iter__(self) -> Iterator[bytes]:
        for i in range(len(self)):
            yield self[i]


def encode_snapshot_chunks(
    fmt: FilterFormat, dc_id: int, epoch: int, words: npt.ArrayLike
) -> SnapshotChunks:
    """The full lane ``words`` as ordered chunk frames (lazy, sized).

    ``len(words) != bucket_count`` is ``SnapshotBucketCount``, raised here, before any
    frame is produced.
    """
    lane = _as_words(words)
    if lane.shape[0] != fmt.bucket_count:
        raise Cbi1Error(
            Cbi1Variant.SnapshotBucketCount,
            f"snapshot has {lane.shape[0]} buckets, format declares {fmt.bucket_count}",
            field="words",
            expected=fmt.bucket_count,
            actual=int(lane.shape[0]),
        )
    return SnapshotChunks(fmt, dc_id, epoch, lane)


# ---------------------------------------------------------------------------------------- decode


def _check_envelope(view: memoryview) -> None:
    """Length, magic and wire version: what ``peek_format`` and ``decode`` share."""
    n = len(view)
    if n < HEADER_LEN:
        raise Cbi1Error(
            Cbi1Variant.Truncated,
            f"{n} bytes, the header alone is {HEADER_LEN}",
            offset=n,
            field="header",
            expected=HEADER_LEN,
            actual=n,
        )
    if n > IMAGES_MAX_FRAME_BYTES:
        raise Cbi1Error(
            Cbi1Variant.FrameTooLarge,
            f"CBI1 frame has {n} bytes, exceeding the maximum {IMAGES_MAX_FRAME_BYTES}",
            offset=IMAGES_MAX_FRAME_BYTES,
            field="frame",
            expected=IMAGES_MAX_FRAME_BYTES,
            actual=n,
        )
    magic = bytes(view[0:4])
    if magic != MAGIC:
        legacy = magic == LEGACY_MAGIC
        raise Cbi1Error(
            Cbi1Variant.Magic,
            f"first bytes are {magic!r}, expected {MAGIC!r}"
            + (" (prototype generation, flags and hashing differ)" if legacy else ""),
            subvariant="Legacy" if legacy else None,
            offset=0,
            field="header.magic",
            expected=MAGIC,
            actual=magic,
        )
    version = int.from_bytes(view[4:6], "little")
    if version != WIRE_VERSION:
        raise Cbi1Error(
            Cbi1Variant.WireVersion,
            f"unsupported CBI1 wire version {version}",
            offset=4,
            field="header.wire_version",
            expected=WIRE_VERSION,
            actual=version,
        )


def peek_format(data: Buffer) -> FilterFormat:
    """The frame's (seed, bucket_count), read before a consumer has adopted a format.

    Only length, magic and wire version are checked; the checksum and body are not, so adopt a
    format from this and then ``decode`` with it.
    """
    view = memoryview(data).cast("B")
    _check_envelope(view)
    seed, bucket_count = struct.unpack_from("<QQ", view, _OFF["seed"])
    return FilterFormat.unchecked(seed, bucket_count)


def _checksum_error(checksum: int, actual: int) -> Cbi1Error:
    """``Checksum``: the header's ``body_checksum`` is not the low 32 bits of the body's hash."""
    return Cbi1Error(
        Cbi1Variant.Checksum,
        f"frame says 0x{checksum:08x}, body hashes to 0x{actual:08x}",
        offset=_CHECKSUM_OFFSET,
        field="header.body_checksum",
        expected=checksum,
        actual=actual,
    )


#: The header and a delta's prefix, read in one call (a chunk's prefix is read on its own).
_HEAD_DELTA = struct.Struct(_HEADER.format + _DELTA_PREFIX.format.lstrip("<"))
_HEAD_DELTA_LEN = HEADER_LEN + DELTA_BODY_PREFIX
_MAX_DELTA_IMAGES = max_delta_images()
_new = object.__new__
# the frozen header's slots, filled directly (its generated __init__ goes through
# ``object.__setattr__`` four times, at twice the cost)
_set_seed = vars(FrameHeader)["seed"].__set__
_set_buckets = vars(FrameHeader)["bucket_count"].__set__
_set_dc = vars(FrameHeader)["dc_id"].__set__
_set_epoch = vars(FrameHeader)["epoch"].__set__
_SNAPSHOT_FLAGS = int(FrameKind.SNAPSHOT_CHUNK)
_DELTA_FLAGS = int(FrameKind.DELTA)
_frombuffer = np.frombuffer


def decode(expected_format: FilterFormat, data: Buffer) -> Frame:
    """Decode one frame, checking it exactly as upstream ``cbi1::decode`` does.

    Order: length (``Truncated``, ``FrameTooLarge``), magic, wire version, body checksum, format
    (version, fingerprint bits, slots, seed and bucket count against ``expected_format``), flags,
    then the body. The returned frame's arrays are read-only views over ``data``.

    A frame that passes every check is decoded here with as few calls as possible (the header
    and a delta's prefix in one unpack, the header object filled through its slots, a small
    delta's buckets checked by one ``struct`` read): a stream is mostly small deltas. Any frame
    that fails a check is decoded again by :func:`_decode_reference`, the checks one by one in
    upstream's order, which raises what upstream raises (``tests/test_wire.py`` holds the two
    to the same result on every golden frame and on arbitrary bytes).
    """
    if type(data) is bytes:
        buf: Buffer = data
        n = len(data)
        readonly = True
    else:
        buf = memoryview(data).cast("B")
        n = len(buf)
        readonly = buf.readonly
    if n < _HEAD_DELTA_LEN or n > IMAGES_MAX_FRAME_BYTES:
        return _decode_reference(expected_format, data)
    (
        magic,
        version,
        flags,
        fingerprint_bits,
        slots,
        format_version,
        seed,
        bucket_count,
        dc_id,
        epoch,
        checksum,
        base_epoch,
        count,
    ) = _HEAD_DELTA.unpack_from(buf)
    if (
        magic != MAGIC
        or version != WIRE_VERSION
        or format_version != FORMAT_VERSION
        or fingerprint_bits != FINGERPRINT_BITS
        or slots != SLOTS_PER_BUCKET
        or seed != expected_format.seed
        or bucket_count != expected_format.bucket_count
        # a small body is copied to be hashed (cheaper than a view for a few hundred bytes)
        or _xxh3_64(buf[HEADER_LEN:] if n <= 1024 else memoryview(buf)[HEADER_LEN:]) & 0xFFFFFFFF
        != checksum
    ):
        return _decode_reference(expected_format, data)
    header = _new(FrameHeader)
    _set_seed(header, seed)
    _set_buckets(header, bucket_count)
    _set_dc(header, dc_id)
    _set_epoch(header, epoch)
    if flags == _DELTA_FLAGS:
        if count > _MAX_DELTA_IMAGES or n != _HEAD_DELTA_LEN + IMAGE_BYTES * count:
            return _decode_reference(expected_format, data)
        # positional: numpy parses keyword arguments at twice the cost of the array it makes
        images = _frombuffer(buf, IMAGE_DTYPE, count, _HEAD_DELTA_LEN)
        if not readonly:
            images.flags.writeable = False
        if count:
            masks = _BUCKET_MASKS.get(bucket_count) or _bucket_masks(bucket_count)
            if (
                _from_bytes(buf[_HEAD_DELTA_LEN:], "little") & masks[count]
                if count < len(masks)
                else max(_BUCKET_READERS[count].unpack_from(buf, _HEAD_DELTA_LEN)) >= bucket_count
                if count <= _SMALL_DELTA
                else images["bucket"].max() >= bucket_count
            ):
                return _decode_reference(expected_format, data)
        frame = _new(Delta)
        frame.header = header
        frame.base_epoch = base_epoch
        frame.images = images
        return frame
    if flags == _SNAPSHOT_FLAGS:
        return _decode_chunk(header, buf if type(buf) is memoryview else memoryview(buf))
    return _decode_reference(expected_format, data)


def _decode_reference(expected_format: FilterFormat, data: Buffer) -> Frame:
    """:func:`decode` one check at a time, in upstream's order: what a frame that fails a
    check goes through, and the reference the fast path is tested against."""
    view = memoryview(data).cast("B")
    _check_envelope(view)
    (
        _magic,
        _version,
        flags,
        fingerprint_bits,
        slots,
        format_version,
        seed,
        bucket_count,
        dc_id,
        epoch,
        checksum,
    ) = _HEADER.unpack_from(view)
    actual_checksum = _xxh3_64(view[HEADER_LEN:]) & 0xFFFFFFFF
    if actual_checksum != checksum:
        raise _checksum_error(checksum, actual_checksum)
    _check_format(expected_format, format_version, fingerprint_bits, slots, seed, bucket_count)
    header = FrameHeader(seed, bucket_count, dc_id, epoch)
    if flags == FrameKind.DELTA:
        return _decode_delta(header, view)
    if flags == FrameKind.SNAPSHOT_CHUNK:
        return _decode_chunk(header, view)
    raise Cbi1Error(
        Cbi1Variant.Flags,
        f"unknown CBI1 frame flags 0x{flags:04x} (1 = snapshot chunk, 2 = delta)",
        offset=_OFF["flags"],
        field="header.flags",
        expected=(1, 2),
        actual=flags,
    )


def _check_format(
    expected: FilterFormat,
    format_version: int,
    fingerprint_bits: int,
    slots: int,
    seed: int,
    bucket_count: int,
) -> None:
    if format_version != FORMAT_VERSION:
        raise Cbi1Error(
            Cbi1Variant.Format,
            f"unsupported CKF format version {format_version} (expected {FORMAT_VERSION})",
            subvariant="Version",
            offset=_OFF["format_version"],
            field="header.format_version",
            expected=FORMAT_VERSION,
            actual=format_version,
        )
    if fingerprint_bits != FINGERPRINT_BITS:
        raise Cbi1Error(
            Cbi1Variant.Format,
            f"unsupported fingerprint width {fingerprint_bits} (expected {FINGERPRINT_BITS})",
            subvariant="FingerprintBits",
            offset=_OFF["fingerprint_bits"],
            field="header.fingerprint_bits",
            expected=FINGERPRINT_BITS,
            actual=fingerprint_bits,
        )
    if slots != SLOTS_PER_BUCKET:
        raise Cbi1Error(
            Cbi1Variant.Format,
            f"unsupported slots per bucket {slots} (expected {SLOTS_PER_BUCKET})",
            subvariant="SlotsPerBucket",
            offset=_OFF["slots_per_bucket"],
            field="header.slots_per_bucket",
            expected=SLOTS_PER_BUCKET,
            actual=slots,
        )
    if seed != expected.seed or bucket_count != expected.bucket_count:
        name = "seed" if seed != expected.seed else "bucket_count"
        raise Cbi1Error(
            Cbi1Variant.Format,
            f"expected {expected!r}, frame says seed 0x{seed:x} buckets {bucket_count}",
            subvariant="Mismatch",
            offset=_OFF[name],
            field=f"header.{name}",
            expected=expected,
            actual=(seed, bucket_count),
        )


@lru_cache(maxsize=512)
def _bucket_reader(count: int) -> struct.Struct:
    return struct.Struct("<" + "I8x" * count)


_SMALL_DELTA = 64
#: ``_BUCKET_READERS[n]`` reads the buckets of ``n`` images (n <= ``_SMALL_DELTA``).
_BUCKET_READERS = [_bucket_reader(max(n, 1)) for n in range(_SMALL_DELTA + 1)]
_from_bytes = int.from_bytes
#: ``_BUCKET_MASKS[bucket_count]``: see :func:`_bucket_masks` (filled as formats are seen)
_BUCKET_MASKS: dict[int, list[int]] = {}


def _bucket_masks(bucket_count: int) -> list[int]:
    """``masks[n]``: the bits of ``n`` images read as one little-endian integer that a bucket
    ``>= bucket_count`` would set, for a power of two (one AND checks every bucket of a small
    delta, where reading them out took a Python int each); ``[0]`` for any other count."""
    masks = [0]
    if bucket_count and not bucket_count & (bucket_count - 1):
        k = bucket_count.bit_length() - 1
        high = U32_MAX >> k << k if k < 32 else 0  # a bucket's bits k..31
        for i in range(_SMALL_DELTA):
            masks.append(masks[-1] | high << (8 * IMAGE_BYTES * i))
    _BUCKET_MASKS[bucket_count] = masks
    return masks


def _decode_delta(header: FrameHeader, view: memoryview) -> Delta:
    body_len = len(view) - HEADER_LEN
    if body_len < DELTA_BODY_PREFIX:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"delta body is {body_len} bytes, its fixed prefix alone is {DELTA_BODY_PREFIX}",
            offset=HEADER_LEN + body_len,
            field="delta.image_count",
            expected=DELTA_BODY_PREFIX,
            actual=body_len,
        )
    base_epoch, count = _DELTA_PREFIX.unpack_from(view, HEADER_LEN)
    maximum = max_delta_images()
    if count > maximum:
        raise Cbi1Error(
            Cbi1Variant.DeltaImageCount,
            f"delta has {count} images, exceeding the CBI1 maximum {maximum}",
            offset=DELTA_PREFIX.field("image_count").offset,
            field="delta.image_count",
            expected=maximum,
            actual=count,
        )
    expected_len = DELTA_BODY_PREFIX + IMAGE_BYTES * count
    if body_len != expected_len:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"image_count {count} needs a {expected_len}-byte body, found {body_len}",
            offset=HEADER_LEN + min(body_len, expected_len),
            field="delta.images",
            expected=expected_len,
            actual=body_len,
        )
    start = HEADER_LEN + DELTA_BODY_PREFIX
    images = np.frombuffer(view, dtype=IMAGE_DTYPE, count=count, offset=start)
    images.flags.writeable = False
    if count:
        limit = header.bucket_count
        if count <= _SMALL_DELTA:
            over = max(_bucket_reader(count).unpack_from(view, start)) >= limit
        else:
            over = bool(images["bucket"].max() >= limit)
        if over:
            i = int(np.flatnonzero(images["bucket"] >= limit)[0])
            bucket = int(images["bucket"][i])
            raise Cbi1Error(
                Cbi1Variant.Malformed,
                f"image {i} names bucket {bucket}, the lane has {limit}",
                offset=start + i * IMAGE_BYTES,
                field=f"delta.images[{i}].bucket",
                expected=f"< {limit}",
                actual=bucket,
            )
    frame = Delta.__new__(Delta)
    frame.header = header
    frame.base_epoch = base_epoch
    frame.images = images
    return frame


def _decode_chunk(header: FrameHeader, view: memoryview) -> SnapshotChunk:
    body_len = len(view) - HEADER_LEN
    if body_len < SNAPSHOT_BODY_PREFIX:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"snapshot body is {body_len} bytes, its fixed prefix alone is {SNAPSHOT_BODY_PREFIX}",
            offset=HEADER_LEN + body_len,
            field="snapshot",
            expected=SNAPSHOT_BODY_PREFIX,
            actual=body_len,
        )
    chunk_index, chunk_count, bucket_offset = _SNAPSHOT_PREFIX.unpack_from(view, HEADER_LEN)
    if chunk_count == 0:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            "chunk_count is 0",
            offset=SNAPSHOT_PREFIX.field("chunk_count").offset,
            field="snapshot.chunk_count",
            expected=">= 1",
            actual=0,
        )
    if chunk_index >= chunk_count:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"chunk_index {chunk_index} is not below chunk_count {chunk_count}",
            offset=SNAPSHOT_PREFIX.field("chunk_index").offset,
            field="snapshot.chunk_index",
            expected=f"< {chunk_count}",
            actual=chunk_index,
        )
    words_len = body_len - SNAPSHOT_BODY_PREFIX
    start = HEADER_LEN + SNAPSHOT_BODY_PREFIX
    if words_len % WORD_BYTES:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"{words_len} word bytes is not a whole number of u64 words",
            offset=start + words_len - words_len % WORD_BYTES,
            field="snapshot.words",
            expected="a multiple of 8 bytes",
            actual=words_len,
        )
    word_count = words_len // WORD_BYTES
    if word_count > SNAPSHOT_CHUNK_BUCKETS:  # unreachable through FrameTooLarge; upstream keeps it
        raise Cbi1Error(
            Cbi1Variant.SnapshotChunkWordCount,
            f"snapshot chunk has {word_count} words, exceeding the CBI1 maximum "
            f"{SNAPSHOT_CHUNK_BUCKETS}",
            offset=start,
            field="snapshot.words",
            expected=SNAPSHOT_CHUNK_BUCKETS,
            actual=word_count,
        )
    end = bucket_offset + word_count
    if end > U64_MAX or end > header.bucket_count:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"bucket_offset {bucket_offset} + {word_count} words ends past the "
            f"{header.bucket_count}-bucket lane",
            offset=SNAPSHOT_PREFIX.field("bucket_offset").offset,
            field="snapshot.bucket_offset",
            expected=f"<= {header.bucket_count - word_count}"
            if word_count <= header.bucket_count
            else "no offset fits",
            actual=bucket_offset,
        )
    frame = SnapshotChunk.__new__(SnapshotChunk)
    frame.header = header
    frame.chunk_index = chunk_index
    frame.chunk_count = chunk_count
    frame.bucket_offset = bucket_offset
    words = np.frombuffer(view, dtype="<u8", count=word_count, offset=start)
    words.flags.writeable = False
    frame.words = words
    return frame


# ---------------------------------------------------------------------------------- many deltas


_A = TypeVar("_A", bound="npt.NDArray[Any]")


class DeltaBatch(Sequence[Delta]):
    """Deltas of one format decoded together (:func:`decode_deltas`): each header field an array
    with a value per frame, and every frame's images back to back in one packed array.

    Frame ``i``'s images are ``images[offsets[i] : offsets[i + 1]]``; ``batch[i]`` is frame ``i``
    as the ``Delta`` that ``decode`` returns for it (equal to it), over views of these arrays.
    Every array is read-only.
    """

    __slots__ = ("base_epoch", "dc_id", "epoch", "format", "images", "offsets")

    def __init__(
        self,
        fmt: FilterFormat,
        dc_id: npt.NDArray[np.uint64],
        epoch: npt.NDArray[np.uint64],
        base_epoch: npt.NDArray[np.uint64],
        images: npt.NDArray[np.void],
        offsets: npt.NDArray[np.int64],
    ) -> None:
        self.format = fmt  # every frame's seed and bucket_count: decode_deltas checked them
        self.dc_id = _read_only(dc_id)
        self.epoch = _read_only(epoch)
        self.base_epoch = _read_only(base_epoch)
        self.images = _read_only(images)
        self.offsets = _read_only(offsets)  # frame i's images start at offsets[i]; then the total

    @classmethod
    def of(cls, fmt: FilterFormat, deltas: Sequence[Delta]) -> DeltaBatch:
        """The batch of decoded deltas (of ``fmt``), their images copied into one array."""
        counts = np.fromiter((d.images.shape[0] for d in deltas), np.int64, len(deltas))
        return cls(
            fmt,
            np.array([d.header.dc_id for d in deltas], dtype=np.uint64),
            np.array([d.header.epoch for d in deltas], dtype=np.uint64),
            np.array([d.base_epoch for d in deltas], dtype=np.uint64),
            np.concatenate([np.empty(0, IMAGE_DTYPE), *(d.images for d in deltas)]),
            np.concatenate(([0], np.cumsum(counts))),
        )

    @property
    def image_counts(self) -> npt.NDArray[np.int64]:
        """Images per frame (``int64``), from ``offsets``."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"delta {index} out of range for {n} deltas")
        header = FrameHeader(
            self.format.seed,
            self.format.bucket_count,
            int(self.dc_id[index]),
            int(self.epoch[index]),
        )
        start, end = self.offsets[index : index + 2]
        return Delta(header, int(self.base_epoch[index]), self.images[start:end])

    def __iter__(self) -> Iterator[Delta]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        return f"DeltaBatch({self.format!r}, deltas={len(self)}, images={self.images.shape[0]})"


def _read_only(array: _A) -> _A:
    """A read-only view of ``array`` (the caller's own array keeps its flags)."""
    view = array.view()
    view.flags.writeable = False
    return view


def _record_of(*layouts: Layout) -> np.dtype[np.void]:
    """The layouts' fields as one numpy record (each an unsigned little-endian integer of its
    width, the magic too, at its offset), as long as the bytes they span."""
    fields = [f for layout in layouts for f in layout]
    return np.dtype(
        {
            "names": [f.name for f in fields],
            "formats": [f"<u{f.size}" for f in fields],
            "offsets": [f.offset for f in fields],
            "itemsize": fields[-1].end,
        }
    )


#: A delta's header and prefix as one record: the batch reads every frame's fields at once.
_HEAD_DELTA_RECORD = _record_of(HEADER, DELTA_PREFIX)
assert _HEAD_DELTA_RECORD.itemsize == _HEAD_DELTA_LEN
_MAGIC_U32 = int.from_bytes(MAGIC, "little")
_BODY_PART = slice(HEADER_LEN, None)
#: ``frame[part]``, typed for ``map`` over the frames (``operator.getitem`` is overloaded)
_cut = cast("Callable[[Buffer, slice], Buffer]", getitem)


def decode_deltas(expected_format: FilterFormat, frames: Iterable[Buffer]) -> DeltaBatch:
    """Decode many delta frames at once, with the same checks as :func:`decode` on each.

    ``decode`` costs a few microseconds a frame, nearly all of it the interpreter's calls around
    a small frame rather than its bytes; here each step runs over every frame at once: the
    frames joined into one buffer, their headers read from it as one record array and checked
    together, the checksums one C call a frame with no Python code between them, the images
    gathered into one array and their buckets checked together.

    A frame ``decode`` would refuse fails the batch with ``decode``'s error (variant, field,
    offset, values), its ``frame_index`` set and its message led by ``frame i:``; of several,
    the first. A snapshot chunk is refused the same way, as ``Flags`` (expected 2: a delta).
    """
    frames = _as_frames(frames)
    n = len(frames)
    lengths = np.fromiter(map(len, frames), np.int64, n)
    starts = np.cumsum(lengths) - lengths
    # zeros past the last frame: a frame too short for a header still reads inside the buffer
    joined = b"".join(chain(frames, (bytes(_HEAD_DELTA_LEN),)))
    heads = _runs(joined, starts, _HEAD_DELTA_LEN).view(_HEAD_DELTA_RECORD)
    sums = np.fromiter(map(_xxh3_64, map(_cut, frames, repeat(_BODY_PART))), np.uint64, n)
    counts = heads["image_count"].astype(np.int64)
    ok = _headers_pass(expected_format, heads, lengths, sums, counts)
    counts[~ok] = 0  # a frame that failed has no images to read
    offsets = np.concatenate(([0], np.cumsum(counts)))
    first = np.repeat(starts + _HEAD_DELTA_LEN - IMAGE_BYTES * offsets[:-1], counts)
    at = first + IMAGE_BYTES * np.arange(offsets[-1])
    images = _runs(joined, at, IMAGE_BYTES).view(IMAGE_DTYPE)
    over = np.flatnonzero(images["bucket"] >= expected_format.bucket_count)
    ok[np.searchsorted(offsets, over, side="right") - 1] = False  # a bucket past the lane
    if not ok.all():
        _check_each(expected_format, frames, int(np.argmin(ok)))  # raises decode's error
        return _decode_deltas_reference(expected_format, frames)  # (only if a check was wrong)
    return DeltaBatch(
        expected_format,
        heads["dc_id"].copy(),
        heads["epoch"].copy(),
        heads["base_epoch"].copy(),
        images,
        offsets,
    )


def _runs(buf: bytes, at: npt.NDArray[np.int64], size: int) -> npt.NDArray[np.void]:
    """The ``size`` bytes at each offset ``at`` into ``buf``, as one array of ``size``-byte
    records (gathered from a view whose records overlap, one starting at every byte)."""
    every = np.ndarray((len(buf) - size + 1,), np.dtype((np.void, size)), buf, 0, (1,))
    return every[at]


def _as_frames(frames: Iterable[Buffer]) -> list[Buffer]:
    """The frames as a list of bytes-like objects whose items are bytes (as ``decode`` sees
    them: any other buffer through ``memoryview(...).cast("B")``)."""
    out = frames if isinstance(frames, list) else list(frames)
    if not set(map(type, out)) <= {bytes, bytearray}:
        out = [f if type(f) in (bytes, bytearray) else memoryview(f).cast("B") for f in out]
    return out


def _headers_pass(
    fmt: FilterFormat,
    heads: npt.NDArray[np.void],
    lengths: npt.NDArray[np.int64],
    sums: npt.NDArray[np.uint64],
    counts: npt.NDArray[np.int64],
) -> npt.NDArray[np.bool_]:
    """Which frames pass every check of ``decode``'s but the buckets: its length, envelope,
    checksum, format and flags, and a delta's image count and length."""
    ok: npt.NDArray[np.bool_] = (
        (lengths >= _HEAD_DELTA_LEN)
        & (lengths <= IMAGES_MAX_FRAME_BYTES)
        & (heads["magic"] == _MAGIC_U32)
        & (heads["wire_version"] == WIRE_VERSION)
        & (heads["body_checksum"] == sums & 0xFFFFFFFF)
        & (heads["format_version"] == FORMAT_VERSION)
        & (heads["fingerprint_bits"] == FINGERPRINT_BITS)
        & (heads["slots_per_bucket"] == SLOTS_PER_BUCKET)
        & (heads["seed"] == fmt.seed)
        & (heads["bucket_count"] == fmt.bucket_count)
        & (heads["flags"] == _DELTA_FLAGS)
        & (counts <= _MAX_DELTA_IMAGES)
        & (lengths == _HEAD_DELTA_LEN + IMAGE_BYTES * counts)
    )
    return ok


def _check_each(expected_format: FilterFormat, frames: Sequence[Buffer], start: int) -> list[Delta]:
    """``decode`` of each frame from ``start``, in order; the first it refuses, or that is not
    a delta, raises (its index in the batch attached)."""
    out = []
    for i in range(start, len(frames)):
        try:
            frame = decode(expected_format, frames[i])
        except Cbi1Error as exc:
            raise _at_frame(exc, i) from None
        if not isinstance(frame, Delta):
            raise Cbi1Error(
                Cbi1Variant.Flags,
                offset=_OFF["flags"],
                field="header.flags",
                expected=_DELTA_FLAGS,
                actual=_SNAPSHOT_FLAGS,
                frame_index=i,
                message=f"frame {i}: a snapshot chunk (header.flags at offset {_OFF['flags']} "
                f"is {_SNAPSHOT_FLAGS}), where decode_deltas takes deltas only ({_DELTA_FLAGS})",
            )
        out.append(frame)
    return out


def _at_frame(error: Cbi1Error, index: int) -> Cbi1Error:
    """``decode``'s error for frame ``index`` as the batch raises it: the same variant, field,
    offset and values, with ``frame_index`` and a message led by the frame's index."""
    return Cbi1Error(
        error.variant,
        error.detail,
        subvariant=error.subvariant,
        offset=error.offset,
        field=error.field,
        expected=error.expected,
        actual=error.actual,
        message=f"frame {index}: {error}",
        **error.context,
        frame_index=index,
    )


def _decode_deltas_reference(expected_format: FilterFormat, frames: Iterable[Buffer]) -> DeltaBatch:
    """:func:`decode_deltas` one ``decode`` call a frame: the reference the batch is tested
    against."""
    return DeltaBatch.of(expected_format, _check_each(expected_format, _as_frames(frames), 0))

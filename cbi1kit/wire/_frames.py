"""CBI1 frames as objects: the header, a snapshot chunk's words and a delta's images as numpy
arrays (a chunk's a read-only ``<u8`` array, a delta's a packed 12-byte structured array), and the
exact bytes each serialises to.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import xxhash

from cbi1kit.errors import Cbi1Error, Cbi1Variant
from cbi1kit.wire._format import (
    FINGERPRINT_BITS,
    FORMAT_VERSION,
    HEADER_LEN,
    IMAGE_BYTES,
    MAGIC,
    SLOTS_PER_BUCKET,
    SNAPSHOT_BODY_PREFIX,
    U32_MAX,
    U64_MAX,
    WIRE_VERSION,
    WORD_BYTES,
    FilterFormat,
    FrameKind,
)
from cbi1kit.wire._layout import DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX

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


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameHeader:
    """The variable header fields (upstream ``ImagesHeader``); the rest are format constants."""

    seed: int
    bucket_count: int
    dc_id: int
    epoch: int

    @property
    def format(self) -> FilterFormat:
        """The header's ``FilterFormat``, built unchecked (a received header may hold any shape)."""
        return FilterFormat.unchecked(seed=self.seed, bucket_count=self.bucket_count)


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


def _position(index: int, n: int, what: str) -> int:
    """``index`` into a sequence of ``n`` ``what``s, counted from the end if negative;
    ``IndexError`` past either end."""
    if index < 0:
        index += n
    if not 0 <= index < n:
        raise IndexError(f"{what} {index} out of range for {n} {what}s")
    return index


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

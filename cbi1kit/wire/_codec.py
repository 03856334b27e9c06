"""CBI1 decoding: every check upstream makes, in upstream's order, raising the exact upstream
variant (see ``cbi1kit.errors``); the fast path of a frame that passes them, and ``decode_deltas``,
which decodes many deltas in one call (a ``DeltaBatch``): the same checks and errors, without the
per-call cost that bounds ``decode`` on small frames.

"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, repeat
from operator import getitem
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from cbi1kit.errors import Cbi1Error, Cbi1Variant
from cbi1kit.wire._checks import (
    _BUCKET_MASKS,
    _bucket_masks,
    _check_format,
    _decode_chunk,
    _decode_delta,
    _past_lane,
)
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
    WIRE_VERSION,
    FilterFormat,
    FrameKind,
    max_delta_images,
)
from cbi1kit.wire._frames import (
    _CHECKSUM_OFFSET,
    _DELTA_PREFIX,
    _HEADER,
    _OFF,
    IMAGE_DTYPE,
    Buffer,
    Delta,
    Frame,
    FrameHeader,
    _position,
    _xxh3_64,
)
from cbi1kit.wire._layout import DELTA_PREFIX, HEADER, Layout


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
    return FilterFormat.unchecked(seed=seed, bucket_count=bucket_count)


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


#: The header and a delta's prefix, read in one call (a chunk's prefix is read on its own): the
#: runs of fields every valid frame holds alike, magic and wire version (``_ENVELOPE``), then
#: fingerprint bits, slots per bucket and format version (``_SHAPE``), each read as one string of
#: bytes to compare whole; the flags between them and the fields after them as the layout has them.
_HEAD_DELTA = struct.Struct(
    "<6sH4s" + _HEADER.format.removeprefix("<4sHHBBH") + _DELTA_PREFIX.format.lstrip("<")
)
_HEAD_DELTA_LEN = HEADER_LEN + DELTA_BODY_PREFIX
assert _HEAD_DELTA.size == _HEAD_DELTA_LEN  # (fails unless the header format starts so)
_VALID_HEADER = _HEADER.pack(
    MAGIC, WIRE_VERSION, 0, FINGERPRINT_BITS, SLOTS_PER_BUCKET, FORMAT_VERSION, 0, 0, 0, 0, 0
)
_ENVELOPE = _VALID_HEADER[: _OFF["flags"]]
_SHAPE = _VALID_HEADER[_OFF["fingerprint_bits"] : _OFF["seed"]]
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
_from_bytes = int.from_bytes


def decode(expected_format: FilterFormat, data: Buffer) -> Frame:
    """Decode one frame, checking it exactly as upstream ``cbi1::decode`` does.

    Order: length, magic, wire version, checksum, format, flags, body (docs/wire-format.md). The
    arrays are read-only views over ``data``. A valid frame takes this inlined fast path; a
    failing one is decoded again by ``_decode_reference``, which raises what upstream raises.
    """
    # read-only, so the arrays over it are (a bytes object already is)
    buf: Buffer = data if type(data) is bytes else memoryview(data).cast("B").toreadonly()
    n = len(buf)
    if n < _HEAD_DELTA_LEN or n > IMAGES_MAX_FRAME_BYTES:
        return _decode_reference(expected_format, data)
    envelope, flags, shape, seed, bucket_count, dc_id, epoch, checksum, base_epoch, count = (
        _HEAD_DELTA.unpack_from(buf)
    )
    if (
        envelope != _ENVELOPE
        or shape != _SHAPE
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
        masks = _BUCKET_MASKS.get(bucket_count) or _bucket_masks(bucket_count)
        # (a count past the maximum fails the length: no frame is that long)
        if n != _HEAD_DELTA_LEN + IMAGE_BYTES * count or (
            _from_bytes(buf[_HEAD_DELTA_LEN:], "little") & masks[count]
            if count < len(masks)
            else _past_lane(buf, count, bucket_count)
        ):
            return _decode_reference(expected_format, data)
        frame = _new(Delta)
        frame.header = header
        frame.base_epoch = base_epoch
        # positional: numpy parses keyword arguments at twice the cost of the array it makes
        frame.images = _frombuffer(buf, IMAGE_DTYPE, count, _HEAD_DELTA_LEN)
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
    header = FrameHeader(seed=seed, bucket_count=bucket_count, dc_id=dc_id, epoch=epoch)
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


# ---------------------------------------------------------------------------------- many deltas


_A = TypeVar("_A", bound="npt.NDArray[Any]")


class DeltaBatch(Sequence[Delta]):
    """Deltas of one format decoded together (:func:`decode_deltas`), as read-only arrays.

    Each header field is an array with a value per frame; frame ``i``'s images are
    ``images[offsets[i] : offsets[i + 1]]``. ``batch[i]`` equals ``decode``'s ``Delta`` for
    frame ``i``, over views of these arrays.
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
        index = _position(index, len(self), "delta")
        header = FrameHeader(
            seed=self.format.seed,
            bucket_count=self.format.bucket_count,
            dc_id=int(self.dc_id[index]),
            epoch=int(self.epoch[index]),
        )
        start, end = self.offsets[index : index + 2]
        return Delta(header, int(self.base_epoch[index]), self.images[start:end])

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

    Each step runs over all frames together, avoiding ``decode``'s per-frame interpreter cost.
    A refused frame fails the batch with ``decode``'s error, ``frame_index`` set and message led
    by ``frame i:`` (the first of several); a snapshot chunk is refused as ``Flags`` (expected 2).
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
        **{**error._arguments(), "message": f"frame {index}: {error}", "frame_index": index},
    )


def _decode_deltas_reference(expected_format: FilterFormat, frames: Iterable[Buffer]) -> DeltaBatch:
    """:func:`decode_deltas` one ``decode`` call a frame: the reference the batch is tested
    against."""
    return DeltaBatch.of(expected_format, _check_each(expected_format, _as_frames(frames), 0))

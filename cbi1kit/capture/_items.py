"""What a capture reads as, item by item: frames (one at a time, or a span of many as the
engines take them), catalog updates, stream opens and closes, and damage where it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._file import (
    RECORD_HEADER_LEN,
    CaptureDamage,
    CaptureRecord,
    StreamClose,
    StreamOpen,
)
from cbi1kit.capture._layout import RecordType
from cbi1kit.errors import CaptureError, CaptureVariant


@dataclass(frozen=True, slots=True)
class FrameRecord:
    """One received message, whatever it was read from.

    ``index`` counts from 0 in the source; receive times are ``None`` where it has none (grpcurl,
    bare frames). ``update`` is the parsed ``FilterUpdate`` (``None`` for bare frames); ``raw``
    the bytes as received (``FilterUpdate`` or CBI1 frame), ``payload`` the CBI1 bytes.
    """

    index: int
    source_offset: int
    recv_unix_ns: int | None
    recv_mono_ns: int | None
    update: pb.FilterUpdate | None
    raw: bytes
    stream_id: int = 0
    source: str = ""

    @property
    def payload(self) -> bytes:
        """The CBI1 frame bytes: ``update.payload``, or ``raw`` for a bare frame."""
        return self.raw if self.update is None else bytes(self.update.payload)


@dataclass(frozen=True, slots=True)
class FrameDamage:
    """Capture damage met between frames (``read_capture(..., damage="report")``).

    At frame ``index``, using up ``frames`` indexes so later frames keep their undamaged numbers:
    1 for a frame MESSAGE with only its body damaged, ``len(damage.skipped)`` (assumed its
    messages) for a damaged header in an open frame stream, else 0.
    """

    index: int
    frames: int
    error: CaptureError
    damage: CaptureDamage

    @property
    def consumed(self) -> bool:
        """Whether the damage used up frame indexes (``frames`` above 0)."""
        return self.frames > 0

    @property
    def source_offset(self) -> int:
        """The byte of the source where the damaged record starts."""
        return self.error.at


_Update = TypeVar("_Update", pb.KvPoolCatalogUpdate, pb.ServingReadinessUpdate)


@dataclass(frozen=True, slots=True)
class _PlaneRecord(Generic[_Update]):
    """One update of a plane's stream, decoded: the fields a catalog and a readiness record share.

    ``index`` counts the plane's updates from 0, ``record_index`` is the capture record, ``raw``
    the bytes as received. Parsed, not validated
    (:func:`cbi1kit.relay._messages.catalog_from_wire` is the relay stage's).
    """

    index: int
    record_index: int
    source_offset: int
    recv_unix_ns: int
    recv_mono_ns: int
    stream_id: int
    update: _Update
    raw: bytes
    source: str = ""


@dataclass(frozen=True, slots=True)
class CatalogRecord(_PlaneRecord[pb.KvPoolCatalogUpdate]):
    """One ``KvPoolCatalogUpdate`` of a capture's ``WatchKvPoolCatalog`` stream, decoded (the
    fields are ``_PlaneRecord``'s)."""


@dataclass(frozen=True, slots=True)
class ReadinessRecord(_PlaneRecord[pb.ServingReadinessUpdate]):
    """One ``ServingReadinessUpdate`` of a capture's ``SubscribeServingReadiness`` stream,
    decoded (the fields are ``_PlaneRecord``'s)."""


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """A stream's open (``opened``: what it asked for) or close (``closed``: how it ended)."""

    stream_id: int
    record_index: int
    source_offset: int
    recv_unix_ns: int
    recv_mono_ns: int
    opened: StreamOpen | None = None
    closed: StreamClose | None = None


CaptureItem = FrameRecord | CatalogRecord | ReadinessRecord | StreamEvent | FrameDamage


@dataclass(frozen=True, slots=True)
class SourceError:
    """Where a source that is no capture stops being readable (bad JSON, a torn frame file,
    a file that cannot be opened): the reader's error, after ``index`` frames."""

    index: int
    error: BaseException


I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
Bool = npt.NDArray[np.bool_]


@dataclass(slots=True, eq=False)
class FrameSpan:
    """Consecutive frames of a source as columns, a row each: ``buf[start : start + length]``
    is a row's message (a ``FilterUpdate``, or a bare CBI1 frame where ``is_pb`` is False),
    numbered ``index``, ``index + 1``, ... The buffer is the scanner's window: an engine takes
    the span before asking for the next item, or copies what it keeps."""

    buf: npt.NDArray[np.uint8]
    start: I64
    length: I64
    offset: I64  # where the row's record starts in its file (a JSON object's byte, for grpcurl)
    stream: I64
    wall: I64  # receive time, unix ns (0 where ``has_time`` is False)
    mono: U64
    number: U64 | None  # the capture record numbers (None: no capture)
    index: int
    source: str
    is_pb: Bool
    has_time: Bool

    def __len__(self) -> int:
        return len(self.start)

    def raw(self, i: int) -> bytes:
        """Row ``i``'s message bytes."""
        at = int(self.start[i])
        return bytes(self.buf[at : at + int(self.length[i])])

    def record(self, i: int) -> FrameRecord | FrameDamage:
        """Row ``i`` as :func:`cbi1kit.capture.read_capture_items` yields it: the frame, or the
        damage of an intact record whose bytes are no ``FilterUpdate``."""
        raw = self.raw(i)
        timed = bool(self.has_time[i])
        wall = int(self.wall[i]) & (2**64 - 1) if timed else None
        mono = int(self.mono[i]) if timed else None
        sid, offset = int(self.stream[i]), int(self.offset[i])
        if not self.is_pb[i]:
            return FrameRecord(self.index + i, offset, wall, mono, None, raw, sid, self.source)
        try:
            update = pb.FilterUpdate.FromString(raw)
        except DecodeError as exc:
            number = -1 if self.number is None else int(self.number[i])
            body = offset + RECORD_HEADER_LEN
            rec = CaptureRecord(
                number, offset, RecordType.MESSAGE, sid, wall or 0, mono or 0, body, raw
            )
            err = unreadable_message(self.source, rec, _FILTER_UPDATE, exc)
            gone = CaptureDamage(err, rec.end_offset, range(0), rec.type, sid)
            return FrameDamage(self.index + i, 1, err, gone)
        return FrameRecord(self.index + i, offset, wall, mono, update, raw, sid, self.source)


_FILTER_UPDATE: Final = pb.FilterUpdate.DESCRIPTOR.name


@dataclass(slots=True)
class ReadCursor:
    """Where reading a segment set stands between segments: the frame indexes and catalog
    updates used up so far, and the streams open at the end of the last segment read (whose
    re-opens in the next segment go on with them rather than start new streams)."""

    frames: int = 0
    catalog: int = 0
    readiness: int = 0
    open_streams: set[int] = field(default_factory=set)


CATALOG_UPDATE: Final = pb.KvPoolCatalogUpdate.DESCRIPTOR.name
READINESS_UPDATE: Final = pb.ServingReadinessUpdate.DESCRIPTOR.name


def is_plane_update_damage(damage: FrameDamage) -> bool:
    """Whether ``damage`` is an intact catalog or readiness record whose bytes are no such
    update (what the scan reports in place of one): that plane's business. Anything else, those
    streams' torn or corrupt records included, is damage to the capture."""
    err = damage.error
    return (
        damage.damage.record_type is RecordType.MESSAGE
        and isinstance(err, CaptureError)
        and err.variant is CaptureVariant.Unreadable
        and err.field in (CATALOG_UPDATE, READINESS_UPDATE)
    )


def unreadable_message(
    source: str, rec: CaptureRecord, what: str, exc: DecodeError
) -> CaptureError:
    return CaptureError(
        CaptureVariant.Unreadable,
        f"not a {what} message: {exc}",
        source=source,
        offset=rec.offset,
        record_index=rec.index,
        field=what,
    )

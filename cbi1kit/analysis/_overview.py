"""What ``cbi1kit inspect`` shows of a capture, from its one scan: the file, its records by type,
its damage, its streams, the first frames, and one frame's payload to annotate."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from google.protobuf.message import DecodeError

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit._text import table
from cbi1kit.capture._items import FrameDamage, FrameSpan, StreamEvent
from cbi1kit.capture._layout import RecordType
from cbi1kit.capture._scan import FileScan
from cbi1kit.capture._streams import KV_EVENT_RELAY
from cbi1kit.errors import CaptureError

_KINDS: Final = {1: "SNAPSHOT_CHUNK", 2: "DELTA", 3: "HEARTBEAT"}
#: the columns of ``CaptureOverview.text``'s frame table
_FRAME_COLUMNS: Final = (
    "frame", "record", "offset", "stream", "kind", "base→seq", "bytes", "send_ts_us"
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class FrameRow:
    """One frame as ``inspect`` lists it: its number, its capture record, where it is."""

    frame: int
    record: int
    offset: int
    stream: int
    kind: str
    base_sequence: int
    sequence: int
    payload_len: int
    send_ts_us: int


@dataclass(slots=True)
class StreamRow:
    """One stream: its method, the messages it holds, how it ended (``open``: it had not)."""

    stream: int
    method: str = "?"
    messages: int = 0
    status: str = "open"
    reason: str = ""


@dataclass(slots=True)
class CaptureOverview:
    """A capture at a glance (``rows`` frames listed; ``picked`` the frame to annotate: the
    one asked for, else the first delta, else the first frame)."""

    size: int
    created_unix_ns: int
    records: dict[str, int]
    damage: list[CaptureError]
    unreadable: list[CaptureError]
    streams: dict[int, StreamRow]
    frames: list[FrameRow] = field(default_factory=list)
    frame_count: int = 0
    picked: tuple[int, str, bytes] | None = None

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        """The file's fields, its streams and its first frames as ``cbi1kit inspect`` prints
        them, a table each."""
        first = str(self.damage[0]) if self.damage else "none"
        fields = [
            ("magic", "KVRCAP\\r\\n"),
            ("size", f"{self.size} bytes"),
            ("created_unix_ns", self.created_unix_ns),
            ("records", sum(self.records.values())),
            *((f"records.{k}", v) for k, v in self.records.items()),
            ("damage", first),
            *((f"damage {i + 1}", str(d)) for i, d in enumerate(self.damage[1:8], start=1)),
            ("damaged ranges", len(self.damage)),
            *((f"unreadable {e.context.get('record_index')}", str(e)) for e in self.unreadable),
        ]
        streams = [
            (r.stream, r.method.removeprefix(KV_EVENT_RELAY), r.messages, r.status, r.reason)
            for r in self.streams.values()
        ]
        frames = [
            (f.frame, f.record, f.offset, f.stream, f.kind, f"{f.base_sequence}→{f.sequence}",
             f.payload_len, f.send_ts_us)
            for f in self.frames
        ]  # fmt: skip
        out = [
            table(fields, ("field", "value")),
            "",
            table(streams, ("stream", "method", "messages", "status", "reason")),
            "",
            table(frames, _FRAME_COLUMNS),
        ]
        if self.frame_count > len(frames):
            out.append(f"… {self.frame_count - len(frames)} more frames (--rows)")
        return "\n".join(out)


class _Builder:
    def __init__(self, rows: int, frame: int | None) -> None:
        self.rows, self.frame = rows, frame
        self.shown: list[FrameRow] = []
        self.first: tuple[int, str, bytes] | None = None
        self.pick: tuple[int, str, bytes] | None = None
        self.unreadable: list[CaptureError] = []
        self.streams: dict[int, StreamRow] = {}
        self.count = 0

    def event(self, e: StreamEvent) -> None:
        row = self.streams.setdefault(e.stream_id, StreamRow(e.stream_id))
        if e.opened is not None:
            row.method = e.opened.method
        elif e.closed is not None:
            row.status = e.closed.status_name
            row.reason = e.closed.error_reason or e.closed.local_reason or ""

    def wanted(self, k: int) -> bool:
        """Whether frame ``k`` must be read: listed, asked for, or a delta not found yet."""
        if k < self.rows or k == self.frame:
            return True
        return self.frame is None and (self.pick is None or self.first is None)

    def span(self, span: FrameSpan) -> None:
        self.count = span.index + len(span)
        for i in range(len(span)):
            k = span.index + i
            if not self.wanted(k):
                if self.frame is None or self.frame < k:
                    return  # nothing further on is listed or asked for
                continue
            self._row(span, i)

    def _row(self, span: FrameSpan, i: int) -> None:
        try:
            up = pb.FilterUpdate.FromString(span.raw(i))
        except DecodeError:
            return
        k = span.index + i
        kind = _KINDS.get(up.kind, f"kind {up.kind}")
        if k < self.rows:
            number = -1 if span.number is None else int(span.number[i])
            self.shown.append(
                FrameRow(
                    k,
                    number,
                    int(span.offset[i]),
                    int(span.stream[i]),
                    kind,
                    up.base_sequence,
                    up.sequence,
                    len(up.payload),
                    up.send_ts_us,
                )
            )
        this = (k, kind, bytes(up.payload))
        self.first = self.first or this
        if self.frame is None and kind == "DELTA":
            self.pick = self.pick or this
        elif k == self.frame:
            self.pick = this


def overview(
    items: Iterable[object],
    scanned: Callable[[], tuple[list[FileScan], dict[int, int]]],
    rows: int,
    frame: int | None,
) -> CaptureOverview:
    """The overview of a capture's items (``scanned()``: its file scans and messages per
    stream, once the items are read)."""
    b = _Builder(rows, frame)
    for item in items:
        if isinstance(item, FrameSpan):
            b.span(item)
        elif isinstance(item, StreamEvent):
            b.event(item)
        elif isinstance(item, FrameDamage) and item.damage.record_type in (
            RecordType.STREAM_OPEN,
            RecordType.STREAM_CLOSE,
        ):
            b.unreadable.append(item.error)
    files, messages = scanned()
    records: dict[str, int] = {}
    for f in files:
        for t in RecordType:
            if f.types[t]:
                records[t.name] = records.get(t.name, 0) + int(f.types[t])
    for sid, n in messages.items():
        b.streams.setdefault(sid, StreamRow(sid)).messages = n
    return CaptureOverview(
        size=sum(f.size() for f in files),
        created_unix_ns=files[0].created_unix_ns if files else 0,
        records=dict(sorted(records.items())),
        damage=[d.error for f in files for d in f.damages],
        unreadable=b.unreadable,
        streams=dict(sorted(b.streams.items())),
        frames=b.shown,
        frame_count=b.count,
        picked=b.pick or (b.first if frame is None else None),
    )

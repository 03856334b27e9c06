"""Which of a capture's streams carry FilterUpdate frames: one rule for ``read_capture`` and the
frames table's scan. Every stream's method is kept, so a reader also knows its catalog streams.

A stream is a frame stream from its STREAM_OPEN when the open names a wanted method. When the
open is lost (damage dropped it, or its body does not decode) the stream's method is unknown;
rather than lose every message of the stream, its first message decides: if it parses as a
``FilterUpdate`` of a subscription (a producer, a kind, a contract marker) the stream is
adopted from that message on. Whether the message obeys the contract is the rulebook's
business, downstream.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from google.protobuf.message import DecodeError

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._file import (
    StreamClose,
    StreamOpen,
    at_record,
    decode_stream_close,
    decode_stream_open,
)
from cbi1kit.capture._layout import RecordType
from cbi1kit.errors import CaptureError

#: the relay's gRPC service: each method's path is this and its name
KV_EVENT_RELAY: Final = "/dynamo.kvrelay.v1.KvEventRelay/"
SUBSCRIBE_KV_POOL_METHOD: Final = KV_EVENT_RELAY + "SubscribeKvPool"
WATCH_KV_POOL_CATALOG_METHOD: Final = KV_EVENT_RELAY + "WatchKvPoolCatalog"
SUBSCRIBE_SERVING_READINESS_METHOD: Final = KV_EVENT_RELAY + "SubscribeServingReadiness"


def _looks_like_a_subscription(body: bytes) -> bool:
    try:
        update = pb.FilterUpdate.FromString(body)
    except DecodeError:
        return False
    return (
        update.HasField("producer")
        and update.kind != pb.FILTER_UPDATE_KIND_UNSPECIFIED
        and update.contract_marker != 0
    )


class FrameStreams:
    """Stream opens and closes as they are read; ``is_frame`` answers for each message."""

    def __init__(self, methods: Iterable[str], source: str) -> None:
        self.methods = set(methods)
        self.source = source
        #: stream id -> the record number from which its messages are frames
        self.first: dict[int, int] = {}
        self.open: set[int] = set()
        #: stream id -> the method its open names (every stream whose open was read)
        self.method: dict[int, str] = {}
        self._known: set[int] = set()  # streams whose open was read, frame streams or not
        self._adopt = SUBSCRIBE_KV_POOL_METHOD in self.methods

    def control(
        self, rtype: int, sid: int, number: int, offset: int, body: bytes
    ) -> CaptureError | None:
        """A STREAM_OPEN or STREAM_CLOSE; one whose body does not decode comes back as damage
        at its record (the stream still ends at a close; an open's stream is left to
        adoption)."""
        return self.read_control(rtype, sid, number, offset, body)[1]

    def read_control(
        self, rtype: int, sid: int, number: int, offset: int, body: bytes
    ) -> tuple[StreamOpen | StreamClose | None, CaptureError | None]:
        """:meth:`control`, with the decoded open or close (None when it did not decode)."""
        if rtype == RecordType.STREAM_CLOSE:
            self.open.discard(sid)
            try:
                return decode_stream_close(body), None
            except CaptureError as exc:
                return None, at_record(exc, self.source, offset, number)
        try:
            opened = decode_stream_open(body)
        except CaptureError as exc:
            return None, at_record(exc, self.source, offset, number)
        self._known.add(sid)
        self.method[sid] = opened.method
        if opened.method in self.methods:
            self.first.setdefault(sid, number + 1)
            self.open.add(sid)
        return opened, None

    def is_frame(self, sid: int, number: int, body: bytes) -> bool:
        """Whether MESSAGE record ``number`` on stream ``sid`` is a frame."""
        first = self.first.get(sid)
        if first is not None:
            return first <= number
        if self._adopt and sid not in self._known:
            self._known.add(sid)  # decided once, by the stream's first message
            if _looks_like_a_subscription(body):
                self.first[sid] = number
                self.open.add(sid)
                return True
        return False

    def undecided(self, sid: int) -> bool:
        """A stream whose first message has not been seen and whose open was lost."""
        return self._adopt and sid not in self._known and sid not in self.first

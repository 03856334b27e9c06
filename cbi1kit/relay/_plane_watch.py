"""One plane's stream (``_session.PLANES``: catalog, readiness, load, serving load), kept open for
the whole session on its own thread, each message raw into the capture.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.relay._core import _RecorderCore
from cbi1kit.relay._messages import RELAY_CONTRACT_MARKER
from cbi1kit.relay._planes import PlaneUpdate
from cbi1kit.relay._session import _CATALOG, Action, CloseInfo, Plane, _md


class _PlaneWatch:
    """Keep one plane's stream open: every message raw into the capture; watched again after
    backoff whenever it ends (a malformed message, a stall, an error, a clean EOF), unless the
    relay refuses an optional plane for good. ``call`` is the open call (None between calls),
    ``last`` when it last spoke and ``reason`` why the stall watchdog ended it; a catalog goes
    to ``on_catalog``."""

    def __init__(
        self,
        recorder: _RecorderCore,
        plane: Plane,
        on_catalog: Callable[[pb.KvPoolCatalogUpdate], None],
    ) -> None:
        self.r, self.plane, self.on_catalog = recorder, plane, on_catalog
        self.call: Any = None
        self.last = 0.0
        self.reason: str | None = None
        self.messages = self.parsed = 0  # of the open call: kept, and parsed
        self.thread = threading.Thread(
            target=self._run, name=f"cbi1kit-recorder-{plane.name}", daemon=True
        )

    def _run(self) -> None:
        r, cfg, plane = self.r, self.r.config, self.plane
        assert r._channel is not None
        stub = r._channel.unary_stream(
            plane.method,
            request_serializer=plane.request.SerializeToString,
            response_deserializer=None,
        )
        request = plane.request(
            subscriber_id=cfg.subscriber_id, contract_marker=RELAY_CONTRACT_MARKER
        )
        delay = cfg.backoff_initial
        while not r._stop.is_set():
            close = self._once(stub, request)
            if close is None:
                return
            if close.action is Action.FATAL and not plane.required:
                if not r._stop.is_set():
                    with r._lock:
                        name = plane.method.rsplit("/", 1)[1]
                        r.report.unserved.append(f"{name}: {close.status} {close.details}")
                return
            if self.parsed:
                delay = cfg.backoff_initial
            if not r._sleep(r._jitter(delay)):
                return
            delay = min(delay * 2, cfg.backoff_max)

    def _once(self, stub: Any, request: Any) -> CloseInfo | None:
        """One call, opened in the capture, read to its end and closed: how it closed (None: the
        session stopped before it)."""
        r, method = self.r, self.plane.method
        stream = r._write_open(method, request.SerializeToString(), {})
        with r._lock:
            if r._stop.is_set():
                r._write_close(stream, CloseInfo(method, "CANCELLED", "", None, "stopped", 0), [])
                return None
            call = self.call = stub(request, metadata=r.config.metadata)
            self.last, self.reason = time.monotonic(), None
            self.messages = self.parsed = 0
        try:
            close, trailers = self._read(call, stream)
        except grpc.RpcError as err:
            close = self._error_close(err)
            trailers = _md(err.trailing_metadata())
        finally:
            with r._lock:
                self.call = None
                if r._plane_rules is not None:
                    r._plane_rules.close(stream)
        r._write_close(stream, close, trailers)
        return close

    def _read(self, call: Any, stream: int) -> tuple[CloseInfo, list[tuple[str, str]]]:
        """The call's messages until it ends: each into the capture, then parsed and taken; one
        that does not parse ends the call (the next starts after backoff). How it closed, and
        its trailers."""
        r, plane = self.r, self.plane
        for raw in call:
            r._write_message(stream, raw, time.time_ns(), time.monotonic_ns())
            self.messages += 1
            try:
                update = plane.response.FromString(raw)
            except DecodeError as exc:
                call.cancel()
                malformed = f"malformed {plane.response.__name__}: {exc}"
                return CloseInfo(plane.method, "CANCELLED", "", None, malformed, self.messages), []
            self.parsed += 1
            self._took(stream, update)
        close = CloseInfo(plane.method, "OK", "clean end of stream", None, "EOF", self.messages)
        return close, _md(call.trailing_metadata())

    def _error_close(self, err: grpc.RpcError) -> CloseInfo:
        """How a call that ended in an RPC error closes: as a stall if the watchdog ended it."""
        method, stalled = self.plane.method, self.reason
        if stalled is not None:
            return CloseInfo.stalled(method, stalled, self.messages)
        local = "stopped" if self.r._stop.is_set() else None
        return CloseInfo.from_error(method, err, self.messages, local)

    def _took(self, stream: int, update: Any) -> None:
        """One parsed message: counted, checked (--validate: the catalog and readiness streams'
        rules), and a catalog followed."""
        r = self.r
        with r._lock:
            self.last = time.monotonic()
            counts = r.report.plane_messages
            counts[self.plane.name] = counts.get(self.plane.name, 0) + 1
            rules = r._plane_rules
            broken = None
            if rules is not None and isinstance(update, PlaneUpdate):
                broken = rules.check(stream, update)
            if broken is not None:
                r.report.violations.append(
                    f"{broken.plane} stream {stream}: {broken.rule}: {broken.reason}"
                )
        if self.plane is _CATALOG:
            self.on_catalog(update)

"""The simulated relay's RPCs over its state: admission as upstream orders it, the plane
streams, and each subscription's snapshot, deltas and heartbeats with the faults it took.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import grpc
from google.protobuf import message_factory

from cbi1kit._proto import kvrelay_v1_pb2 as pb, kvrelay_v1_pb2_grpc as pb_grpc
from cbi1kit.errors import RelayWireError, RelayWireVariant
from cbi1kit.relay._messages import (
    ERROR_REASON_TRAILER,
    RELAY_CONTRACT_MARKER,
    filter_update_from_frame,
    producer_key,
    validate_producer_identity,
)
from cbi1kit.relay._publication import (
    HubSnapshot,
    PublicationFrame,
    PublicationFrameKind,
    encode_snapshot_publication,
)
from cbi1kit.sim._hub import (
    _R,
    MALFORMED_MESSAGE,
    ReceivedCall,
    _pool_key,
    _Relay,
    _Subscriber,
    _Terminal,
    reason_status,
)
from cbi1kit.sim._topology import _LOAD, _SERVING_LOAD


def _now_us() -> int:
    return time.time_ns() // 1000


def _passing_bytes(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A response serializer that sends ``bytes`` unchanged (a malformed-message fault) and
    serialises a message as the generated one does."""

    def serializer(response: Any) -> bytes:
        return response if isinstance(response, bytes) else serialize(response)

    return serializer


_HANDLER_KINDS: Final = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def _service_handler(
    servicer: pb_grpc.KvEventRelayServicer, unimplemented: frozenset[str] = frozenset()
) -> Any:
    """The service's method table, built from its descriptor as the generated
    ``add_KvEventRelayServicer_to_server`` builds it, except that responses may be raw bytes:
    the generated serializers would reject them, and a fault must reach the client as sent.
    Methods named in ``unimplemented`` are left out: gRPC answers them ``UNIMPLEMENTED``."""
    service = pb.DESCRIPTOR.services_by_name["KvEventRelay"]
    handlers = {}
    for method in service.methods:
        if method.name in unimplemented:
            continue
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        make = _HANDLER_KINDS[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=request.FromString,
            response_serializer=_passing_bytes(response.SerializeToString),
        )
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


class _Servicer(pb_grpc.KvEventRelayServicer):
    def __init__(self, server: _Relay) -> None:
        self.s = server

    # -- helpers
    def _fail(self, context: grpc.ServicerContext, reason: int, details: str) -> None:
        code, name = reason_status(reason)
        context.set_trailing_metadata(((ERROR_REASON_TRAILER, name),))
        context.abort(code, details)

    def _contract(self, marker: int, context: grpc.ServicerContext) -> None:
        if marker != RELAY_CONTRACT_MARKER:
            self._fail(
                context,
                _R.RELAY_ERROR_REASON_CONTRACT_MISMATCH,
                "unsupported Relay v1 wire contract",
            )

    def _subscriber_id(self, raw: str, context: grpc.ServicerContext) -> None:
        why = None
        if not raw:
            why = "subscriber_id must not be empty"
        elif len(raw.encode()) > 128:
            why = "subscriber_id exceeds 128 bytes"
        elif any(not ch.isprintable() for ch in raw):
            why = "subscriber_id must not contain control characters"
        if why is not None:
            self._fail(context, _R.RELAY_ERROR_REASON_INVALID_REQUEST, why)

    def _called(self, method: str, context: grpc.ServicerContext) -> None:
        """Note the call as the server received it (metadata, the client certificate's name)."""
        metadata = tuple(
            (key, value if isinstance(value, str) else value.hex())
            for key, value in context.invocation_metadata() or ()
        )
        names = context.auth_context().get("x509_common_name") or [None]
        client = names[0].decode() if isinstance(names[0], bytes) else names[0]
        with self.s._lock:
            self.s.calls.append(ReceivedCall(method, metadata, client))

    @contextlib.contextmanager
    def _plane(self, plane: str, context: grpc.ServicerContext) -> Iterator[None]:
        """Admission to one plane's streams, bounded as upstream bounds each stream kind."""
        limit = self.s.config.max_plane_subscribers
        with self.s._lock:
            open_now = self.s._plane_streams.get(plane, 0)
            if open_now < limit:
                self.s._plane_streams[plane] = open_now + 1
        if open_now >= limit:
            self._fail(
                context,
                _R.RELAY_ERROR_REASON_RESOURCE_LIMIT,
                f"Relay {plane} stream limit {limit} reached",
            )
        try:
            yield
        finally:
            with self.s._lock:
                self.s._plane_streams[plane] -= 1

    def _admit(self, method: str, request: Any, context: grpc.ServicerContext) -> None:
        """A stream's call noted, its contract marker and subscriber id checked."""
        self._called(method, context)
        self._contract(request.contract_marker, context)
        self._subscriber_id(request.subscriber_id, context)

    # -- RPCs
    def GetRelayInfo(
        self, request: pb.RelayInfoRequest, context: grpc.ServicerContext
    ) -> pb.RelayInfo | bytes:
        self._called("GetRelayInfo", context)
        self._contract(request.contract_marker, context)
        with self.s._lock:
            answered = self.s.relay_info_answers
            self.s.relay_info_answers += 1
        if self.s.faults.covers("garbage_relay_info", answered):
            return MALFORMED_MESSAGE
        return pb.RelayInfo(**self.s.envelope())

    def WatchKvPoolCatalog(
        self, request: pb.WatchKvPoolCatalogRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.KvPoolCatalogUpdate | bytes]:
        self._admit("WatchKvPoolCatalog", request, context)
        with self._plane("catalog", context):
            garbage_at = self.s.faults.take("garbage_catalog_after")
            seen = -1
            sent = 0
            while context.is_active() and not self.s._stopping.is_set():
                with self.s._catalog_cond:
                    if self.s._catalog_revision == seen:
                        self.s._catalog_cond.wait(0.25)
                        continue
                    seen = self.s._catalog_revision
                    update = self.s.catalog_update()
                sent += 1
                yield MALFORMED_MESSAGE if sent - 1 == garbage_at else update

    def SubscribeServingReadiness(
        self, request: pb.SubscribeServingReadinessRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.ServingReadinessUpdate]:
        """The complete snapshot at once, again on every change, and the current one again
        every heartbeat interval (counted from the start, not reset by changes), as upstream's
        readiness stream ticks."""
        self._admit("SubscribeServingReadiness", request, context)
        s, beat = self.s, self.s.config.readiness_heartbeat_interval
        with self._plane("readiness", context):
            seen = -1
            next_beat = time.monotonic() + beat
            while context.is_active() and not s._stopping.is_set():
                with s._readiness_cond:
                    now = time.monotonic()
                    due = now >= next_beat
                    if s._readiness_revision == seen and not due:
                        s._readiness_cond.wait(min(0.25, next_beat - now))
                        continue
                    seen = s._readiness_revision
                    update = s.readiness_update()
                if due:
                    next_beat = max(next_beat + beat, time.monotonic())
                yield update

    def SubscribeKvPoolLoad(
        self, request: pb.SubscribeKvPoolLoadRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.KvPoolLoadUpdate]:
        yield from self._windows("SubscribeKvPoolLoad", _LOAD, request, context)

    def SubscribeServingLoad(
        self, request: pb.SubscribeServingLoadRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.ServingLoadUpdate]:
        yield from self._windows("SubscribeServingLoad", _SERVING_LOAD, request, context)

    def _windows(
        self, method: str, plane: str, request: Any, context: grpc.ServicerContext
    ) -> Iterator[Any]:
        """The current window, then every newer one as it begins (upstream's ``window_stream``;
        a consumer too slow for a window gets the newest, where upstream would end its stream
        ``SUBSCRIBER_LAGGED``)."""
        self._admit(method, request, context)
        s = self.s
        sent = -1
        with self._plane(plane, context):
            while context.is_active() and not s._stopping.is_set():
                update = s.window(plane)
                if update.window_sequence > sent:
                    sent = update.window_sequence
                    yield update
                s._stopping.wait(min(0.25, s._next_window_in()))

    def SubscribeKvPool(
        self, request: pb.SubscribeKvPoolRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.FilterUpdate | bytes]:
        s = self.s
        self._admit("SubscribeKvPool", request, context)
        if not request.HasField("expected_producer"):
            self._fail(
                context,
                _R.RELAY_ERROR_REASON_INVALID_REQUEST,
                "SubscribeKvPool requires expected_producer",
            )
        expected = request.expected_producer
        try:
            validate_producer_identity(expected, path="SubscribeKvPoolRequest.expected_producer")
        except RelayWireError as exc:
            unsupported = exc.variant in {
                RelayWireVariant.UnsupportedCkfFormat,
                RelayWireVariant.BucketCount,
            }
            reason = "UNSUPPORTED_FEATURE" if unsupported else "INVALID_REQUEST"
            self._fail(context, _R.Value(f"RELAY_ERROR_REASON_{reason}"), str(exc))
        with s._lock:
            pool = s._pools.get(_pool_key(expected))
        if pool is None or not pool.published:
            self._fail(context, _R.RELAY_ERROR_REASON_POOL_NOT_FOUND, "pool is not published")
            return
        with pool.lock:
            if producer_key(pool.wire_producer) != producer_key(expected):
                self._fail(
                    context,
                    _R.RELAY_ERROR_REASON_PRODUCER_CHANGED,
                    "expected_producer is not the pool's current generation",
                )
            if pool.refused is not None:
                self._fail(context, pool.refused, "this pool is refused (injected fault)")
            if len(pool.subscribers) >= s.config.max_subscribers_per_pool:
                self._fail(
                    context,
                    _R.RELAY_ERROR_REASON_RESOURCE_LIMIT,
                    f"Relay per-pool subscriber limit {s.config.max_subscribers_per_pool} reached",
                )
            sub = _Subscriber(request.subscriber_id, s.config.queue_frames, s.config.queue_bytes)
            snap = pool.subscribe(sub)
            wire = pool.wire_producer
        s.subscriptions.append(sub.stats)
        try:
            yield from _Stream.taking_faults(s, sub, wire, context).run(snap)
        except _Terminal as term:
            sub.stats.end = term.details
            if term.reason is not None:
                self._fail(context, term.reason, term.details)
            context.abort(term.code, term.details)
        finally:
            pool.unsubscribe(sub)


@dataclass(slots=True)
class _Stream:
    """One subscription's sends: the hub's mirror as snapshot chunks, then deltas from its
    bounded queue and heartbeats when idle, with the faults it took when it opened."""

    relay: _Relay
    sub: _Subscriber
    wire: pb.ProducerIdentity
    context: grpc.ServicerContext
    stall_at: int | None
    drop_at: int | None
    corrupt_at: int | None
    garbage_at: int | None
    sent: int = 0
    deltas: int = 0

    @classmethod
    def taking_faults(
        cls,
        relay: _Relay,
        sub: _Subscriber,
        wire: pb.ProducerIdentity,
        context: grpc.ServicerContext,
    ) -> _Stream:
        take = relay.faults.take
        stall, drop = take("stall_after"), take("drop_after_chunks")
        corrupt, garbage = take("corrupt_delta"), take("garbage_update_after")
        return cls(relay, sub, wire, context, stall, drop, corrupt, garbage)

    def run(self, snap: HubSnapshot) -> Iterator[pb.FilterUpdate | bytes]:
        """The whole stream; ends when the client goes, raises ``_Terminal`` otherwise."""
        yield from self._bootstrap(snap)
        yield from self._live(snap.sequence)

    def _emit(self, update: pb.FilterUpdate) -> pb.FilterUpdate | bytes:
        """``update`` sent and counted (or the garbage in its place, if that fault is due)."""
        stats = self.sub.stats
        garbage = self.sent == self.garbage_at
        self.sent += 1
        now = time.monotonic()
        stats.messages += 1
        stats.payload_bytes += 0 if garbage else len(update.payload)
        stats.first_send = now if stats.first_send is None else stats.first_send
        stats.last_send = now
        return MALFORMED_MESSAGE if garbage else update

    def _stall_if_due(self) -> None:
        """Once ``stall_at`` messages are sent: nothing more until the client gives up."""
        if self.stall_at is None or self.sent < self.stall_at:
            return
        self.sub.stats.end = "stalled (injected fault)"
        while self.context.is_active() and not self.relay._stopping.is_set():
            time.sleep(0.02)
        raise _Terminal(None, grpc.StatusCode.CANCELLED, "stalled stream ended")

    def _bootstrap(self, snap: HubSnapshot) -> Iterator[pb.FilterUpdate | bytes]:
        """The mirror as chunk frames, each under a progress timeout."""
        timeout = self.relay.config.snapshot_progress_timeout
        chunks = encode_snapshot_publication(snap)
        last = time.monotonic()
        for i, frame in enumerate(chunks):
            if self.drop_at is not None and i == self.drop_at:
                self.sub.stats.end = "dropped mid-snapshot (injected fault)"
                raise _Terminal(
                    None, grpc.StatusCode.UNAVAILABLE, "connection dropped (injected fault)"
                )
            self._stall_if_due()
            if time.monotonic() - last > timeout:
                raise _Terminal(
                    _R.RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"snapshot chunk {i} was not drained within {timeout} s",
                )
            yield self._emit(self._update(frame))
            last = time.monotonic()

    def _live(self, sequence: int) -> Iterator[pb.FilterUpdate | bytes]:
        """Deltas from the bounded queue, a heartbeat whenever it stays idle an interval."""
        beat = self.relay.config.heartbeat_interval
        next_heartbeat = time.monotonic() + beat
        while not self.relay._stopping.is_set():
            if not self.context.is_active():
                return
            self._stall_if_due()
            live = self.sub.get(max(0.0, min(next_heartbeat - time.monotonic(), 0.25)))
            if live is None:
                if time.monotonic() >= next_heartbeat:
                    yield self._emit(self._heartbeat(sequence))
                    next_heartbeat = time.monotonic() + beat
                continue
            payload = self._corrupted(live)
            sequence = live.sequence
            yield self._emit(self._update(live, payload))
            next_heartbeat = time.monotonic() + beat
        raise _Terminal(
            _R.RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE,
            grpc.StatusCode.UNAVAILABLE,
            "relay shutting down",
        )

    def _corrupted(self, frame: PublicationFrame) -> bytes | None:
        """The payload to send instead of a delta's, with a byte of its body flipped, if this
        is the delta the fault names; None: the frame's own."""
        if frame.kind is not PublicationFrameKind.DELTA:
            return None
        self.deltas += 1
        if self.deltas != self.corrupt_at:
            return None
        body = bytearray(frame.payload)
        body[-1] ^= 0xFF
        return bytes(body)

    def _update(self, frame: PublicationFrame, payload: bytes | None = None) -> pb.FilterUpdate:
        return filter_update_from_frame(
            frame, self.relay.relay, send_ts_us=_now_us(), producer=self.wire, payload=payload
        )

    def _heartbeat(self, sequence: int) -> pb.FilterUpdate:
        return pb.FilterUpdate(
            **self.relay.envelope(),
            producer=self.wire,
            base_sequence=sequence,
            sequence=sequence,
            send_ts_us=_now_us(),
            kind=pb.FILTER_UPDATE_KIND_HEARTBEAT,
        )

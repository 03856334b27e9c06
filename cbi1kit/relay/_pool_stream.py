"""One selected pool's ``SubscribeKvPool`` stream, resubscribing on its own thread as a consumer
does (``docs/recorder.md`` gives every reason to resubscribe and when a pool fails for good).
"""

from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.errors import RecorderError
from cbi1kit.relay._core import _RecorderCore
from cbi1kit.relay._messages import RELAY_CONTRACT_MARKER, producer_key
from cbi1kit.relay._planes import pool_source_violation
from cbi1kit.relay._session import (
    SUBSCRIBE_METHOD,
    Action,
    CloseInfo,
    PoolRecord,
    RecorderConfig,
    _md,
    _pool_of,
    _relay_text,
    _session_error,
    _trailer_reason,
    producer_key_text,
)
from cbi1kit.relay._stream import StepKind, StreamChecker


@dataclass(slots=True)
class _Taken:
    """What one subscription call took: messages kept, and why we ended it (None: the relay
    or the frame limit did)."""

    count: int = 0
    local: str | None = None


def _open_info(
    cfg: RecorderConfig, producer: pb.ProducerIdentity, catalog: pb.KvPoolCatalogUpdate
) -> dict[str, Any]:
    """A pool stream's open record: the catalog the key came from too (its revisions count
    anew after a relay restart, so the revision alone is ambiguous without its relay)."""
    return {
        "subscriber_id": cfg.subscriber_id,
        "producer_key": producer_key_text(producer),
        "catalog_revision": catalog.revision,
        "catalog_relay": _relay_text(catalog.relay),
    }


class _PoolStream:
    """One selected pool's ``SubscribeKvPool`` stream, on its own thread, with its own
    resubscription state: the producer it subscribed to, backoff, the stall watchdog's clock,
    why it ended, and its part of the report (``record``). Everything it shares with the
    session (the writer, the catalog, the report) is under the recorder's lock."""

    def __init__(self, recorder: _RecorderCore, pool: tuple[Any, ...], record: PoolRecord) -> None:
        self.r = recorder
        self.pool = pool
        self.record = record
        seed = recorder.config.seed
        self._rng = random.Random(None if seed is None else f"{seed}/{record.pool}")
        self.call: Any = None
        self.call_reason: str | None = None
        self.stalled = False  # the watchdog ended the call: no message within stall_timeout
        self.last_recv = time.monotonic()
        self.current: pb.ProducerIdentity | None = None
        self.thread: threading.Thread | None = None
        self.running = False  # its thread is on (set and cleared under the lock)
        #: the failure that ended it for good, and the producer key it failed on (None: it left
        #: the catalog): only a catalog that advertises another key starts it again
        self.error: RecorderError | None = None
        self.retry_key: tuple[Any, ...] | None = None
        self.crash: BaseException | None = None  # a bug: the session re-raises it
        self.delay = 0.0  # the next backoff
        #: when the relay stopped answering this pool's subscriptions (None: it answers)
        self.unreachable_since: float | None = None

    @property
    def failed(self) -> bool:
        """Ended for good: its thread is over, with an error."""
        return not self.running and self.error is not None

    def start(self) -> None:
        """Start (or, after a failure, restart) its thread. Under the recorder's lock."""
        if self.running:
            return
        self.running = True
        self.error, self.retry_key = None, None
        self.record.ended, self.record.exit_code = None, 0
        self.thread = threading.Thread(
            target=self._run, name=f"cbi1kit-recorder-pool-{self.record.label}", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        try:
            self._loop()
        except RecorderError as exc:
            with self.r._lock:
                self.error = exc
                self.record.ended, self.record.exit_code = str(exc), exc.exit_code
        except BaseException as exc:  # a bug or an unwritable capture: the session ends on it
            self.crash = exc
            self.r.stop(f"{type(exc).__name__}: {exc}")
        finally:
            with self.r._catalog_cond:
                self.running = False
                self.r._catalog_cond.notify_all()  # the session checks whether any is left

    def candidates(self, catalog: pb.KvPoolCatalogUpdate) -> list[pb.KvPoolDescriptor]:
        """The catalog's entries of this pool that the selection still picks."""
        return [
            d
            for d in catalog.snapshot.pools
            if _pool_of(d.producer) == self.pool and self.r.config.selector.matches(d)
        ]

    def on_catalog(self, update: pb.KvPoolCatalogUpdate) -> Any:
        """The open call to end if ``update`` withdrew this pool or advertises another producer
        generation for it (None: keep it). Under the recorder's lock."""
        if self.current is None or self.call is None:
            return None
        key = producer_key(self.current)
        same_pool = self.candidates(update)
        if not same_pool:
            self.call_reason, self.stalled = "catalog: pool withdrawn", False
            return self.call
        if all(producer_key(p.producer) != key for p in same_pool):
            self.call_reason, self.stalled = "catalog: new producer generation", False
            return self.call
        return None

    def _pick(
        self, avoid: tuple[Any, ...] | None, wait: float | None
    ) -> tuple[pb.ProducerIdentity, pb.KvPoolCatalogUpdate] | None:
        """The pool's producer and the newest catalog it is from; with ``avoid``, wait up to
        ``wait`` seconds (None: until the session stops) for a catalog that advertises another
        key."""
        r = self.r
        deadline = None if wait is None else time.monotonic() + wait
        with r._catalog_cond:
            while True:
                catalog = r._catalog
                pools = [] if catalog is None else self.candidates(catalog)
                if pools and producer_key(pools[0].producer) != avoid:
                    assert catalog is not None
                    return pools[0].producer, catalog
                if r._stop.is_set():
                    return None
                if deadline is None:
                    r._catalog_cond.wait(1.0)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                r._catalog_cond.wait(left)

    def _loop(self) -> None:
        """Subscribe, read to the stream's end, back off, and again: until the session stops,
        or the pool fails for good (a ``RecorderError``)."""
        cfg = self.r.config
        self.delay, self.unreachable_since = cfg.backoff_initial, None
        avoid: tuple[Any, ...] | None = None
        while not self.r._stop.is_set():
            picked = self._next(avoid)
            if picked is None:
                return
            producer, catalog = picked
            started = time.monotonic()
            close = self._once(producer, catalog)
            if close.action is Action.STOP or self.r._stop.is_set():
                return
            self._after(producer, close, started)
            avoid = producer_key(producer) if close.action is Action.REFRESH else None
            if not self._back_off():
                return

    def _next(
        self, avoid: tuple[Any, ...] | None
    ) -> tuple[pb.ProducerIdentity, pb.KvPoolCatalogUpdate] | None:
        """The producer to subscribe to and its catalog: after a refresh, another than
        ``avoid`` if a catalog names one within the backoff; a withdrawn pool waited for up to
        ``give_up_after`` (a ``RecorderError`` then). None: the session stopped."""
        cfg = self.r.config
        wait = cfg.backoff_max if avoid is not None else 0.0
        # waiting for a catalog naming another producer spends the same budget
        picked = self._pick(avoid, min(wait, self._budget_left())) or self._pick(None, 0.0)
        if picked is not None:
            return picked
        # The pool is withdrawn; wait for it to come back, bounded by give_up_after.
        picked = self._pick(None, cfg.give_up_after)
        if picked is None:
            if self.r._stop.is_set():
                return None
            raise _session_error("the selected pool left the catalog", 3)
        # it was the pool that was gone, not the relay: the catalog naming it again
        # came from the relay, so its failed subscriptions before do not count
        self.unreachable_since = None
        return picked

    def _budget_left(self) -> float:
        """Seconds left of ``give_up_after`` since the relay stopped answering (inf: no limit,
        or it answers)."""
        give_up, since = self.r.config.give_up_after, self.unreachable_since
        if give_up is None or since is None:
            return math.inf
        return max(0.0, give_up - (time.monotonic() - since))

    def _after(self, producer: pb.ProducerIdentity, close: CloseInfo, started: float) -> None:
        """Reckon a subscription's end: one not to retry unchanged, or the relay unreachable for
        ``give_up_after``, fails the pool on this producer; one that lasted resets the backoff;
        the outage runs from the last message, or from the first failed subscription."""
        cfg = self.r.config
        if close.action is Action.FATAL:
            self.retry_key = producer_key(producer)
            raise _session_error(f"SubscribeKvPool: {close.status} {close.details}", 1)
        if time.monotonic() - started >= cfg.backoff_reset_after:
            self.delay = cfg.backoff_initial
        if close.messages > 0:  # the relay answered until now: an outage starts here
            self.unreachable_since = time.monotonic()
        elif self.unreachable_since is None:
            self.unreachable_since = started
        if self._budget_left() <= 0:
            self.retry_key = producer_key(producer)
            raise _session_error(
                f"relay {cfg.target} unreachable for {cfg.give_up_after} s: "
                f"{close.status} {close.details}",
                3,
            )

    def _back_off(self) -> bool:
        """Sleep the backoff (equal jitter; a backoff grown over a flapping relay does not
        outlast the budget), then double it; whether the session goes on."""
        pause = self.delay / 2 + self._rng.random() * self.delay / 2
        if not self.r._sleep(min(pause, self._budget_left())):
            return False
        self.delay = min(self.delay * 2, self.r.config.backoff_max)
        return True

    def _once(self, producer: pb.ProducerIdentity, catalog: pb.KvPoolCatalogUpdate) -> CloseInfo:
        """One subscription to ``producer``: opened in the capture, read to its end, closed."""
        r, cfg = self.r, self.r.config
        request = pb.SubscribeKvPoolRequest(
            subscriber_id=cfg.subscriber_id,
            expected_producer=producer,
            contract_marker=RELAY_CONTRACT_MARKER,
        )
        stream = r._write_open(
            SUBSCRIBE_METHOD, request.SerializeToString(), _open_info(cfg, producer, catalog)
        )
        checker = self._checker(stream, producer, catalog)
        with r._lock:
            if r._stop.is_set():
                close = CloseInfo(SUBSCRIBE_METHOD, "CANCELLED", "", None, "stopped", 0)
                r._write_close(stream, close, [], self.record)
                return replace(close, action=Action.STOP)
            assert r._channel is not None
            stub = r._channel.unary_stream(
                SUBSCRIBE_METHOD,
                request_serializer=pb.SubscribeKvPoolRequest.SerializeToString,
                response_deserializer=None,
            )
            call = stub(request, wait_for_ready=False, metadata=cfg.metadata)
            self.call, self.call_reason, self.stalled = call, None, False
            self.current = producer
            self.last_recv = time.monotonic()
            self.record.subscriptions += 1
            r.report.subscriptions += 1
        close, trailers = self._read(stream, call, checker)
        r._write_close(stream, close, trailers, self.record)
        return close

    def _checker(
        self, stream: int, producer: pb.ProducerIdentity, catalog: pb.KvPoolCatalogUpdate
    ) -> StreamChecker | None:
        """--validate: the replay engine's rules over this stream (its relay identity is the
        stream's own: a restarted relay answers the next subscription with a new one), and
        whether upstream's consumer would take a CKF stream from the pool at all."""
        if not self.r.config.validate:
            return None
        checker = StreamChecker(expected_producer=producer)
        source = pool_source_violation(stream, producer, catalog)
        if source is not None:
            self._violation(f"pool stream {stream}: {source.rule}: {source.reason}")
        return checker

    def _read(
        self, stream: int, call: Any, checker: StreamChecker | None
    ) -> tuple[CloseInfo, list[tuple[str, str]]]:
        """The call's messages, each taken, until it ends; how it closed, and its trailers."""
        r, taken = self.r, _Taken()
        try:
            for raw in call:
                if self._take(stream, raw, call, checker, taken):
                    break
            else:
                md = call.trailing_metadata()
                close = CloseInfo(
                    SUBSCRIBE_METHOD,
                    "OK",
                    "clean end of stream",
                    _trailer_reason(md),
                    "EOF",
                    taken.count,
                    action=Action.RESUBSCRIBE,
                )
                return close, _md(md)
        except grpc.RpcError as err:
            return self._error_close(err, taken), _md(err.trailing_metadata())
        finally:
            with r._lock:
                self.call = None
        # left the loop ourselves: a validation failure or the frame limit
        with r._lock:
            reason_text = taken.local or r.report.stop_reason or "stopped"
        action = Action.STOP if r._stop.is_set() else Action.RESUBSCRIBE
        close = CloseInfo(SUBSCRIBE_METHOD, "CANCELLED", "", None, reason_text, taken.count, action)
        return close, []

    def _take(
        self, stream: int, raw: bytes, call: Any, checker: StreamChecker | None, taken: _Taken
    ) -> bool:
        """One message of the stream: kept as received, counted, validated; whether to stop
        reading (``taken.local`` then says why, unless the frame limit was reached)."""
        r, cfg, record = self.r, self.r.config, self.record
        wall, mono = time.time_ns(), time.monotonic_ns()
        try:
            update = pb.FilterUpdate.FromString(raw)
        except DecodeError as exc:
            # relay.md: a message that does not decode ends the stream; resubscribe
            # (the bytes are kept in the capture as received)
            r._write_message(stream, raw, wall, mono)
            taken.count += 1
            taken.local = f"malformed FilterUpdate: {exc}"
            if checker is not None:
                self._violation(f"relay-protobuf-decode: {exc}")
            call.cancel()
            return True
        kind = pb.FilterUpdateKind.Name(update.kind)
        with r._lock:
            if cfg.max_frames is not None and r.report.messages >= cfg.max_frames:
                return True  # another pool's message was the last one asked for
            r._write_message(stream, raw, wall, mono)
            taken.count += 1
            self.last_recv = time.monotonic()
            for figures in (r.report, record):
                figures.messages += 1
                figures.payload_bytes += len(update.payload)
                figures.last_sequence = update.sequence
                figures.last_kind = kind
            r._lag_ms = (wall / 1000 - update.send_ts_us) / 1000
            last = cfg.max_frames is not None and r.report.messages >= cfg.max_frames
            if last:  # exactly max_frames, whichever pools they came from
                r.stop("frame limit reached")
        if checker is not None:
            step = checker.check(update)
            if step.kind is StepKind.VIOLATION:
                problem = f"{step.rule}: {step.reason}"
                self._violation(problem)
                taken.local = f"validation: {problem}"
                call.cancel()
                return True
        if cfg.on_message is not None:
            cfg.on_message(update)
        return last

    def _error_close(self, err: grpc.RpcError, taken: _Taken) -> CloseInfo:
        """How a call that ended in an RPC error closes, and what follows (resubscribe, stop)."""
        r = self.r
        with r._lock:
            stalled = taken.local is None and self.stalled
            local = taken.local or self.call_reason
        if err.code() == grpc.StatusCode.CANCELLED and local is None and r._stop.is_set():
            local = r.report.stop_reason or "stopped"
        if stalled and local is not None:
            return CloseInfo.stalled(SUBSCRIBE_METHOD, local, taken.count)
        close = CloseInfo.from_error(SUBSCRIBE_METHOD, err, taken.count, local)
        if r._stop.is_set() and close.status == "CANCELLED":
            return replace(close, action=Action.STOP)
        if local is not None and close.status == "CANCELLED":
            return replace(close, action=Action.RESUBSCRIBE)
        return close

    def _violation(self, problem: str) -> None:
        with self.r._lock:
            self.r.report.violations.append(problem)
            self.record.violations.append(problem)

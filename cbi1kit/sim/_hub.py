"""The simulated relay's state: its config and faults, each pool's hub (its pump and its
subscribers' bounded queues), and the catalog, readiness and load windows every stream reads.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import grpc

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.hashing._identity import RelayIdentity
from cbi1kit.relay._messages import (
    MAX_MESSAGE_BYTES,
    RELAY_CONTRACT_MARKER,
    RELAY_PROTOCOL_VERSION,
    producer_key,
    producer_to_wire,
    relay_identity_to_wire,
)
from cbi1kit.relay._publication import (
    ENVELOPE_HEADROOM_BYTES,
    HubSnapshot,
    PublicationFrame,
    PublicationFrameKind,
)
from cbi1kit.relay._transport import ServerTls
from cbi1kit.sim._feeds import PoolFeed
from cbi1kit.sim._simulator import config_error
from cbi1kit.sim._topology import _LOAD, _load_entry, _PoolState, _serving_load, _topology

#: Upstream ``publication_queue_capacity`` / ``publication_queue_bytes`` defaults.
QUEUE_FRAMES: Final = 16
QUEUE_BYTES: Final = 16 * 1024 * 1024
DEFAULT_HEARTBEAT_INTERVAL: Final = 10.0
DEFAULT_SNAPSHOT_PROGRESS_TIMEOUT: Final = 60.0
DEFAULT_MAX_SUBSCRIBERS_PER_POOL: Final = 64
#: Upstream's ``load_window_ms`` (pool load) and serving-load aggregation interval, 1 s.
DEFAULT_LOAD_WINDOW: Final = 1.0
#: What the malformed-message faults send: a field tag whose varint is cut short, so no
#: protobuf message of any type parses it (the client's ``FromString`` raises DecodeError).
MALFORMED_MESSAGE: Final = b"\xff\xff\xff"

_R = pb.RelayErrorReason
_REASON_CODES: Final[dict[int, grpc.StatusCode]] = {
    _R.RELAY_ERROR_REASON_CONTRACT_MISMATCH: grpc.StatusCode.FAILED_PRECONDITION,
    _R.RELAY_ERROR_REASON_PRODUCER_CHANGED: grpc.StatusCode.FAILED_PRECONDITION,
    _R.RELAY_ERROR_REASON_INVALID_PUBLICATION: grpc.StatusCode.FAILED_PRECONDITION,
    _R.RELAY_ERROR_REASON_UNSUPPORTED_FEATURE: grpc.StatusCode.FAILED_PRECONDITION,
    _R.RELAY_ERROR_REASON_INVALID_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    _R.RELAY_ERROR_REASON_POOL_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    _R.RELAY_ERROR_REASON_RESOURCE_LIMIT: grpc.StatusCode.RESOURCE_EXHAUSTED,
    _R.RELAY_ERROR_REASON_SUBSCRIBER_LAGGED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    _R.RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT: grpc.StatusCode.RESOURCE_EXHAUSTED,
    _R.RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    _R.RELAY_ERROR_REASON_INTERNAL: grpc.StatusCode.INTERNAL,
    _R.RELAY_ERROR_REASON_UNSPECIFIED: grpc.StatusCode.INTERNAL,
}


def reason_status(reason: int) -> tuple[grpc.StatusCode, str]:
    """The gRPC code and trailer value upstream's ``RelayErrorReason::status`` uses."""
    return _REASON_CODES[reason], pb.RelayErrorReason.Name(reason)


def _pool_key(identity: pb.ProducerIdentity) -> tuple[Any, ...]:
    return producer_key(identity)[:4]


# --------------------------------------------------------------------------------------------
# faults


@dataclass(slots=True)
class FaultPlan:
    """Injected faults, one-shot unless said otherwise (the first stream or feed step to reach one
    consumes it):

    * ``drop_after_chunks``: end a subscription ``UNAVAILABLE``, no reason trailer, after this many
      snapshot chunks (a connection lost mid-snapshot).
    * ``corrupt_delta``: flip a body byte of the n-th delta (1-based) a subscription sends.
    * ``stall_after``: after this many messages a subscription sends nothing, not even heartbeats.
    * ``change_generation_after``: after this many published deltas, re-attach the pool under a new
      layout generation.
    * ``garbage_update_after`` / ``garbage_catalog_after`` (0: at once): after this many messages /
      catalog updates, the next ``FilterUpdate`` / ``KvPoolCatalogUpdate`` is
      ``MALFORMED_MESSAGE`` (no protobuf message), lost with it; the stream carries on.
    * ``garbage_relay_info``: the first this many ``GetRelayInfo`` answers (a large number: always);
      listed in ``fired`` once.
    """

    drop_after_chunks: int | None = None
    corrupt_delta: int | None = None
    stall_after: int | None = None
    change_generation_after: int | None = None
    garbage_update_after: int | None = None
    garbage_catalog_after: int | None = None
    garbage_relay_info: int | None = None
    fired: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, name: str) -> int | None:
        """The trigger of fault ``name`` if it is still armed, disarming it."""
        with self._lock:
            value: int | None = getattr(self, name)
            if value is None:
                return None
            setattr(self, name, None)
            self.fired.append(name)
            return value

    def covers(self, name: str, count: int) -> bool:
        """Whether fault ``name``, which covers the first n events the caller counts, covers
        event ``count`` (0-based); the first one covered is noted in ``fired``."""
        with self._lock:
            first: int | None = getattr(self, name)
            if first is None or count >= first:
                return False
            if count == 0:
                self.fired.append(name)
            return True


# --------------------------------------------------------------------------------------------
# hub and subscribers


class _Terminal(Exception):
    def __init__(self, reason: int | None, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.reason = reason
        self.code = code
        self.details = details


@dataclass(slots=True)
class SubscriberStats:
    """What one subscription sent, for tests and the benchmark's server-side rate."""

    subscriber_id: str
    messages: int = 0
    payload_bytes: int = 0
    first_send: float | None = None
    last_send: float | None = None
    end: str | None = None


class _Subscriber:
    """A bounded queue: at most ``max_frames`` frames and ``max_bytes`` queued bytes."""

    def __init__(self, subscriber_id: str, max_frames: int, max_bytes: int) -> None:
        self.stats = SubscriberStats(subscriber_id)
        self._frames: collections.deque[PublicationFrame] = collections.deque()
        self._bytes = 0
        self._max_frames = max_frames
        self._max_bytes = max_bytes
        self._cond = threading.Condition()
        self._terminal: _Terminal | None = None

    def offer(self, frame: PublicationFrame) -> bool:
        """Queue without blocking; False if either budget would overflow (the caller lags us)."""
        cost = frame.queued_bytes
        with self._cond:
            if self._terminal is not None:
                return True
            if len(self._frames) + 1 > self._max_frames or self._bytes + cost > self._max_bytes:
                return False
            self._frames.append(frame)
            self._bytes += cost
            self._cond.notify()
            return True

    def terminate(self, terminal: _Terminal) -> None:
        with self._cond:
            if self._terminal is None:
                self._terminal = terminal
            self._cond.notify()

    def get(self, timeout: float) -> PublicationFrame | None:
        """The next frame; None on timeout; raises the terminal error once the queue is empty."""
        with self._cond:
            if not self._frames and self._terminal is None:
                self._cond.wait(timeout)
            if self._frames:
                frame = self._frames.popleft()
                self._bytes -= len(frame.payload) + ENVELOPE_HEADROOM_BYTES
                return frame
            if self._terminal is not None:
                raise self._terminal
            return None

    @property
    def queued(self) -> tuple[int, int]:
        with self._cond:
            return len(self._frames), self._bytes


class _Pool:
    """A pool: its feed, the current generation's hub (if any) and the pump thread."""

    def __init__(self, feed: PoolFeed, server: _Relay) -> None:
        self.feed = feed
        self.server = server
        self.lock = threading.RLock()
        self.wire_producer = producer_to_wire(feed.identity)
        self.descriptor = feed.descriptor()
        self.subscribers: list[_Subscriber] = []
        self.ready = True  # its workers serve (the readiness and load planes say so)
        self.published = True  # in the catalog (``RelayServer.withdraw_pool`` takes it out)
        #: a RelayErrorReason every subscription is refused with (``RelayServer.refuse_pool``)
        self.refused: int | None = None
        self.hub_alive = False
        self.exhausted = False
        self.deltas_published = 0
        self._pump: threading.Thread | None = None

    def subscribe(self, sub: _Subscriber) -> HubSnapshot:
        with self.lock:
            snap = self.feed.snapshot()
            self.subscribers.append(sub)
            if not self.hub_alive:
                self.hub_alive = True
                self._pump = threading.Thread(
                    target=self._run_pump, name="cbi1kit-relay-pump", daemon=True
                )
                self._pump.start()
            return snap

    def unsubscribe(self, sub: _Subscriber) -> None:
        with self.lock:
            if sub in self.subscribers:
                self.subscribers.remove(sub)

    def _fan_out(self, frame: PublicationFrame) -> None:
        for sub in list(self.subscribers):
            if not sub.offer(frame):
                self.subscribers.remove(sub)
                self.server.lagged_total += 1
                n, b = sub.queued
                sub.terminate(
                    _Terminal(
                        _R.RELAY_ERROR_REASON_SUBSCRIBER_LAGGED,
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"subscriber lagged: queue holds {n} frames / {b} bytes "
                        f"(limits {self.server.config.queue_frames} / "
                        f"{self.server.config.queue_bytes}); resubscribe",
                    )
                )

    def end_subscribers(self, reason: int, details: str) -> None:
        """End every subscription with ``reason`` (after what is queued). Under ``lock``."""
        code, _ = reason_status(reason)
        for sub in self.subscribers:
            sub.terminate(_Terminal(reason, code, details))
        self.subscribers.clear()

    def next_generation(self) -> None:
        """The feed re-attached under a new layout generation: the new key. Under ``lock``."""
        self.feed.new_generation()
        self.wire_producer = producer_to_wire(self.feed.identity)
        self.descriptor = self.feed.descriptor()

    def change_generation(self) -> None:
        """Retire the hub: subscribers end PUBLICATION_UNAVAILABLE; the catalog gets the new key."""
        with self.lock:
            self.next_generation()
            self.end_subscribers(
                _R.RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE,
                "producer generation retired; refresh the catalog and resubscribe",
            )
        self.server._bump_catalog()

    def _run_pump(self) -> None:
        cfg = self.server.config
        stop = self.server._stopping
        while not stop.is_set():
            with self.lock:
                if self.exhausted:
                    break
                published = self.published  # a detached producer publishes nothing
                frames = self.feed.advance() if published else ()
                if frames is None:
                    self.exhausted = True
                    break
                for frame in frames:
                    self._fan_out(frame)
                    if frame.kind is PublicationFrameKind.DELTA:
                        self.deltas_published += 1
                after = self.server.faults.change_generation_after
                change = published and after is not None and self.deltas_published >= after
            if change and self.server.faults.take("change_generation_after") is not None:
                self.change_generation()
            if cfg.pace > 0 or not published:
                stop.wait(max(cfg.pace, 0.01) if not published else cfg.pace)


# --------------------------------------------------------------------------------------------
# config, and the state every stream reads


@dataclass(frozen=True, slots=True)
class Release:
    """How a released relay differs from this simulator's own ways, as recorded from it
    (``ai-dynamo-runtime`` 1.6.1: ``ck.data.real_capture()``, ``tests/test_real_relay.py``)."""

    #: RPCs it answers ``UNIMPLEMENTED`` (1.6.1: the five-RPC schema before serving load)
    unimplemented: frozenset[str]
    #: pool load carries only ``kv_expected_ranks`` (no worker publishes metrics to it)
    load_ranks_only: bool
    #: readiness revisions counted as upstream's ``TopologyPublisher`` counts them: 1 when
    #: built, then one per change of the derived entries (every endpoint's membership at
    #: once, then each endpoint's availability): the first a subscriber sees is 2 + endpoints
    readiness_from_topology: bool
    #: a shutdown drops every stream: ``UNAVAILABLE``, no trailers, no clean end
    drops_streams_on_shutdown: bool
    #: ``expected_unique_blocks`` when not given: 524,288 buckets, one 4,194,368-byte chunk
    expected_blocks: int


RELEASES: Final = {
    "1.6.1": Release(
        unimplemented=frozenset({"SubscribeServingLoad"}),
        load_ranks_only=True,
        readiness_from_topology=True,
        drops_streams_on_shutdown=True,
        expected_blocks=1_048_576,
    )
}


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Knobs, with upstream's defaults where upstream has one (relay.md §2.7)."""

    host: str = "127.0.0.1"
    port: int = 0
    pace: float = 0.01
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL
    snapshot_progress_timeout: float = DEFAULT_SNAPSHOT_PROGRESS_TIMEOUT
    queue_frames: int = QUEUE_FRAMES
    queue_bytes: int = QUEUE_BYTES
    max_subscribers_per_pool: int = DEFAULT_MAX_SUBSCRIBERS_PER_POOL
    #: each of the catalog, readiness, load and serving-load planes (upstream's
    #: ``max_catalog_subscribers``, ``max_readiness_subscribers``, ``max_load_subscribers``)
    max_plane_subscribers: int = DEFAULT_MAX_SUBSCRIBERS_PER_POOL
    readiness_heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL
    load_window: float = DEFAULT_LOAD_WINDOW
    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_workers: int = 32
    drt_instance_id: int = 0x0D7_0001
    relay_incarnation: int = 0x5EED_0001
    grpc_options: tuple[tuple[str, Any], ...] = ()
    #: RPCs answered ``UNIMPLEMENTED``, as by a relay of an older schema (upstream's
    #: ``protocol/relay.proto`` at bd44782f has no ``SubscribeServingLoad``)
    unimplemented: frozenset[str] = frozenset()
    tls: ServerTls | None = None  # None: plaintext, as upstream's relay itself serves
    #: a released relay to behave like where ours differs (``RELEASES``); None: the newest
    #: schema and this simulator's own ways
    like: str | None = None

    def __post_init__(self) -> None:
        service = pb.DESCRIPTOR.services_by_name["KvEventRelay"]
        unknown = self.unimplemented - {m.name for m in service.methods}
        if unknown:
            why = "no such RPC to leave out"
            raise config_error("unimplemented", sorted(unknown), why, what="server config")
        if self.like is not None and self.like not in RELEASES:
            why = f"not one of {', '.join(RELEASES)}"
            raise config_error("like", self.like, why, what="server config")
        if self.like is not None:
            left_out = RELEASES[self.like].unimplemented
            object.__setattr__(self, "unimplemented", self.unimplemented | left_out)

    @property
    def release(self) -> Release | None:
        """The released relay this one behaves like, or None."""
        return None if self.like is None else RELEASES[self.like]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ReceivedCall:
    """One RPC as the server received it: the method, the client's metadata (binary values in
    hex) and, under mTLS, its certificate's common name."""

    method: str
    metadata: tuple[tuple[str, str], ...]
    client: str | None


class _Relay:
    """The relay's state, what every stream reads: its pools, the catalog and readiness
    revisions, the load windows, and what it counted (``RelayServer`` serves it)."""

    def __init__(
        self,
        feeds: PoolFeed | Sequence[PoolFeed],
        config: ServerConfig | None = None,
        *,
        faults: FaultPlan | None = None,
    ) -> None:
        self.config = config or ServerConfig()
        self.faults = faults or FaultPlan()
        self.relay = RelayIdentity(self.config.drt_instance_id, self.config.relay_incarnation)
        self._stopping = threading.Event()
        self._catalog_cond = threading.Condition()
        self._catalog_revision = 1
        feed_list = [feeds] if not isinstance(feeds, Sequence) else list(feeds)
        self._pools: dict[tuple[Any, ...], _Pool] = {}
        for feed in feed_list:
            pool = _Pool(feed, self)
            self._pools[_pool_key(pool.wire_producer)] = pool
        self.subscriptions: list[SubscriberStats] = []
        self.lagged_total = 0
        self.relay_info_answers = 0
        self.calls: list[ReceivedCall] = []
        self._readiness_cond = threading.Condition()
        self._readiness_revision = 1
        release = self.config.release
        if release is not None and release.readiness_from_topology:
            endpoints = {
                p.descriptor.serving_endpoint.SerializeToString() for p in self._pools.values()
            }
            self._readiness_revision = 2 + len(endpoints)
        self._plane_streams: dict[str, int] = {}
        self._windows_lock = threading.Lock()
        self._windows: dict[str, Any] = {}
        self._window_start = time.monotonic()
        self._lock = threading.Lock()

    def _pool_list(self) -> list[_Pool]:
        """Every pool ever served, in the order they were added (their ``index``)."""
        with self._lock:
            return list(self._pools.values())

    def _pool_at(self, index: int) -> _Pool:
        return self._pool_list()[index]

    def envelope(self) -> dict[str, Any]:
        """What every message the relay sends carries: the protocol version, the relay's identity
        and the contract marker."""
        return {
            "protocol_version": RELAY_PROTOCOL_VERSION,
            "relay": relay_identity_to_wire(self.relay),
            "contract_marker": RELAY_CONTRACT_MARKER,
        }

    def catalog_update(self) -> pb.KvPoolCatalogUpdate:
        """The catalog as served now: every published pool, at the current revision."""
        pools = []
        for pool in self._pool_list():
            with pool.lock:
                if pool.published:
                    pools.append(pool.descriptor)
        return pb.KvPoolCatalogUpdate(
            **self.envelope(),
            revision=self._catalog_revision,
            snapshot=pb.KvPoolCatalogSnapshot(pools=pools),
        )

    def _pool_states(self, *, load: bool) -> list[_PoolState]:
        out = []
        for pool in self._pool_list():
            with pool.lock:
                if not pool.published:
                    continue
                kv = pool.feed.kv_load() if load else None
                out.append(_PoolState(pool.descriptor, pool.wire_producer, pool.ready, kv))
        return out

    def readiness_update(self) -> pb.ServingReadinessUpdate:
        """The complete serving-readiness snapshot (upstream ``readiness_to_wire``)."""
        return pb.ServingReadinessUpdate(
            **self.envelope(),
            revision=self._readiness_revision,
            entries=_topology(self._pool_states(load=False)),
        )

    def _next_window_in(self) -> float:
        window = self.config.load_window
        return window - (time.monotonic() - self._window_start) % window

    def window(self, plane: str) -> Any:
        """The current window of the ``load`` or ``serving-load`` plane: numbered from 0 at
        start, one per ``load_window``, built once and the same for every subscriber."""
        window = self.config.load_window
        sequence = int((time.monotonic() - self._window_start) // window)
        with self._windows_lock:
            current = self._windows.get(plane)
            if current is not None and current.window_sequence == sequence:
                return current
            states = self._pool_states(load=True)
            head = {
                **self.envelope(),
                "window_sequence": sequence,
                "observed_ms": _now_ms(),
                "window_ms": round(window * 1000),
            }
            if plane == _LOAD:
                ranks_only = self.config.release is not None and self.config.release.load_ranks_only
                entries = [_load_entry(state, ranks_only) for state in states]
                update: Any = pb.KvPoolLoadUpdate(**head, pools=entries)
            else:
                pools, models = _serving_load(states)
                update = pb.ServingLoadUpdate(**head, pools=pools, models=models)
            self._windows[plane] = update
            return update

    def _bump_catalog(self) -> None:
        with self._catalog_cond:
            self._catalog_revision += 1
            self._catalog_cond.notify_all()

    def _bump_readiness(self) -> None:
        with self._readiness_cond:
            self._readiness_revision += 1
            self._readiness_cond.notify_all()

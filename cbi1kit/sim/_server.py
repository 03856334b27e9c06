"""A **simulated** ``dynamo.kvrelay.v1`` relay server for demos, teaching and tests (never in
front of consumers): upstream's admission order, hubs, bounded queues, planes and faults on
demand. ``docs/simulator.md`` lists what it reproduces.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

import grpc
import numpy as np
import numpy.typing as npt
from google.protobuf import message_factory

from cbi1kit._proto import kvrelay_v1_pb2 as pb, kvrelay_v1_pb2_grpc as pb_grpc
from cbi1kit.ckf._bucket import lane_occupancy
from cbi1kit.ckf._producer import (
    CkfConfig,
    DcCkfPublisher,
    DcCkfState,
    KvRemoved,
    KvStored,
    StoredBlock,
)
from cbi1kit.errors import RelayWireError, RelayWireVariant
from cbi1kit.hashing._identity import (
    ConsumerInstanceId,
    DcCkfFormatIdentity,
    IndexerDomainId,
    KvQueryHashFormat,
    LaneLease,
    PoolId,
    ProducerIdentity,
    RelayIdentity,
    derive_cache_semantics_id,
    derive_routing_scope_id,
    stable_dc_id,
)
from cbi1kit.relay._messages import (
    ERROR_REASON_TRAILER,
    MAX_MESSAGE_BYTES,
    RELAY_CONTRACT_MARKER,
    RELAY_PROTOCOL_VERSION,
    filter_update_from_frame,
    producer_key,
    producer_to_wire,
    relay_identity_to_wire,
    validate_producer_identity,
)
from cbi1kit.relay._publication import (
    ENVELOPE_HEADROOM_BYTES,
    HubSnapshot,
    PublicationFrame,
    PublicationFrameKind,
    encode_delta_publication,
    encode_snapshot_publication,
)
from cbi1kit.relay._transport import (
    KEEPALIVE_TIMEOUT,
    ServerTls,
    keepalive_options,
)
from cbi1kit.sim._simulator import config_error
from cbi1kit.wire._codec import Delta, decode
from cbi1kit.wire._format import FilterFormat

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL",
    "MALFORMED_MESSAGE",
    "QUEUE_BYTES",
    "QUEUE_FRAMES",
    "FaultPlan",
    "FrameListFeed",
    "PoolFeed",
    "PoolLoad",
    "ProducerFeed",
    "ReceivedCall",
    "RelayServer",
    "ServerConfig",
    "SubscriberStats",
    "reason_status",
    "simulated_pool",
    "trace_feed",
]

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
# feeds


class PoolFeed(Protocol):
    """One pool's publication source: what backs a hub.

    The server calls every method under the pool's lock, so a feed need not be thread-safe.
    ``snapshot()`` is the hub mirror at the current sequence (its words a private copy);
    ``advance()`` runs the producer one step and returns the delta frames it published (maybe
    none), or ``None`` once the feed is exhausted (the stream then only heartbeats).
    ``new_generation()`` re-attaches the pool under a new ``layout_generation``.
    ``kv_load()`` is what the pool's workers would report to the load planes.
    """

    @property
    def identity(self) -> ProducerIdentity: ...

    def descriptor(self) -> pb.KvPoolDescriptor: ...

    def kv_load(self) -> PoolLoad: ...

    def snapshot(self) -> HubSnapshot: ...

    def advance(self) -> Sequence[PublicationFrame] | None: ...

    def new_generation(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """What a pool's workers report: KV blocks in use and their capacity (0: unknown, as
    upstream encodes it), and how many workers and worker ranks report."""

    used_blocks: int
    total_blocks: int
    workers: int
    ranks: int


def _descriptor(
    identity: ProducerIdentity,
    *,
    model: str,
    aliases: Sequence[str],
    endpoint: tuple[str, str, str],
    kv_block_size: int,
) -> pb.KvPoolDescriptor:
    return pb.KvPoolDescriptor(
        producer=producer_to_wire(identity),
        serving_endpoint=pb.DynamoEndpointId(
            namespace=endpoint[0], component=endpoint[1], endpoint=endpoint[2]
        ),
        registrations=[
            pb.ModelRegistration(
                canonical_model_id=model,
                target=pb.ModelTarget(base=pb.BaseModelTarget(base_model=model)),
                aliases=sorted(set(aliases) - {model}),
            )
        ],
        query_semantics=pb.KvQuerySemantics(
            kv_block_size=kv_block_size,
            hash_format=pb.KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1,
        ),
        pool_roles=[pb.WORKER_ROLE_AGGREGATED],
    )


def _identity_for(
    *,
    model: str,
    dc: str,
    endpoint: tuple[str, str, str],
    kv_block_size: int,
    fmt: DcCkfFormatIdentity,
    incarnation: int,
    generation: int,
) -> ProducerIdentity:
    cs = derive_cache_semantics_id([model], kv_block_size, KvQueryHashFormat.DYNAMO_STANDARD_V1)
    rs = derive_routing_scope_id(list(endpoint))
    return ProducerIdentity(
        PoolId(IndexerDomainId(cs, rs), stable_dc_id(dc)), incarnation, generation, fmt
    )


class ProducerFeed:
    """A synthetic pool: ``DcCkfState`` + ``DcCkfPublisher`` driven by seeded random events.

    Each step applies ``events_per_step`` stores/removes from ``WORKERS`` workers, drains the
    dirty window and publishes one delta (a step that nets no change publishes nothing).
    ``steps`` bounds the feed (``None`` runs forever). ``words()`` is the producer's lane: what a
    violation-free replay of the stream must end with. Its load is the blocks its workers hold
    against ``expected_blocks``, the capacity the filter is sized for (as a deployment sizes it).
    """

    WORKERS: Final = 3

    def __init__(
        self,
        *,
        expected_blocks: int = 4096,
        seed: int = 0,
        events_per_step: int = 8,
        steps: int | None = 100,
        model: str = "sim/model",
        aliases: Sequence[str] = ("sim",),
        dc: str = "dc-sim",
        endpoint: tuple[str, str, str] = ("sim", "backend", "generate"),
        kv_block_size: int = 16,
        incarnation: int = 0x5EED_0001,
    ) -> None:
        self._rng = np.random.default_rng(seed)
        self._config = CkfConfig(expected_blocks, publish_every_n_events=1 << 30)
        self._state = DcCkfState(self._config)
        self._model, self._aliases, self._dc = model, tuple(aliases), dc
        self._endpoint, self._block_size = endpoint, kv_block_size
        self._incarnation = incarnation
        self._generation = 1
        self._identity = self._make_identity()
        self._publisher = self._make_publisher()
        self.events_per_step = events_per_step
        self.steps_left = steps
        self._live: list[tuple[int, int]] = []  # (worker, external block hash)
        self._next_hash = 1

    def _make_identity(self) -> ProducerIdentity:
        fmt = DcCkfFormatIdentity(self._config.seed, self._config.bucket_count())
        return _identity_for(
            model=self._model,
            dc=self._dc,
            endpoint=self._endpoint,
            kv_block_size=self._block_size,
            fmt=fmt,
            incarnation=self._incarnation,
            generation=self._generation,
        )

    def _make_publisher(self) -> DcCkfPublisher:
        lease = LaneLease(ConsumerInstanceId(self._incarnation), 0, self._generation)
        return DcCkfPublisher(self._identity, lease=lease)

    @property
    def identity(self) -> ProducerIdentity:
        return self._identity

    @property
    def sequence(self) -> int:
        return self._publisher.last_sequence

    def words(self) -> npt.NDArray[np.uint64]:
        return self._state.words().copy()

    def descriptor(self) -> pb.KvPoolDescriptor:
        return _descriptor(
            self._identity,
            model=self._model,
            aliases=self._aliases,
            endpoint=self._endpoint,
            kv_block_size=self._block_size,
        )

    def kv_load(self) -> PoolLoad:
        capacity = self._config.expected_blocks_per_dc
        return PoolLoad(len(self._live), capacity, self.WORKERS, self.WORKERS)

    def snapshot(self) -> HubSnapshot:
        return HubSnapshot(self._identity, self._publisher.last_sequence, self.words())

    def advance(self) -> Sequence[PublicationFrame] | None:
        if self.steps_left is not None:
            if self.steps_left <= 0:
                return None
            self.steps_left -= 1
        rng = self._rng
        for _ in range(self.events_per_step):
            worker = int(rng.integers(1, self.WORKERS + 1))
            if self._live and rng.random() < 0.35:
                i = int(rng.integers(len(self._live)))
                w, ext = self._live.pop(i)
                self._state.apply(KvRemoved(w, (ext,)))
            else:
                ext = self._next_hash
                self._next_hash += 1
                tokens = int(rng.integers(1, 1 << 63))
                self._state.apply(KvStored(worker, (StoredBlock(ext, tokens),)))
                self._live.append((worker, ext))
        batch = self._state.drain()
        if batch is None:
            return ()
        delta = self._publisher.publish(batch)
        return () if delta is None else (encode_delta_publication(delta),)

    def new_generation(self) -> None:
        self._generation += 1
        self._identity = self._make_identity()
        self._publisher = self._make_publisher()


def simulated_pool(
    fmt: DcCkfFormatIdentity,
    *,
    model: str = "sim/model",
    aliases: Sequence[str] = ("sim",),
    dc: str = "dc-sim",
    endpoint: tuple[str, str, str] = ("sim", "backend", "generate"),
    kv_block_size: int = 16,
    incarnation: int = 0x5EED_0001,
    generation: int = 1,
) -> tuple[ProducerIdentity, pb.KvPoolDescriptor]:
    """A made-up pool's identity (derived as the relay derives it) and its catalog entry."""
    identity = _identity_for(
        model=model,
        dc=dc,
        endpoint=endpoint,
        kv_block_size=kv_block_size,
        fmt=fmt,
        incarnation=incarnation,
        generation=generation,
    )
    desc = _descriptor(
        identity, model=model, aliases=aliases, endpoint=endpoint, kv_block_size=kv_block_size
    )
    return identity, desc


class FrameListFeed:
    """A fixed script: a snapshot, then the given delta frames, ``per_step`` at a time.

    Used by the benchmark (pre-encoded frames, so the server's send rate is not the encoder's)
    and by tests that need exact payloads. With ``track_lane`` the feed applies each delta it
    publishes to its own copy of the lane, so a late (re)subscriber gets a correct snapshot and
    ``words()`` is the lane a replay must end with. ``new_generation`` simply ends the script.
    Its load is the lane's fingerprints (the blocks the filter holds: a block cached by two
    workers counts once) against ``kv_capacity`` (0: unknown), reported by ``workers`` workers
    of ``ranks`` ranks in all.
    """

    def __init__(
        self,
        snapshot: HubSnapshot,
        deltas: Sequence[PublicationFrame],
        *,
        descriptor: pb.KvPoolDescriptor,
        per_step: int = 1,
        track_lane: bool = True,
        kv_capacity: int = 0,
        workers: int = 1,
        ranks: int = 1,
    ) -> None:
        self._identity: ProducerIdentity = snapshot.identity
        self._words = np.array(snapshot.buckets, dtype=np.uint64, copy=True)
        self._deltas = list(deltas)
        self._descriptor = descriptor
        self._next = 0
        self._sequence = snapshot.sequence
        self._format = FilterFormat(self._identity.format.seed, self._identity.format.bucket_count)
        self.per_step = per_step
        self.track_lane = track_lane
        self._load = (kv_capacity, workers, ranks)
        self._occupied: int | None = None  # counted when asked, again after the lane changed

    @property
    def identity(self) -> ProducerIdentity:
        return self._identity

    @property
    def sequence(self) -> int:
        return self._sequence

    def words(self) -> npt.NDArray[np.uint64]:
        return self._words.copy()

    def descriptor(self) -> pb.KvPoolDescriptor:
        return self._descriptor

    def kv_load(self) -> PoolLoad:
        capacity, workers, ranks = self._load
        if self._occupied is None:
            # each fingerprint is one block the pool's filter holds
            self._occupied = lane_occupancy(self._words)
        return PoolLoad(self._occupied, capacity, workers, ranks)

    def snapshot(self) -> HubSnapshot:
        return HubSnapshot(self._identity, self._sequence, self.words())

    def advance(self) -> Sequence[PublicationFrame] | None:
        if self._next >= len(self._deltas):
            return None
        out = self._deltas[self._next : self._next + self.per_step]
        self._next += len(out)
        for frame in out:
            if self.track_lane:
                delta = decode(self._format, frame.payload)
                assert isinstance(delta, Delta)
                self._words[delta.buckets] = delta.words
                self._occupied = None
            self._sequence = frame.sequence
        return out

    def new_generation(self) -> None:
        self._deltas = self._deltas[: self._next]


def trace_feed(
    trace: str | os.PathLike[str],
    sim_config: Any = None,
    *,
    dc: int = 0,
    limit: int | None = None,
    model: str = "mooncake/trace",
) -> FrameListFeed:
    """DC ``dc`` of the simulator run over a Mooncake trace, as a feed.

    The same producer → publisher → envelope pipeline as ``cbi1kit.sim._simrelay`` (the
    ``Simulator``'s ``on_snapshot`` / ``on_delta`` hooks, each delta through
    ``encode_delta_publication``), run once up front; the server then plays the publications
    back at its own pace instead of the trace's clock. ``sim_config`` is a
    ``cbi1kit.sim._simulator.SimulatorConfig`` (default: one DC).
    """
    from cbi1kit.sim._engine import Simulator
    from cbi1kit.sim._simulator import SimulatorConfig
    from cbi1kit.sim._workload import read_workload

    workload = read_workload(trace, limit=limit)
    config = sim_config or SimulatorConfig()
    sim = Simulator(config)
    first: list[Any] = []
    frames: list[PublicationFrame] = []

    def on_snapshot(_t: int, at: int, snapshot: Any) -> None:
        if at == dc and not first:
            first.append(snapshot)

    def on_delta(_t: int, at: int, delta: Any) -> None:
        if at == dc:
            frames.append(encode_delta_publication(delta))

    sim.run(workload, on_snapshot=on_snapshot, on_delta=on_delta)
    if not first:
        raise config_error("dc", dc, "the simulation has no such DC", what="feed")
    snap = first[0]
    identity: ProducerIdentity = snap.identity
    desc = _descriptor(
        identity,
        model=model,
        aliases=(),
        endpoint=("sim", "backend", f"dc{dc}"),
        kv_block_size=workload.block_size,
    )
    start = HubSnapshot(identity, int(snap.sequence), np.asarray(snap.buckets, dtype=np.uint64))
    ranks = config.workers_per_dc * config.dp_ranks
    return FrameListFeed(
        start,
        frames,
        descriptor=desc,
        kv_capacity=ranks * config.capacity_blocks,
        workers=config.workers_per_dc,
        ranks=ranks,
    )


# --------------------------------------------------------------------------------------------
# faults


@dataclass(slots=True)
class FaultPlan:
    """Injected faults; one-shot unless said otherwise: the first stream (or feed step) that
    reaches a fault consumes it.

    * ``drop_after_chunks``: end a subscription ``UNAVAILABLE`` without a reason trailer after
      this many snapshot chunks (a connection lost mid-snapshot).
    * ``corrupt_delta``: flip a byte in the body of the n-th delta (1-based) a subscription
      sends, so its CBI1 checksum fails.
    * ``stall_after``: after this many messages a subscription sends nothing at all (not even
      heartbeats) until the client gives up.
    * ``change_generation_after``: after the feed has published this many deltas, re-attach
      the pool under a new layout generation.

    Malformed messages: :data:`MALFORMED_MESSAGE` (bytes that are no protobuf message) in place
    of a response, which is lost with it; a stream carries on as if it had been sent, so a
    client that read past it would see the stream go on.

    * ``garbage_update_after``: after this many messages (0: at once), a subscription's next
      ``FilterUpdate`` (snapshot chunk, delta or heartbeat, whichever is due).
    * ``garbage_catalog_after``: after this many catalog updates (0: at once), a watch's next
      ``KvPoolCatalogUpdate``.
    * ``garbage_relay_info``: the server's first this many ``GetRelayInfo`` answers (a relay
      that keeps answering garbage: a large number); listed in ``fired`` once.
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

    def __init__(self, feed: PoolFeed, server: RelayServer) -> None:
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
# server


@dataclass(frozen=True, slots=True)
class Release:
    """How a released relay differs from this simulator's own ways, as recorded from it
    (``ai-dynamo-runtime`` 1.6.1: ``data/real.kvrcap``, ``tests/test_real_relay.py``)."""

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
    ),
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


def _now_us() -> int:
    return time.time_ns() // 1000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


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


@dataclass(frozen=True, slots=True)
class ReceivedCall:
    """One RPC as the server received it: the method, the client's metadata (binary values in
    hex) and, under mTLS, its certificate's common name."""

    method: str
    metadata: tuple[tuple[str, str], ...]
    client: str | None


# --------------------------------------------------------------------------------------------
# the readiness and load planes, from the pools' state

_LOAD: Final = "load"
_SERVING_LOAD: Final = "serving-load"
_W = pb.WorkerRole


@dataclass(frozen=True, slots=True)
class _PoolState:
    descriptor: pb.KvPoolDescriptor
    producer: pb.ProducerIdentity
    ready: bool
    load: PoolLoad | None  # asked of the feed only for the load planes


def _load_of(state: _PoolState) -> PoolLoad:
    assert state.load is not None
    return state.load


def _serves(present: set[pb.WorkerRole]) -> bool:
    """Whether live roles can serve a request: an aggregated (or role-less legacy) worker, or
    prefill and decode together (upstream's role disjunctive normal form)."""
    return bool(
        present & {_W.WORKER_ROLE_AGGREGATED, _W.WORKER_ROLE_LEGACY}
        or {_W.WORKER_ROLE_PREFILL, _W.WORKER_ROLE_DECODE} <= present
    )


def _base_models(pools: Sequence[_PoolState]) -> dict[tuple[str, str], list[_PoolState]]:
    """Pools by (namespace, canonical model) of their base registrations (the simulated pools
    register base models only, so there are no adapter entries)."""
    out: dict[tuple[str, str], list[_PoolState]] = {}
    for state in pools:
        namespace = state.descriptor.serving_endpoint.namespace
        for reg in state.descriptor.registrations:
            if reg.target.WhichOneof("target") == "base":
                out.setdefault((namespace, reg.canonical_model_id), []).append(state)
    return dict(sorted(out.items()))


def _topology(pools: Sequence[_PoolState]) -> list[pb.TopologyEntry]:
    """One entry per (namespace, model); one member per endpoint, linked to its first pool."""
    entries = []
    for (namespace, model), states in _base_models(pools).items():
        endpoints: dict[tuple[str, str, str], list[_PoolState]] = {}
        for state in states:
            ep = state.descriptor.serving_endpoint
            endpoints.setdefault((ep.namespace, ep.component, ep.endpoint), []).append(state)
        members = []
        declared: set[pb.WorkerRole] = set()
        present: set[pb.WorkerRole] = set()
        declared_by: collections.Counter[pb.WorkerRole] = collections.Counter()
        for group in endpoints.values():
            roles = sorted({r for st in group for r in st.descriptor.pool_roles})
            declared.update(roles)
            declared_by.update(roles)
            if any(st.ready for st in group):
                present.update(roles)
            members.append(
                pb.TopologyMember(
                    endpoint=group[0].descriptor.serving_endpoint,
                    roles=roles,
                    pool_id=group[0].producer.pool_id,
                )
            )
        readiness = (
            pb.SERVING_READINESS_STATE_READY
            if _serves(present)
            else pb.SERVING_READINESS_STATE_UNAVAILABLE
        )
        typed = (_W.WORKER_ROLE_PREFILL, _W.WORKER_ROLE_DECODE)
        entries.append(
            pb.TopologyEntry(
                namespace=namespace,
                canonical_model_id=model,
                state=readiness,
                present_roles=sorted(present),
                missing_roles=sorted(declared - present),
                members=members,
                duplicate_role_endpoints=[r for r in typed if declared_by[r] > 1],
                legacy_fallback_active=_W.WORKER_ROLE_LEGACY in declared,
            )
        )
    return entries


def _load_entry(state: _PoolState, ranks_only: bool = False) -> pb.KvPoolLoadEntry:
    """A pool whose workers are gone reports no rank: coverage 0 of its ranks, never load 0;
    ``ranks_only``: only the ranks expected, as a relay no worker reports metrics to."""
    load = _load_of(state)
    if not state.ready or ranks_only:
        return pb.KvPoolLoadEntry(producer=state.producer, kv_expected_ranks=load.ranks)
    return pb.KvPoolLoadEntry(
        producer=state.producer,
        kv_used_blocks=load.used_blocks,
        total_kv_blocks=load.total_blocks,
        kv_observed_ranks=load.ranks,
        kv_expected_ranks=load.ranks,
    )


def _serving_load(
    pools: Sequence[_PoolState],
) -> tuple[list[pb.PoolServingLoad], list[pb.ModelServingLoad]]:
    """No router and no frontend reports to the simulated relay, so every view is UNAVAILABLE
    with its gauges unset, the cumulative totals are 0 (set whatever the status, as upstream
    requires), and only the deployment facts the relay knows itself are given."""
    unavailable = pb.DATA_STATUS_UNAVAILABLE
    pool_loads = [
        pb.PoolServingLoad(
            producer=st.producer,
            load=pb.LoadView(tokens=pb.TokenLoadStats(), status=unavailable),
            deployment=pb.PoolDeploymentStatus(
                live_workers=_load_of(st).workers if st.ready else 0
            ),
        )
        for st in pools
    ]
    model_loads = []
    for (namespace, model), states in _base_models(pools).items():
        serving: list[pb.KvPoolId] = []
        for st in states:
            if st.producer.pool_id not in serving:
                serving.append(st.producer.pool_id)
        model_loads.append(
            pb.ModelServingLoad(
                namespace=namespace,
                canonical_model_id=model,
                load=pb.LoadView(
                    requests=pb.RequestLifecycleStats(),
                    tokens=pb.TokenLoadStats(input_tokens_total=0, output_tokens_total=0),
                    status=unavailable,
                ),
                deployment=pb.ModelDeploymentStatus(serving_pools=serving),
            )
        )
    return pool_loads, model_loads


class _Servicer(pb_grpc.KvEventRelayServicer):
    def __init__(self, server: RelayServer) -> None:
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

    def _open_plane(self, method: str, request: Any, context: grpc.ServicerContext) -> None:
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
        return pb.RelayInfo(
            protocol_version=RELAY_PROTOCOL_VERSION,
            relay=relay_identity_to_wire(self.s.relay),
            contract_marker=RELAY_CONTRACT_MARKER,
        )

    def WatchKvPoolCatalog(
        self, request: pb.WatchKvPoolCatalogRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.KvPoolCatalogUpdate | bytes]:
        self._open_plane("WatchKvPoolCatalog", request, context)
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
        self._open_plane("SubscribeServingReadiness", request, context)
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
        self._open_plane("SubscribeKvPoolLoad", request, context)
        with self._plane("load", context):
            yield from self._windows(_LOAD, context)

    def SubscribeServingLoad(
        self, request: pb.SubscribeServingLoadRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.ServingLoadUpdate]:
        self._open_plane("SubscribeServingLoad", request, context)
        with self._plane("serving-load", context):
            yield from self._windows(_SERVING_LOAD, context)

    def _windows(self, plane: str, context: grpc.ServicerContext) -> Iterator[Any]:
        """The current window, then every newer one as it begins (upstream's ``window_stream``;
        a consumer too slow for a window gets the newest, where upstream would end its stream
        ``SUBSCRIBER_LAGGED``)."""
        s = self.s
        sent = -1
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
        self._called("SubscribeKvPool", context)
        self._contract(request.contract_marker, context)
        self._subscriber_id(request.subscriber_id, context)
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
            yield from self._stream(pool, sub, snap, wire, context)
        except _Terminal as term:
            sub.stats.end = term.details
            if term.reason is not None:
                self._fail(context, term.reason, term.details)
            context.abort(term.code, term.details)
        finally:
            pool.unsubscribe(sub)

    def _update(
        self, frame: PublicationFrame, wire: pb.ProducerIdentity, payload: bytes | None = None
    ) -> pb.FilterUpdate:
        return filter_update_from_frame(
            frame, self.s.relay, send_ts_us=_now_us(), producer=wire, payload=payload
        )

    def _stream(
        self,
        pool: _Pool,
        sub: _Subscriber,
        snap: HubSnapshot,
        wire: pb.ProducerIdentity,
        context: grpc.ServicerContext,
    ) -> Iterator[pb.FilterUpdate | bytes]:
        s, cfg, faults = self.s, self.s.config, self.s.faults
        stats = sub.stats
        sent = 0
        deltas = 0
        stall_at = faults.take("stall_after")
        drop_at = faults.take("drop_after_chunks")
        corrupt_at = faults.take("corrupt_delta")
        garbage_at = faults.take("garbage_update_after")

        def emit(update: pb.FilterUpdate) -> pb.FilterUpdate | bytes:
            nonlocal sent
            garbage = sent == garbage_at
            sent += 1
            now = time.monotonic()
            stats.messages += 1
            stats.payload_bytes += 0 if garbage else len(update.payload)
            stats.first_send = now if stats.first_send is None else stats.first_send
            stats.last_send = now
            return MALFORMED_MESSAGE if garbage else update

        def stall() -> None:
            stats.end = "stalled (injected fault)"
            while context.is_active() and not s._stopping.is_set():
                time.sleep(0.02)
            raise _Terminal(None, grpc.StatusCode.CANCELLED, "stalled stream ended")

        # -- bootstrap: the mirror as chunk frames, each under a progress timeout
        chunks = encode_snapshot_publication(snap)
        last = time.monotonic()
        for i, frame in enumerate(chunks):
            if drop_at is not None and i == drop_at:
                stats.end = "dropped mid-snapshot (injected fault)"
                raise _Terminal(
                    None, grpc.StatusCode.UNAVAILABLE, "connection dropped (injected fault)"
                )
            if stall_at is not None and sent >= stall_at:
                stall()
            if time.monotonic() - last > cfg.snapshot_progress_timeout:
                raise _Terminal(
                    _R.RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"snapshot chunk {i} was not drained within {cfg.snapshot_progress_timeout} s",
                )
            yield emit(self._update(frame, wire))
            last = time.monotonic()
        sequence = snap.sequence
        # -- live: deltas from the bounded queue, heartbeats when idle
        next_heartbeat = time.monotonic() + cfg.heartbeat_interval
        while not s._stopping.is_set():
            if not context.is_active():
                return
            if stall_at is not None and sent >= stall_at:
                stall()
            wait = max(0.0, min(next_heartbeat - time.monotonic(), 0.25))
            live = sub.get(wait)
            if live is None:
                if time.monotonic() >= next_heartbeat:
                    yield emit(self._heartbeat(wire, sequence))
                    next_heartbeat = time.monotonic() + cfg.heartbeat_interval
                continue
            payload = None
            if live.kind is PublicationFrameKind.DELTA:
                deltas += 1
                if corrupt_at is not None and deltas == corrupt_at:
                    body = bytearray(live.payload)
                    body[-1] ^= 0xFF
                    payload = bytes(body)
            sequence = live.sequence
            yield emit(self._update(live, wire, payload))
            next_heartbeat = time.monotonic() + cfg.heartbeat_interval
        raise _Terminal(
            _R.RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE,
            grpc.StatusCode.UNAVAILABLE,
            "relay shutting down",
        )

    def _heartbeat(self, wire: pb.ProducerIdentity, sequence: int) -> pb.FilterUpdate:
        return pb.FilterUpdate(
            protocol_version=RELAY_PROTOCOL_VERSION,
            relay=relay_identity_to_wire(self.s.relay),
            producer=wire,
            base_sequence=sequence,
            sequence=sequence,
            send_ts_us=_now_us(),
            kind=pb.FILTER_UPDATE_KIND_HEARTBEAT,
            contract_marker=RELAY_CONTRACT_MARKER,
        )


class RelayServer:
    """The simulated relay: ``start()`` binds and serves; ``stop()`` ends every stream.

    Use as a context manager. ``address`` is ``host:port`` after ``start()`` (port 0 picks a
    free port). Streams and state are inspectable for tests: ``subscriptions`` (per-stream
    send stats), ``lagged_total``, ``relay_info_answers``, ``faults.fired``.
    """

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
        self._server: grpc.Server | None = None
        self.port = 0

    @classmethod
    def from_simulation(
        cls,
        trace: str | os.PathLike[str],
        sim_config: Any = None,
        *,
        pace: float = 0.01,
        dc: int = 0,
        limit: int | None = None,
        server_config: ServerConfig | None = None,
        faults: FaultPlan | None = None,
    ) -> RelayServer:
        """A server whose pool is DC ``dc`` of the trace-driven simulator, one delta per step.

        ``pace`` (seconds between steps) overrides ``server_config.pace``. See :func:`trace_feed`.
        """
        feed = trace_feed(trace, sim_config, dc=dc, limit=limit)
        config = replace(server_config or ServerConfig(), pace=pace)
        return cls(feed, config, faults=faults)

    # -- catalog
    def _pool_list(self) -> list[_Pool]:
        """Every pool ever served, in the order they were added (their ``index``)."""
        with self._lock:
            return list(self._pools.values())

    def _pool_at(self, index: int) -> _Pool:
        return self._pool_list()[index]

    def catalog_update(self) -> pb.KvPoolCatalogUpdate:
        """The catalog as served now: every published pool, at the current revision."""
        pools = []
        for pool in self._pool_list():
            with pool.lock:
                if pool.published:
                    pools.append(pool.descriptor)
        return pb.KvPoolCatalogUpdate(
            protocol_version=RELAY_PROTOCOL_VERSION,
            relay=relay_identity_to_wire(self.relay),
            revision=self._catalog_revision,
            snapshot=pb.KvPoolCatalogSnapshot(pools=pools),
            contract_marker=RELAY_CONTRACT_MARKER,
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
            protocol_version=RELAY_PROTOCOL_VERSION,
            relay=relay_identity_to_wire(self.relay),
            revision=self._readiness_revision,
            entries=_topology(self._pool_states(load=False)),
            contract_marker=RELAY_CONTRACT_MARKER,
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
            head: dict[str, Any] = {
                "protocol_version": RELAY_PROTOCOL_VERSION,
                "relay": relay_identity_to_wire(self.relay),
                "window_sequence": sequence,
                "observed_ms": _now_ms(),
                "window_ms": round(window * 1000),
                "contract_marker": RELAY_CONTRACT_MARKER,
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

    def set_ready(self, index: int = 0, ready: bool = True) -> None:
        """Pool ``index``'s workers leave (``False``) or come back. The catalog keeps the pool
        and its stream goes on; its topology turns UNAVAILABLE (READY) with the roles missing,
        and the load planes report no rank and no live worker for it: the contract's reason for
        a consumer not to route there though the pool is published."""
        pool = self._pool_at(index)
        with pool.lock:
            changed = pool.ready != ready
            pool.ready = ready
        if changed:
            self._bump_readiness()

    def _bump_catalog(self) -> None:
        with self._catalog_cond:
            self._catalog_revision += 1
            self._catalog_cond.notify_all()

    def _bump_readiness(self) -> None:
        with self._readiness_cond:
            self._readiness_revision += 1
            self._readiness_cond.notify_all()

    def change_generation(self, index: int = 0) -> None:
        """Re-attach pool ``index`` under a new layout generation (a fault, or a demo step)."""
        self._pool_at(index).change_generation()

    def add_pool(self, feed: PoolFeed) -> int:
        """A producer attaches: its pool is served and advertised from the next catalog (and
        readiness) update on. Its ``index``; a pool served already is ``SimulationError``
        ``Config``."""
        pool = _Pool(feed, self)
        key = _pool_key(pool.wire_producer)
        with self._lock:
            if key in self._pools:
                dc = f"{pool.wire_producer.pool_id.dc_id:016x}"
                raise config_error("feed", dc, "that pool is served already", what="pool")
            self._pools[key] = pool
            index = len(self._pools) - 1
        self._bump_catalog()
        self._bump_readiness()
        return index

    def withdraw_pool(self, index: int = 0) -> None:
        """Pool ``index``'s producer detaches: the next catalog no longer lists it (no
        tombstone: it is absent), its subscriptions end ``UNAVAILABLE`` /
        ``PUBLICATION_UNAVAILABLE``, a new one is ``POOL_NOT_FOUND``, its feed publishes nothing
        until :meth:`restore_pool`."""
        pool = self._pool_at(index)
        with pool.lock:
            pool.published = False
            pool.end_subscribers(
                _R.RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE, "pool withdrawn from the catalog"
            )
        self._bump_catalog()
        self._bump_readiness()

    def restore_pool(self, index: int = 0, *, new_generation: bool = True) -> None:
        """Pool ``index`` attaches again, advertised from the next catalog on. Upstream
        re-attaches a pool under a new ``layout_generation`` (relay.md §2.6), so by default its
        producer key changes; ``new_generation=False`` keeps the key it had."""
        pool = self._pool_at(index)
        with pool.lock:
            if new_generation:
                pool.next_generation()
            pool.published = True
        self._bump_catalog()
        self._bump_readiness()

    def refuse_pool(
        self, index: int = 0, reason: int = _R.RELAY_ERROR_REASON_UNSUPPORTED_FEATURE
    ) -> None:
        """Fault: pool ``index`` stays in the catalog, but its open subscriptions end with
        ``reason`` and every new one is refused with it (by default ``UNSUPPORTED_FEATURE``,
        which a client must not retry unchanged)."""
        pool = self._pool_at(index)
        with pool.lock:
            pool.refused = reason
            pool.end_subscribers(reason, "this pool is refused (injected fault)")

    def pool_feed(self, index: int = 0) -> PoolFeed:
        """The feed behind pool ``index`` (pools in the order they were added)."""
        return self._pool_at(index).feed

    def pool_exhausted(self, index: int = 0) -> bool:
        """Whether pool ``index``'s feed has run out (its streams then only heartbeat)."""
        return self._pool_at(index).exhausted

    # -- lifecycle
    @property
    def address(self) -> str:
        """``host:port`` to dial (the bound port once started)."""
        return f"{self.config.host}:{self.port}"

    def start(self) -> RelayServer:
        """Bind ``host:port`` (port 0: a free one) and serve, over TLS if configured; self."""
        options = [
            ("grpc.max_send_message_length", self.config.max_message_bytes),
            ("grpc.max_receive_message_length", self.config.max_message_bytes),
            ("grpc.so_reuseport", 0),
            # upstream's server keepalive, and room for clients that ping as often
            *keepalive_options(),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", int(KEEPALIVE_TIMEOUT * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            *self.config.grpc_options,
        ]
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=self.config.max_workers, thread_name_prefix="cbi1kit-relay"
            ),
            options=options,
            maximum_concurrent_rpcs=self.config.max_workers,
        )
        handler = _service_handler(_Servicer(self), self.config.unimplemented)
        server.add_generic_rpc_handlers((handler,))
        address = f"{self.config.host}:{self.config.port}"
        tls = self.config.tls
        if tls is None:
            self.port = server.add_insecure_port(address)
        else:
            self.port = server.add_secure_port(address, tls.credentials())
        if self.port == 0:
            raise OSError(f"cannot bind {self.config.host}:{self.config.port}")
        server.start()
        self._server = server
        self._window_start = time.monotonic()
        return self

    def restart(
        self,
        feeds: PoolFeed | Sequence[PoolFeed],
        *,
        relay_incarnation: int,
        drt_instance_id: int | None = None,
        faults: FaultPlan | None = None,
    ) -> RelayServer:
        """Stop this relay and start another on the same address: a relay restart.

        Upstream draws ``relay_incarnation`` afresh on every start and the restarted relay
        rebuilds its pools, so give new ``feeds`` whose producer incarnation is the new relay
        incarnation (upstream's ``producer_incarnation`` is the relay's): every producer key
        changes, catalog revisions start over, nothing of the old hubs survives. This server
        keeps its stats; the new one is returned, started.
        """
        config = replace(
            self.config,
            port=self.port or self.config.port,
            relay_incarnation=relay_incarnation,
            drt_instance_id=(
                self.config.drt_instance_id if drt_instance_id is None else drt_instance_id
            ),
        )
        self.stop(0)
        return RelayServer(feeds, config, faults=faults).start()

    def stop(self, grace: float | None = 0.5) -> None:
        """End every stream and stop serving, giving calls in flight ``grace`` seconds (a
        release that drops its streams on shutdown drops them at once)."""
        release = self.config.release
        if release is not None and release.drops_streams_on_shutdown and self._server is not None:
            self._server.stop(0).wait(5.0)  # before the streams see _stopping and end cleanly
            self._server = None
        self._stopping.set()
        for cond in (self._catalog_cond, self._readiness_cond):
            with cond:
                cond.notify_all()
        if self._server is not None:
            self._server.stop(grace).wait(5.0)
            self._server = None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped (or ``timeout``); True if stopped."""
        return self._stopping.wait(timeout)

    def __enter__(self) -> RelayServer:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

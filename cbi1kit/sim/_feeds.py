"""The simulated relay's pools as feeds: what backs a hub (``PoolFeed``), a seeded synthetic
producer, a fixed script of frames, a simulator run over a trace (``docs/simulator.md``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypedDict, Unpack

import numpy as np
import numpy.typing as npt

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.ckf._bucket import lane_occupancy
from cbi1kit.ckf._lane import DcCkfDelta, DcCkfSnapshot
from cbi1kit.ckf._producer import (
    CkfConfig,
    DcCkfPublisher,
    DcCkfState,
    KvRemoved,
    KvStored,
    StoredBlock,
)
from cbi1kit.hashing._dc_names import DEFAULT_SIM_DC
from cbi1kit.hashing._formats import KvQueryHashFormat
from cbi1kit.hashing._identity import (
    ConsumerInstanceId,
    DcCkfFormatIdentity,
    LaneLease,
    ProducerIdentity,
)
from cbi1kit.relay._messages import producer_to_wire
from cbi1kit.relay._publication import HubSnapshot, PublicationFrame, encode_delta_publication
from cbi1kit.sim._engine import Simulator
from cbi1kit.sim._simulator import SimulatorConfig, config_error, pool_identity
from cbi1kit.sim._workload import Workload, read_workload
from cbi1kit.wire._codec import decode
from cbi1kit.wire._format import FilterFormat
from cbi1kit.wire._frames import Delta


class PoolFeed(Protocol):
    """One pool's publication source: what backs a hub. Called under the pool's lock (it need not be
    thread-safe). ``snapshot()``: the hub mirror at the current sequence (words a private copy);
    ``advance()``: one producer step's delta frames (maybe none), ``None`` once exhausted (the
    stream then only heartbeats); ``new_generation()``: re-attach under a new ``layout_generation``;
    ``kv_load()``: what the pool's workers would report to the load planes."""

    @property
    def identity(self) -> ProducerIdentity:
        """The producer this feed publishes as."""

    def descriptor(self) -> pb.KvPoolDescriptor:
        """The pool's catalog descriptor."""

    def kv_load(self) -> PoolLoad:
        """What the pool's workers report to the load planes."""

    def snapshot(self) -> HubSnapshot:
        """The hub mirror at the current sequence."""

    def advance(self) -> Sequence[PublicationFrame] | None:
        """One producer step's deltas; None once exhausted."""

    def new_generation(self) -> None:
        """Re-attach under a new ``layout_generation``."""


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
            kv_block_size=kv_block_size, hash_format=pb.KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1
        ),
        pool_roles=[pb.WORKER_ROLE_AGGREGATED],
    )


class PoolNames(TypedDict, total=False):
    """What names a made-up pool and its producer: ``simulated_pool``'s keywords (the defaults
    are there)."""

    model: str
    aliases: Sequence[str]
    dc: str
    endpoint: tuple[str, str, str]
    kv_block_size: int
    incarnation: int


def simulated_pool(
    fmt: DcCkfFormatIdentity,
    *,
    model: str = "sim/model",
    aliases: Sequence[str] = ("sim",),
    dc: str = DEFAULT_SIM_DC,
    endpoint: tuple[str, str, str] = ("sim", "backend", "generate"),
    kv_block_size: int = 16,
    incarnation: int = 0x5EED_0001,
    generation: int = 1,
) -> tuple[ProducerIdentity, pb.KvPoolDescriptor]:
    """A made-up pool's identity (derived as the relay derives it) and its catalog entry."""
    standard = KvQueryHashFormat.DYNAMO_STANDARD_V1
    identity = pool_identity(
        model, kv_block_size, standard, endpoint, dc, (incarnation, generation), fmt
    )
    desc = _descriptor(
        identity, model=model, aliases=aliases, endpoint=endpoint, kv_block_size=kv_block_size
    )
    return identity, desc


class ProducerFeed:
    """A synthetic pool: ``DcCkfState`` + ``DcCkfPublisher`` driven by seeded random events.

    Each step applies ``events_per_step`` stores/removes from ``WORKERS`` workers and publishes one
    delta (none if it nets no change); ``steps`` bounds it (``None``: forever). ``words()`` is the
    lane a violation-free replay must end with. Its load: blocks held against ``expected_blocks``,
    the capacity the filter is sized for. ``pool``: its names, as ``simulated_pool`` takes them."""

    WORKERS: Final = 3

    def __init__(
        self,
        *,
        expected_blocks: int = 4096,
        seed: int = 0,
        events_per_step: int = 8,
        steps: int | None = 100,
        **pool: Unpack[PoolNames],
    ) -> None:
        self._rng = np.random.default_rng(seed)
        self._config = CkfConfig(expected_blocks, publish_every_n_events=1 << 30)
        self._state = DcCkfState(self._config)
        fmt = DcCkfFormatIdentity(self._config.seed, self._config.bucket_count())
        self._pool = functools.partial(simulated_pool, fmt, **pool)
        self._generation = 1
        self._attach()
        self.events_per_step = events_per_step
        self.steps_left = steps
        self._live: list[tuple[int, int]] = []  # (worker, external block hash)
        self._next_hash = 1

    def _attach(self) -> None:
        """The pool's identity, catalog entry and publisher at the current generation."""
        self._identity, self._descriptor = self._pool(generation=self._generation)
        incarnation = ConsumerInstanceId(self._identity.producer_incarnation)
        lease = LaneLease(incarnation, 0, self._generation)
        self._publisher = DcCkfPublisher(self._identity, lease=lease)

    @property
    def identity(self) -> ProducerIdentity:
        return self._identity

    @property
    def sequence(self) -> int:
        return self._publisher.last_sequence

    def words(self) -> npt.NDArray[np.uint64]:
        return self._state.words().copy()

    def descriptor(self) -> pb.KvPoolDescriptor:
        return self._descriptor

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
        self._attach()


class FrameListFeed:
    """A fixed script: a snapshot, then the given delta frames, ``per_step`` at a time (pre-encoded
    for the benchmark, exact payloads for tests). ``track_lane``: apply each delta to its own lane
    copy, so a late (re)subscriber gets a correct snapshot and ``words()`` is the lane a replay must
    end with. ``new_generation`` ends the script. Its load: the lane's fingerprints (a block two
    workers cache counts once) against ``kv_capacity`` (0: unknown), by ``workers`` workers of
    ``ranks`` ranks."""

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
        self._format = FilterFormat(
            seed=self._identity.format.seed, bucket_count=self._identity.format.bucket_count
        )
        self.per_step = per_step
        self.track_lane = track_lane
        self._load = (kv_capacity, workers, ranks)
        self._occupied: int | None = None  # counted when asked, again after the lane changed

    @property
    def identity(self) -> ProducerIdentity:
        """The producer the frames came from."""
        return self._identity

    @property
    def sequence(self) -> int:
        """The sequence the feed has reached."""
        return self._sequence

    def words(self) -> npt.NDArray[np.uint64]:
        """The lane's words at that sequence (a copy)."""
        return self._words.copy()

    def descriptor(self) -> pb.KvPoolDescriptor:
        """The pool's catalog descriptor."""
        return self._descriptor

    def kv_load(self) -> PoolLoad:
        """The pool's load: its capacity, workers, and blocks held."""
        capacity, workers, ranks = self._load
        if self._occupied is None:
            # each fingerprint is one block the pool's filter holds
            self._occupied = lane_occupancy(self._words)
        return PoolLoad(self._occupied, capacity, workers, ranks)

    def snapshot(self) -> HubSnapshot:
        """The hub mirror at the current sequence."""
        return HubSnapshot(self._identity, self._sequence, self.words())

    def advance(self) -> Sequence[PublicationFrame] | None:
        """The next ``per_step`` deltas, or None once all are sent."""
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
        """Drop the deltas not sent yet: a new generation starts clean."""
        self._deltas = self._deltas[: self._next]


def trace_feed(
    trace: str | os.PathLike[str],
    sim_config: Any = None,
    *,
    dc: int = 0,
    limit: int | None = None,
    model: str = "mooncake/trace",
) -> FrameListFeed:
    """DC ``dc`` of the simulator run over a Mooncake trace, as a feed (``simulated_frames``),
    played back at the server's pace, not the trace's clock. ``sim_config``: a
    ``cbi1kit.sim._simulator.SimulatorConfig`` (default: one DC)."""
    workload = read_workload(trace, limit=limit)
    config = sim_config or SimulatorConfig()
    _, first, frames = simulated_frames(config, workload, (dc,))
    if dc not in first:
        raise config_error("dc", dc, "the simulation has no such DC", what="feed")
    desc = _descriptor(
        first[dc].identity,
        model=model,
        aliases=(),
        endpoint=("sim", "backend", f"dc{dc}"),
        kv_block_size=workload.block_size,
    )
    return frame_feed(config, first[dc], frames[dc], desc)


def simulated_frames(
    config: SimulatorConfig, workload: Workload, dcs: Iterable[int]
) -> tuple[Simulator, dict[int, DcCkfSnapshot], dict[int, list[PublicationFrame]]]:
    """The simulator run once, up front, over ``workload``: DCs ``dcs``' first snapshots and their
    deltas as publication frames (the pipeline of ``cbi1kit.sim._simrelay``: ``on_snapshot`` /
    ``on_delta`` hooks, ``encode_delta_publication``), and the simulator."""
    sim = Simulator(config)
    first: dict[int, DcCkfSnapshot] = {}
    frames: dict[int, list[PublicationFrame]] = {dc: [] for dc in dcs}

    def on_snapshot(_t: int, dc: int, snapshot: DcCkfSnapshot) -> None:
        if dc in frames:
            first.setdefault(dc, snapshot)

    def on_delta(_t: int, dc: int, delta: DcCkfDelta) -> None:
        if dc in frames:
            frames[dc].append(encode_delta_publication(delta))

    sim.run(workload, on_snapshot=on_snapshot, on_delta=on_delta)
    return sim, first, frames


def frame_feed(
    config: SimulatorConfig,
    first: DcCkfSnapshot,
    frames: Sequence[PublicationFrame],
    descriptor: pb.KvPoolDescriptor,
) -> FrameListFeed:
    """A simulated DC's ``frames`` after its ``first`` snapshot as a feed; its load: the DC's
    members' capacity, by its workers of ``members_per_dc`` ranks."""
    start = HubSnapshot(first.identity, int(first.sequence), np.asarray(first.buckets, np.uint64))
    ranks = config.members_per_dc
    return FrameListFeed(
        start,
        frames,
        descriptor=descriptor,
        kv_capacity=ranks * config.capacity_blocks,
        workers=config.workers_per_dc,
        ranks=ranks,
    )

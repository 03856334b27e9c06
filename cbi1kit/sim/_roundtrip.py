"""Hash-space round trips: tokens to probes through every stage the relay uses.

One pool per hash space (standard, EAGLE, LoRA, cache namespace...), each its own producer,
publisher and consumer lane: tokens -> block hashes -> canonical sequence hashes -> Stored event ->
barrier snapshot -> CBI1 chunks -> assembly -> lane, then a child Stored event -> published delta ->
CBI1 delta -> lane; every space's query is searched in every lane and finds only its own. Each pool
serves one model in a DC of its own; its indexer domain is the model's block size and hash format
(LoRA and namespace salts live in the token hashes) and the endpoint's routing scope: one
``CkfLaneTable`` per domain (upstream's ``GlobalCkfManifest``), a lane per pool in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import polars as pl

from cbi1kit.ckf._consumer import CkfLaneTable, LaneReplica
from cbi1kit.ckf._lane import DcCkfDelta, DcCkfSnapshot
from cbi1kit.ckf._limits import DEFAULT_SEED
from cbi1kit.ckf._producer import CkfConfig, DcCkfPublisher, DcCkfState, KvStored, StoredBlock
from cbi1kit.errors import SimulationError, SimulationVariant
from cbi1kit.hashing._blocks import compute_block_hash_for_seq, compute_seq_hash_for_block
from cbi1kit.hashing._dc_names import round_trip_dc_name
from cbi1kit.hashing._formats import KvQueryHashFormat
from cbi1kit.hashing._identity import LaneLease, ProducerIdentity
from cbi1kit.hashing._pools import IndexerDomainId
from cbi1kit.relay._publication import filter_format
from cbi1kit.sim._simulator import pool_identity
from cbi1kit.wire._assembly import SnapshotAssembly
from cbi1kit.wire._codec import decode
from cbi1kit.wire._encode import encode_delta, encode_snapshot_chunks
from cbi1kit.wire._format import FilterFormat
from cbi1kit.wire._frames import Delta

U64Array = npt.NDArray[np.uint64]
_EXTERNAL_MASK = (1 << 63) - 1  # engines' block ids: opaque, here the canonical hash masked


@dataclass(frozen=True, slots=True)
class HashSpace:
    """What separates one pool's hashes from another's: format, LoRA salt, namespace salt."""

    name: str
    hash_format: KvQueryHashFormat = KvQueryHashFormat.DYNAMO_STANDARD_V1
    lora_name: str | None = None
    cache_namespace: str | None = None

    def block_hashes(self, tokens: npt.ArrayLike, block_size: int) -> U64Array:
        """Local block hashes (u64) of ``tokens`` in ``block_size``-token blocks, in this space."""
        return compute_block_hash_for_seq(
            tokens,
            block_size,
            lora_name=self.lora_name,
            is_eagle=self.hash_format.is_eagle,
            cache_namespace=self.cache_namespace,
        )


@dataclass
class SpaceResult:
    """One space's trip: its domain and lane, its hashes, the frames it produced, and what
    checked out."""

    space: HashSpace
    domain: IndexerDomainId
    lane: int
    initial_blocks: U64Array
    expanded_blocks: U64Array
    sequence_hashes: U64Array
    snapshot_frames: list[bytes] = field(repr=False)
    delta_frame: bytes = field(repr=False)
    snapshot_matches_producer: bool = False
    delta_matches_producer: bool = False


@dataclass
class HashSpaceRoundTrip:
    """All spaces' results and the consumer tables (one per indexer domain) they went into."""

    results: list[SpaceResult]
    tables: dict[IndexerDomainId, CkfLaneTable]
    block_size: int

    def depth_matrix(self) -> pl.DataFrame:
        """Prefix depth of each space's expanded query (rows) in each space's lane (columns),
        each lane searched in its own domain's table."""
        rows = []
        for query in self.results:
            found = {
                domain: table.find_prefix_matches(query.expanded_blocks) or {}
                for domain, table in self.tables.items()
            }
            rows.append(
                {"query": query.space.name, "blocks": len(query.expanded_blocks)}
                | {r.space.name: found[r.domain].get(r.lane, 0) for r in self.results}
            )
        return pl.DataFrame(rows)

    def stages(self) -> pl.DataFrame:
        """Per space: blocks, frames and bytes at each stage, and whether the lane matched."""
        return pl.DataFrame(
            [
                {
                    "space": r.space.name,
                    "domain": str(r.domain)[:8],
                    "lane": r.lane,
                    "initial_blocks": len(r.initial_blocks),
                    "expanded_blocks": len(r.expanded_blocks),
                    "first_sequence_hash": f"0x{int(r.sequence_hashes[0]):016x}",
                    "snapshot_chunks": len(r.snapshot_frames),
                    "snapshot_bytes": sum(len(f) for f in r.snapshot_frames),
                    "delta_bytes": len(r.delta_frame),
                    "snapshot_matches_producer": r.snapshot_matches_producer,
                    "delta_matches_producer": r.delta_matches_producer,
                }
                for r in self.results
            ]
        )


def _identity(space: HashSpace, config: CkfConfig, block_size: int) -> ProducerIdentity:
    """One model and endpoint for every space: the hash format alone splits the domains."""
    endpoint = ("dynamo", "backend", "generate")
    dc = round_trip_dc_name(space.name)
    fmt = config.format()
    return pool_identity("/models/base", block_size, space.hash_format, endpoint, dc, (1, 1), fmt)


def hash_space_round_trip(
    spaces: Sequence[HashSpace],
    initial_tokens: npt.ArrayLike,
    expanded_tokens: npt.ArrayLike,
    *,
    block_size: int = 16,
    expected_blocks: int = 1024,
    seed: int = DEFAULT_SEED,
    worker_id: int = 1,
) -> HashSpaceRoundTrip:
    """Run each space's tokens through producer, CBI1 and consumer (see the module docstring).

    ``expanded_tokens`` must extend ``initial_tokens`` (the child Stored event appends blocks).
    A domain holds at most 16 pools: a 17th space of one domain is the table's
    ``Manifest.InvalidLane``.
    """
    if not spaces:
        raise SimulationError(SimulationVariant.RoundTrip, "no hash space to round-trip")
    config = CkfConfig(expected_blocks, seed=seed)
    tables: dict[IndexerDomainId, CkfLaneTable] = {}
    results = []
    for space in spaces:
        initial, expanded = _hashes(space, initial_tokens, expanded_tokens, block_size)
        trip = _Trip.open(_identity(space, config, block_size), config, tables)
        canonical = compute_seq_hash_for_block(expanded)
        external = (canonical & np.uint64(_EXTERNAL_MASK)).tolist()
        blocks = zip(external, expanded.tolist(), strict=True)
        stored = [StoredBlock(e, t) for e, t in blocks]
        n = len(initial)
        frames = trip.snapshot(KvStored(worker_id, tuple(stored[:n]), dp_rank=0))
        snap_ok = trip.matches()
        child = KvStored(worker_id, tuple(stored[n:]), parent_hash=external[n - 1], dp_rank=0)
        payload = trip.delta(child, space.name)
        delta_ok = trip.matches()
        domain = trip.identity.indexer_domain
        parts = (initial, expanded, canonical, frames, payload, snap_ok, delta_ok)
        results.append(SpaceResult(space, domain, trip.lane, *parts))
    return HashSpaceRoundTrip(results, tables, block_size)


def _hashes(
    space: HashSpace, initial_tokens: npt.ArrayLike, expanded_tokens: npt.ArrayLike, block_size: int
) -> tuple[U64Array, U64Array]:
    """The space's block hashes of the initial and the expanded tokens; the second must extend
    the first."""
    initial = space.block_hashes(initial_tokens, block_size)
    expanded = space.block_hashes(expanded_tokens, block_size)
    n = len(initial)
    if not 0 < n < len(expanded) or expanded[:n].tolist() != initial.tolist():
        raise SimulationError(
            SimulationVariant.RoundTrip,
            f"{space.name}: the expanded tokens must extend the initial ones",
        )
    return initial, expanded


@dataclass(slots=True)
class _Trip:
    """One space's pool end to end: its producer and publisher, and its lane (with the lease
    it holds) in its domain's consumer table."""

    identity: ProducerIdentity
    fmt: FilterFormat
    state: DcCkfState
    publisher: DcCkfPublisher
    table: CkfLaneTable
    lane: int
    replica: LaneReplica
    lease: LaneLease

    @classmethod
    def open(
        cls,
        identity: ProducerIdentity,
        config: CkfConfig,
        tables: dict[IndexerDomainId, CkfLaneTable],
    ) -> _Trip:
        """The pool's producer, and the next lane of its domain's table (made on first use)."""
        fmt = filter_format(identity.format)
        domain = identity.indexer_domain
        if domain not in tables:
            tables[domain] = CkfLaneTable(identity.format, consumer_instance=100 + len(tables))
        table = tables[domain]
        lane = len(table.replicas)
        replica = table.replica(lane, pool_id=identity.pool_id)  # the manifest's rules
        assert table.consumer_instance is not None
        lease = LaneLease(table.consumer_instance, lane, 1)
        state, publisher = DcCkfState(config), DcCkfPublisher(identity)
        return cls(identity, fmt, state, publisher, table, lane, replica, lease)

    def snapshot(self, stored: KvStored) -> list[bytes]:
        """``stored`` applied, the barrier snapshot as CBI1 chunks, assembled and installed in
        the lane; the chunks."""
        self.state.apply(stored)
        _, snap = self.publisher.snapshot_after_barrier(self.state, self.lease)
        dc_id = int(self.identity.dc_id)
        frames = list(encode_snapshot_chunks(self.fmt, dc_id, snap.sequence, snap.buckets))
        assembly = SnapshotAssembly(self.fmt)
        assembled = None
        for frame in frames:
            assembled = assembly.absorb(decode(self.fmt, frame))
        assert assembled is not None
        self.replica.assign(self.identity, self.lease)
        self.replica.install_snapshot(
            DcCkfSnapshot(self.identity, self.lease, assembled.epoch, assembled.words)
        )
        return frames

    def delta(self, child: KvStored, name: str) -> bytes:
        """The ``child`` Stored event published as a CBI1 delta and applied to the lane; the
        delta."""
        outcome = self.state.apply(child)
        if outcome.error is not None or outcome.batch is None:
            raise SimulationError(
                SimulationVariant.RoundTrip, f"{name}: child Stored event failed: {outcome.error}"
            )
        delta = self.publisher.publish(outcome.batch)
        assert delta is not None
        dc_id = int(self.identity.dc_id)
        payload = encode_delta(self.fmt, dc_id, delta.base_sequence, delta.sequence, delta.images())
        decoded = decode(self.fmt, payload)
        assert isinstance(decoded, Delta)
        self.replica.apply_delta(
            DcCkfDelta(
                self.identity,
                self.lease,
                decoded.base_epoch,
                decoded.epoch,
                decoded.buckets,
                decoded.words,
            )
        )
        return payload

    def matches(self) -> bool:
        """Whether the lane holds the producer's words."""
        return bool(np.array_equal(self.table.lane_words(self.lane), self.state.words()))

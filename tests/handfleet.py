"""A fleet built by hand for tests whose answers are known: DC producers (``DcCkfState``) fed
one event at a time, published when the test says, and recorded as a relay's catalog stream
plus one pool stream per DC, every message at a receive time the test chooses.

Each DC's blocks are stored under external ids equal to their canonical sequence hashes (as the
mocker does), so a test removes a block by naming its position in a token sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD, WATCH_KV_POOL_CATALOG_METHOD
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.ckf._producer import (
    CkfConfig,
    DcCkfPublisher,
    DcCkfState,
    KvRemoved,
    KvStored,
    StoredBlock,
)
from cbi1kit.hashing._blocks import compute_block_hash_for_seq, compute_seq_hash_for_block
from cbi1kit.hashing._formats import KvQueryHashFormat, KvQuerySemantics
from cbi1kit.hashing._identity import ConsumerInstanceId, LaneLease, RelayIdentity
from cbi1kit.hashing._models import CanonicalModelRegistration
from cbi1kit.relay._messages import (
    PoolCatalog,
    PoolDescriptor,
    catalog_to_wire,
    filter_update_from_frame,
)
from cbi1kit.relay._publication import (
    HubSnapshot,
    encode_delta_publication,
    encode_snapshot_publication,
)
from cbi1kit.sim._simulator import SimulatorConfig, producer_identity

MODEL = "hand/model"
T0 = 1_800_000_000 * 10**9  # 2027-01-15T08:00:00Z: the catalog's receive time
SECOND = 10**9
RELAY = RelayIdentity(0x5EED, 1)


@dataclass
class Dc:
    state: DcCkfState
    publisher: DcCkfPublisher
    identity: object
    stream: int | None = None
    sequence: int = 0
    times: dict[int, int] = field(default_factory=dict)  # sequence -> receive time


class HandFleet:
    """``dcs`` producers of one indexer domain (one model, ``block_size``-token blocks, ``bucket``
    buckets each, the CKF seed ``seed``), recorded into ``path``. ``registrations`` default to
    the base model alone."""

    def __init__(
        self,
        path: Path,
        *,
        dcs: int = 2,
        block_size: int = 4,
        expected_blocks: int = 64,
        seed: int = 0x5EED5EED,
        registrations: tuple[CanonicalModelRegistration, ...] | None = None,
    ) -> None:
        self.path = path
        self.block_size = block_size
        config = SimulatorConfig(dcs=dcs, model=MODEL)
        ckf = CkfConfig(expected_blocks, seed=seed, publish_every_n_events=1 << 30)
        self.dcs: list[Dc] = []
        for dc in range(dcs):
            state = DcCkfState(ckf)
            ident = producer_identity(
                config, dc, state.format, KvQueryHashFormat.DYNAMO_STANDARD_V1, block_size
            )
            lease = LaneLease(ConsumerInstanceId(1), 0, 1)
            self.dcs.append(Dc(state, DcCkfPublisher(ident, lease=lease), ident))  # type: ignore[arg-type]
        self.registrations = registrations or (CanonicalModelRegistration.new(MODEL),)
        self.writer = CaptureWriter(path)

    # -- hashing ----------------------------------------------------------------------------
    def local(self, tokens: list[int], lora: str | None = None) -> list[int]:
        return compute_block_hash_for_seq(tokens, self.block_size, lora_name=lora).tolist()  # type: ignore[no-any-return]

    def canonical(self, tokens: list[int], lora: str | None = None) -> list[int]:
        return compute_seq_hash_for_block(self.local(tokens, lora)).tolist()  # type: ignore[no-any-return]

    # -- producers --------------------------------------------------------------------------
    def store(
        self, dc: int, tokens: list[int], *, lora: str | None = None, worker: int = 1
    ) -> None:
        """The blocks of ``tokens`` stored from the root by one worker of DC ``dc``."""
        local, seq = self.local(tokens, lora), self.canonical(tokens, lora)
        blocks = tuple(StoredBlock(s, h) for s, h in zip(seq, local, strict=True))
        outcome = self.dcs[dc].state.apply(KvStored(worker, blocks))
        assert outcome.error is None, outcome.error

    def store_hashes(self, dc: int, local: list[int], *, worker: int = 1) -> None:
        """Blocks given by their local hashes (a chain from the root)."""
        seq = compute_seq_hash_for_block(local).tolist()
        blocks = tuple(StoredBlock(s, h) for s, h in zip(seq, local, strict=True))
        assert self.dcs[dc].state.apply(KvStored(worker, blocks)).error is None

    def remove(self, dc: int, tokens: list[int], positions: list[int], *, worker: int = 1) -> None:
        """Remove the blocks at ``positions`` of ``tokens`` from DC ``dc``."""
        seq = self.canonical(tokens)
        outcome = self.dcs[dc].state.apply(KvRemoved(worker, tuple(seq[p] for p in positions)))
        assert outcome.error is None, outcome.error

    # -- the relay ---------------------------------------------------------------------------
    def open(self, *, catalog: bool = True, subscribe_at: int = T0) -> None:
        """The catalog (every DC's pool) at ``T0``, then each DC's stream and its snapshot
        at ``subscribe_at``."""
        if catalog:
            semantics = KvQuerySemantics(self.block_size, KvQueryHashFormat.DYNAMO_STANDARD_V1)
            pools = tuple(
                PoolDescriptor(d.identity, ("ns", "comp", "ep"), self.registrations, semantics)  # type: ignore[arg-type]
                for d in self.dcs
            )
            sid = self.writer.open_stream(
                "hand", WATCH_KV_POOL_CATALOG_METHOD, b"", recv_unix_ns=T0
            )
            update = catalog_to_wire(PoolCatalog(RELAY, 1, pools))
            self.writer.message(sid, update.SerializeToString(), recv_unix_ns=T0)
        for dc in range(len(self.dcs)):
            self.subscribe(dc, subscribe_at)

    def subscribe(self, dc: int, at_ns: int) -> int:
        """A (new) stream of DC ``dc``: the producer's words as a snapshot at its sequence
        (what it stored since its last delta rides in the snapshot). Returns its stream."""
        d = self.dcs[dc]
        if d.stream is not None:
            self.writer.close_stream(d.stream, recv_unix_ns=at_ns)
        d.stream = self.writer.open_stream(
            "hand", SUBSCRIBE_KV_POOL_METHOD, b"", recv_unix_ns=at_ns
        )
        d.state.drain()  # whatever is pending is in the snapshot's words
        words = np.array(d.state.words(), dtype=np.uint64)
        for frame in encode_snapshot_publication(HubSnapshot(d.identity, d.sequence, words)):  # type: ignore[arg-type]
            self._send(d, frame, at_ns)
        d.times[d.sequence] = at_ns
        return d.stream

    def publish(self, dc: int, at_ns: int) -> int:
        """Drain DC ``dc`` into one delta received at ``at_ns``; its sequence."""
        d = self.dcs[dc]
        batch = d.state.drain()
        assert batch is not None, "nothing to publish"
        delta = d.publisher.publish(batch)
        assert delta is not None and delta.base_sequence == d.sequence
        d.sequence = delta.sequence
        self._send(d, encode_delta_publication(delta), at_ns)
        d.times[d.sequence] = at_ns
        return d.sequence

    def _send(self, d: Dc, frame: object, at_ns: int) -> None:
        assert d.stream is not None
        update = filter_update_from_frame(frame, RELAY, send_ts_us=at_ns // 1000)  # type: ignore[arg-type]
        self.writer.message(d.stream, update.SerializeToString(), recv_unix_ns=at_ns)

    def close(self) -> Path:
        self.writer.close()
        return self.path

    def words(self, dc: int) -> np.ndarray:
        return np.array(self.dcs[dc].state.words(), dtype=np.uint64)

"""The seed's round trip, end to end: tokens → producer → CBI1 → consumer → prefix search.

For the standard and EAGLE hash formats, each with a base model and with a LoRA target reached
through an alias: hash an initial token sequence, apply it as a Stored event (dp_rank 0), take a
barrier snapshot, encode it as CBI1 chunks, decode and assemble, compare with the producer's
words; apply the expanded sequence as a child Stored event, publish the delta, encode, decode,
apply, compare again; then probe both sequences in the consumer and find their full prefix
depths.

External block hashes are engine ids, never hashed into the filter (ckf.md §1.2). As in the
seed, they are the canonical sequence hashes masked to the non-negative i64 range that
publishers document (``& (2**63 - 1)``), so the lineage key differs from the stored item
whenever the top bit is set, and the test fails if the producer ever inserts the key.
"""

from __future__ import annotations

import numpy as np
import pytest

from cbi1kit.ckf._consumer import CkfLaneTable, linear_prefix_depths, sequence_hashes
from cbi1kit.ckf._lane import DcCkfDelta, DcCkfSnapshot
from cbi1kit.ckf._producer import CkfConfig, DcCkfPublisher, DcCkfState, KvStored, StoredBlock
from cbi1kit.hashing._blocks import compute_block_hash_for_seq, compute_seq_hash_for_block
from cbi1kit.hashing._formats import KvQueryHashFormat
from cbi1kit.hashing._identity import LaneLease, ProducerIdentity
from cbi1kit.hashing._models import CanonicalModelRegistration, ModelTarget, resolve_lora_name
from cbi1kit.hashing._pools import (
    IndexerDomainId,
    PoolId,
    derive_cache_semantics_id,
    derive_routing_scope_id,
    stable_dc_id,
)
from cbi1kit.relay._publication import filter_format
from cbi1kit.wire._assembly import AssembledSnapshot, SnapshotAssembly
from cbi1kit.wire._codec import decode
from cbi1kit.wire._encode import encode_delta, encode_snapshot_chunks
from cbi1kit.wire._frames import Delta

EXTERNAL_MASK = (1 << 63) - 1
BLOCK_SIZE = 16
WORKER = 7
LANE = 3
BASE_MODEL = "Qwen/Qwen3-0.6B"
ADAPTER = "acme/qwen3-support-lora"
REGISTRATIONS = (
    CanonicalModelRegistration.new(BASE_MODEL, aliases=["qwen3-small"]),
    CanonicalModelRegistration.with_target(
        ADAPTER, ModelTarget.lora(BASE_MODEL, ADAPTER), aliases=["support-bot"]
    ),
)


def _identity(
    hash_format: KvQueryHashFormat, config: CkfConfig, incarnation: int
) -> ProducerIdentity:
    cache = derive_cache_semantics_id([f"/models/{BASE_MODEL}"], BLOCK_SIZE, hash_format)
    scope = derive_routing_scope_id(["dynamo", "backend", "generate"])
    pool = PoolId(IndexerDomainId(cache, scope), stable_dc_id("dc-west"))
    return ProducerIdentity(pool, incarnation, 1, config.format())


def _assemble(assembly: SnapshotAssembly, chunks: list[bytes], fmt: object) -> AssembledSnapshot:
    done = None
    for i, payload in enumerate(chunks):
        out = assembly.absorb(decode(fmt, payload))  # type: ignore[arg-type]
        assert (out is None) == (i < len(chunks) - 1)
        done = out
    assert done is not None
    return done


@pytest.mark.parametrize("hash_format", list(KvQueryHashFormat), ids=lambda f: f.serde_name)
@pytest.mark.parametrize(
    ("requested_model", "expected_lora"),
    [(BASE_MODEL, None), ("support-bot", ADAPTER)],
    ids=["base", "lora-via-alias"],
)
def test_seed_round_trip(
    hash_format: KvQueryHashFormat, requested_model: str, expected_lora: str | None
) -> None:
    rng = np.random.default_rng(4)
    is_eagle = hash_format.is_eagle
    lora = resolve_lora_name(REGISTRATIONS, requested_model)
    assert lora == expected_lora  # an alias resolves to the canonical adapter name

    initial = rng.integers(0, 150_000, size=5 * BLOCK_SIZE + 3, dtype=np.uint32)
    expanded = np.concatenate(
        [initial, rng.integers(0, 150_000, size=4 * BLOCK_SIZE, dtype=np.uint32)]
    )
    local_init = compute_block_hash_for_seq(initial, BLOCK_SIZE, lora_name=lora, is_eagle=is_eagle)
    local_exp = compute_block_hash_for_seq(expanded, BLOCK_SIZE, lora_name=lora, is_eagle=is_eagle)
    n_init, n_exp = len(local_init), len(local_exp)
    assert 0 < n_init < n_exp
    assert local_exp[:n_init].tolist() == local_init.tolist()
    canon_exp = compute_seq_hash_for_block(local_exp)
    external = (canon_exp & np.uint64(EXTERNAL_MASK)).tolist()
    assert external != canon_exp.tolist()  # the masking changes at least one key

    config = CkfConfig(1024, seed=0x5DEECE66D1B54A33)
    state = DcCkfState(config)
    identity = _identity(hash_format, config, incarnation=11)
    fmt = filter_format(identity.format)
    dc_id = int(identity.dc_id)
    lease = LaneLease(21, LANE, 1)
    publisher = DcCkfPublisher(identity)

    # -- initial sequence: Stored event, barrier snapshot, CBI1 chunks --------------------------
    first = state.apply(
        KvStored(
            WORKER,
            tuple(
                StoredBlock(e, t)
                for e, t in zip(external[:n_init], local_init.tolist(), strict=True)
            ),
            dp_rank=0,
        )
    )
    assert first.applied and first.error is None
    assert state.resident_count == n_init
    _, snapshot = publisher.snapshot_after_barrier(state, lease)
    chunks = list(encode_snapshot_chunks(fmt, dc_id, snapshot.sequence, snapshot.buckets))
    assembled = _assemble(SnapshotAssembly(fmt), chunks, fmt)
    assert assembled.epoch == snapshot.sequence
    assert assembled.words.tolist() == state.words().tolist() == snapshot.buckets.tolist()

    table = CkfLaneTable(identity.format)
    replica = table.replica(LANE, pool_id=identity.pool_id, consumer_instance=21)
    replica.assign(identity, lease)
    replica.install_snapshot(DcCkfSnapshot(identity, lease, assembled.epoch, assembled.words))
    assert table.lane_words(LANE).tolist() == state.words().tolist()

    # -- expanded sequence: child Stored event, published delta, CBI1 delta ---------------------
    child = state.apply(
        KvStored(
            WORKER,
            tuple(
                StoredBlock(e, t)
                for e, t in zip(external[n_init:], local_exp[n_init:].tolist(), strict=True)
            ),
            parent_hash=external[n_init - 1],
            dp_rank=0,
        )
    )
    assert child.error is None and child.batch is not None
    assert state.resident_count == n_exp
    delta = publisher.publish(child.batch)
    assert delta is not None and (delta.base_sequence, delta.sequence) == (0, 1)
    payload = encode_delta(fmt, dc_id, delta.base_sequence, delta.sequence, delta.images())
    decoded = decode(fmt, payload)
    assert isinstance(decoded, Delta)
    assert (decoded.base_epoch, decoded.epoch, decoded.header.dc_id) == (0, 1, dc_id)
    assert decoded.buckets.tolist() == delta.buckets.tolist()
    replica.apply_delta(
        DcCkfDelta(
            identity, lease, decoded.base_epoch, decoded.epoch, decoded.buckets, decoded.words
        )
    )
    assert replica.installed_sequence == 1
    assert table.lane_words(LANE).tolist() == state.words().tolist()

    # -- probes and prefix search ---------------------------------------------------------------
    lane_bit = 1 << LANE
    masks = table.probe_many(sequence_hashes(local_exp)).tolist()
    assert all(m == lane_bit for m in masks)  # every stored block, only on this lane
    assert table.find_prefix_matches(local_init) == {LANE: n_init}
    assert table.find_prefix_matches(local_exp) == {LANE: n_exp}
    for local in (local_init, local_exp):
        m = table.probe_many(sequence_hashes(local)).tolist()
        assert linear_prefix_depths(len(local), 0xFFFF, m.__getitem__)[LANE] == len(local)

    # The lineage keys themselves are not in the filter (only canonical hashes are).
    keys_only = [e for e, c in zip(external, canon_exp.tolist(), strict=True) if e != c]
    assert keys_only and not any(table.probe_hash(e) for e in keys_only)

    # A request hashed under the other salt (LoRA vs base) shares no prefix with this pool.
    other = None if lora else ADAPTER
    foreign = compute_block_hash_for_seq(expanded, BLOCK_SIZE, lora_name=other, is_eagle=is_eagle)
    assert table.find_prefix_matches(foreign) == {LANE: 0}

"""Upstream's acceptance test for the relay adapter, ported assertion for assertion.

The seed (``../shared/seed/000_b7050281937fbdc0.txt`` from the repository's root, dynamo-llm
1.5.1 ``kv_dc_relay/publication.rs``) ends with
``cbi1_snapshot_and_delta_preserve_standard_eagle_and_lora_query_spaces``. It is ported below
through the public adapter (``encode_snapshot_publication`` / ``encode_delta_publication`` of
``cbi1kit.relay``, named apart from the wire codec's ``encode_delta``), with the
seed's parameters: block size 4, tokens ``0..13`` then ``0..21``, cache namespace
``"tenant-ns"``, ``CkfConfig::new(64)`` publishing every event, sequences 1 then 1→2 and the
external-hash mask ``0xC0DE_CAFE_D15C_0A11``. Each block names the seed lines (``seed
L<a>-<b>``, numbered as in that file) it ports.

Where the seed unwraps a ``Result`` a Python call raises instead; where it ``expect``s an
``Option`` the port asserts it is not None with the same message. Below the port are the
adversarial variants the seed implies, each failing with upstream's error variant in upstream's
order: ``filter_format`` (``UnsupportedFormatIdentity``, then ``FilterFormat::new``'s ``Format``)
before ``SnapshotBucketCount``; in a delta, ``filter_format``, then ``BucketIndexOverflow`` per
image, then ``images::encode_delta`` (``DeltaImageCount`` before ``BucketIndex``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from errorcheck import is_variant, raises_variant

from cbi1kit import wire as cbi1
from cbi1kit.ckf import CkfConfig, DcCkfDelta, DcCkfState, KvStored, StoredBlock
from cbi1kit.errors import Cbi1Error, IdentityError, PublicationError
from cbi1kit.hashing import (
    CacheSemanticsId,
    CanonicalModelId,
    CanonicalModelRegistration,
    ConsumerInstanceId,
    DcId,
    IdentitySource,
    IndexerDomainId,
    KvQueryHashFormat,
    KvQuerySemantics,
    LaneLease,
    ModelAlias,
    ModelTarget,
    PoolId,
    ProducerIdentity,
    RoutingScopeId,
    compute_block_hash_for_seq,
    compute_seq_hash_for_block,
    resolve_registration as resolve_advertised_registration,
)
from cbi1kit.hashing._identity import DcCkfFormatIdentity
from cbi1kit.relay import (
    HubSnapshot,
    PublicationFrameKind,
    encode_delta_publication,
    encode_snapshot_publication,
)

EXTERNAL_MASK = 0xC0DE_CAFE_D15C_0A11  # seed L247


# -- helpers ----------------------------------------------------------------------------------


def pool_id(seed: int) -> PoolId:
    """seed L231-239: a pool whose digests are ``seed`` and ``seed + 1`` (u8, wrapping), DC 7."""
    return PoolId(
        IndexerDomainId(
            CacheSemanticsId(bytes([seed] * 16), IdentitySource.EXPLICIT),
            RoutingScopeId(bytes([(seed + 1) & 0xFF] * 16), IdentitySource.EXPLICIT),
        ),
        DcId(7),
    )


def stored_event(
    event_id: int,
    parent_sequence_hash: int | None,
    local_hashes: npt.NDArray[np.uint64],
    sequence_hashes: npt.NDArray[np.uint64],
) -> KvStored:
    """seed L241-269: worker 1, dp_rank 0, external ids = sequence hashes ^ the mask.

    ``event_id`` is kept for the seed's signature; the producer model's ``KvStored`` carries no
    event id (events are applied in call order).
    """
    del event_id
    return KvStored(
        1,
        tuple(
            StoredBlock(sequence_hash ^ EXTERNAL_MASK, local_hash)
            for local_hash, sequence_hash in zip(
                local_hashes.tolist(), sequence_hashes.tolist(), strict=False
            )
        ),
        parent_hash=None if parent_sequence_hash is None else parent_sequence_hash ^ EXTERNAL_MASK,
        dp_rank=0,
        start_position=None,
    )


def resolve_registration(
    registrations: Sequence[CanonicalModelRegistration], requested_model: str
) -> CanonicalModelRegistration:
    """seed L271-285: the first registration whose model or an alias is ``requested_model``.

    The package's resolver has exactly this rule; where the seed's ``expect`` panics it raises
    ``IdentityError`` ``UnknownModel``.
    """
    return resolve_advertised_registration(registrations, requested_model)


# -- the seed's test --------------------------------------------------------------------------


def assert_cbi1_query_round_trip(hash_format: KvQueryHashFormat, via_lora_alias: bool) -> None:
    """seed L287-395, assertion for assertion, in the seed's order."""
    # seed L288-310: semantics, the registration (a LoRA behind an alias, or the base model),
    # resolved from the requested name to the canonical adapter.
    semantics = KvQuerySemantics(4, hash_format)
    base_model = CanonicalModelId("llama")
    if via_lora_alias:
        adapter = CanonicalModelId("tenant-a")
        registration = CanonicalModelRegistration.with_target(
            adapter, ModelTarget.lora(base_model, adapter), [ModelAlias("tenant-chat")]
        )
    else:
        registration = CanonicalModelRegistration.new(base_model, [])
    requested_model = "tenant-chat" if via_lora_alias else "llama"
    registrations = [registration]
    resolved = resolve_registration(registrations, requested_model)
    adapter_id = resolved.target.adapter
    canonical_lora = None if adapter_id is None else adapter_id.value

    # seed L311-326: block hashes under the resolved options, then sequence hashes.
    hash_options = {
        "lora_name": canonical_lora,
        "cache_namespace": "tenant-ns",
        "is_eagle": semantics.hash_format.is_eagle,
    }
    initial_tokens = list(range(13))
    expanded_tokens = list(range(21))
    initial_local = compute_block_hash_for_seq(
        initial_tokens, semantics.kv_block_size, **hash_options
    )
    expanded_local = compute_block_hash_for_seq(
        expanded_tokens, semantics.kv_block_size, **hash_options
    )
    assert expanded_local[: len(initial_local)].tolist() == initial_local.tolist()
    assert len(expanded_local) > len(initial_local)
    initial_sequence = compute_seq_hash_for_block(initial_local)
    expanded_sequence = compute_seq_hash_for_block(expanded_local)

    # seed L328-335: the producer, the first Stored event, a barrier snapshot.
    config = CkfConfig(64, publish_every_n_events=1)
    producer = DcCkfState(config)
    initial = producer.apply(stored_event(1, None, initial_local, initial_sequence))
    assert initial.error is None
    assert initial.batch is not None
    _, buckets = producer.barrier_snapshot()

    # seed L337-347: identity, lease, hub snapshot, the consumer's wire format and assembly.
    pool = pool_id(hash_format.identity_version + (10 if via_lora_alias else 0))
    identity = ProducerIdentity(pool, 11, 1, producer.format)
    consumer_instance = ConsumerInstanceId(13)
    lease = LaneLease(consumer_instance, 0, 1)
    hub_snapshot = HubSnapshot(identity, 1, buckets, lease=lease)
    wire_format = cbi1.FilterFormat(
        seed=identity.format.seed, bucket_count=identity.format.bucket_count
    )
    assembly = cbi1.SnapshotAssembly(wire_format)
    assembled = None

    # seed L348-355: every snapshot frame carries the identity and the snapshot-chunk kind.
    for frame in encode_snapshot_publication(hub_snapshot):
        assert frame.identity == identity
        assert frame.kind == PublicationFrameKind.SNAPSHOT_CHUNK
        decoded = cbi1.decode(wire_format, frame.payload)
        snapshot = assembly.absorb(decoded)
        if snapshot is not None:
            assembled = snapshot

    # seed L356-363: the assembled images, written into a lane, are the producer's buckets.
    assert assembled is not None, "all CBI1 snapshot chunks must assemble"
    snapshot_sequence, snapshot_images = assembled.epoch, assembled.images
    decoded_buckets = np.zeros(wire_format.bucket_count, dtype=np.uint64)
    decoded_buckets[snapshot_images["bucket"]] = snapshot_images["word"]
    assert snapshot_sequence == 1
    assert decoded_buckets.tolist() == buckets.tolist()

    # seed L365-377: the child Stored event, its publication, the adapter's delta frame.
    delta_outcome = producer.apply(
        stored_event(
            2,
            int(initial_sequence[-1]) if len(initial_sequence) else None,
            expanded_local[len(initial_local) :],
            expanded_sequence[len(initial_sequence) :],
        )
    )
    assert delta_outcome.error is None
    batch = delta_outcome.batch
    assert batch is not None, "publication threshold emits the delta"
    producer_delta = DcCkfDelta(identity, lease, 1, 2, batch.buckets.copy(), batch.values.copy())
    delta_frame = encode_delta_publication(producer_delta)
    assert delta_frame.kind == PublicationFrameKind.DELTA

    # seed L378-389: it decodes as a delta with the pool's DC, base epoch 1 and epoch 2.
    decoded = cbi1.decode(wire_format, delta_frame.payload)
    assert isinstance(decoded, cbi1.Delta), "encoded Relay delta decoded as a snapshot chunk"
    header, base_epoch, images = decoded.header, decoded.base_epoch, decoded.images
    assert header.dc_id == int(identity.dc_id)
    assert base_epoch == 1
    assert header.epoch == 2

    # seed L390-394: applied to the snapshot lane, the delta gives the producer's new buckets.
    decoded_buckets[images["bucket"]] = images["word"]
    _, expected_buckets = producer.barrier_snapshot()
    assert decoded_buckets.tolist() == expected_buckets.tolist()


# seed L397-406: the seed loops standard and EAGLE, each without and with the LoRA alias;
# parametrised here so each of the four combinations reports on its own.
@pytest.mark.parametrize("via_lora_alias", [False, True], ids=["base", "lora-alias"])
@pytest.mark.parametrize(
    "hash_format",
    [KvQueryHashFormat.DYNAMO_STANDARD_V1, KvQueryHashFormat.DYNAMO_EAGLE_V1],
    ids=lambda f: f.serde_name,
)
def test_cbi1_snapshot_and_delta_preserve_standard_eagle_and_lora_query_spaces(
    hash_format: KvQueryHashFormat, via_lora_alias: bool
) -> None:
    assert_cbi1_query_round_trip(hash_format, via_lora_alias)


# -- adversarial variants ---------------------------------------------------------------------

SEED_FORMAT = CkfConfig(64).format()  # 64 expected blocks: 32 buckets
BUCKETS = SEED_FORMAT.bucket_count
TOO_MANY_IMAGES = cbi1.max_delta_images() + 1


def seed_identity(**fmt: int) -> ProducerIdentity:
    """The seed's producer identity; ``fmt`` overrides format fields, unchecked (as upstream's
    struct allows) so the adapter's gate is what sees them."""
    fields = {"seed": SEED_FORMAT.seed, "bucket_count": SEED_FORMAT.bucket_count, **fmt}
    return ProducerIdentity(pool_id(1), 11, 1, DcCkfFormatIdentity.unchecked(**fields))


LEASE = LaneLease(ConsumerInstanceId(13), 0, 1)


def seed_lane() -> npt.NDArray[np.uint64]:
    """The seed's first barrier snapshot (standard format, base model): a real lane."""
    local = compute_block_hash_for_seq(list(range(13)), 4, cache_namespace="tenant-ns")
    producer = DcCkfState(CkfConfig(64))
    producer.apply(stored_event(1, None, local, compute_seq_hash_for_block(local)))
    return producer.barrier_snapshot()[1]


def delta(
    identity: ProducerIdentity, buckets: Sequence[int] | npt.NDArray[np.uint64]
) -> DcCkfDelta:
    """A 1→2 delta over ``buckets``; uint64 indices stand in for upstream's ``usize``."""
    b: Any = np.asarray(buckets, dtype=np.uint64)  # the model's uint32 field cannot hold > u32
    return DcCkfDelta(identity, LEASE, 1, 2, b, np.ones(b.shape[0], dtype=np.uint64))


def test_an_alias_that_resolves_to_nothing() -> None:
    """The seed's ``expect`` on resolution: a name no advertised registration carries."""
    lora = CanonicalModelRegistration.with_target(
        "tenant-a", ModelTarget.lora("llama", "tenant-a"), [ModelAlias("tenant-chat")]
    )
    base = CanonicalModelRegistration.new("llama", [])
    for registrations, requested in (
        ([lora], "llama"),  # the base model is not advertised, only its adapter
        ([lora], "tenant-chat-v2"),
        ([lora], "Tenant-Chat"),  # names match exactly, case included
        ([base], "tenant-chat"),
    ):
        with raises_variant(IdentityError, "UnknownModel"):
            resolve_registration(registrations, requested)


@pytest.mark.parametrize(
    "fmt",
    [{"format_version": 2}, {"fingerprint_bits": 8}, {"slots_per_bucket": 8}],
    ids=["version", "fingerprint_bits", "slots"],
)
def test_a_format_the_gate_refuses(fmt: dict[str, int]) -> None:
    identity = seed_identity(**fmt)
    f = identity.format
    with raises_variant(PublicationError, "UnsupportedFormatIdentity") as info:
        encode_snapshot_publication(HubSnapshot(identity, 1, seed_lane(), lease=LEASE))
    got = (info.value.format_version, info.value.fingerprint_bits, info.value.slots_per_bucket)
    assert got == (f.format_version, f.fingerprint_bits, f.slots_per_bucket)
    with raises_variant(PublicationError, "UnsupportedFormatIdentity"):
        encode_delta_publication(delta(identity, [0]))


def test_snapshot_errors_come_in_upstreams_order() -> None:
    """Gate, then ``FilterFormat::new`` (``Format``), then ``SnapshotBucketCount``."""
    short = seed_lane()[:-1]
    # refused shape + a bucket count no format has + a short lane: the gate speaks first
    with raises_variant(PublicationError, "UnsupportedFormatIdentity"):
        encode_snapshot_publication(
            HubSnapshot(seed_identity(fingerprint_bits=8, bucket_count=1000), 1, short)
        )
    # CBI1's shape, a bucket count no format has, a short lane: FilterFormat::new's Format error
    with raises_variant(PublicationError, "Format.BucketCount") as format_info:
        encode_snapshot_publication(HubSnapshot(seed_identity(bucket_count=1000), 1, short))
    assert format_info.value.variant == "Format"
    assert is_variant(format_info.value.__cause__, Cbi1Error, "Format.BucketCount")
    # a valid format and a short lane: SnapshotBucketCount, before any frame
    with raises_variant(PublicationError, "SnapshotBucketCount") as count_info:
        encode_snapshot_publication(HubSnapshot(seed_identity(), 1, short))
    assert (count_info.value.expected, count_info.value.actual) == (BUCKETS, BUCKETS - 1)


def test_a_delta_bucket_above_u32() -> None:
    with raises_variant(PublicationError, "BucketIndexOverflow") as info:
        encode_delta_publication(delta(seed_identity(), [3, 1 << 32]))
    assert (info.value.bucket, info.value.image_index) == (1 << 32, 1)
    with raises_variant(PublicationError, "BucketIndexOverflow") as info:
        encode_delta_publication(delta(seed_identity(), [(1 << 64) - 1]))
    assert info.value.bucket == (1 << 64) - 1
    frame = encode_delta_publication(delta(seed_identity(), [BUCKETS - 1]))  # in the lane: encodes
    assert frame.kind == PublicationFrameKind.DELTA


def test_an_image_count_above_the_frame_limit() -> None:
    with raises_variant(PublicationError, "Wire.DeltaImageCount") as info:
        encode_delta_publication(delta(seed_identity(), np.zeros(TOO_MANY_IMAGES, np.uint64)))
    assert info.value.subvariant == "DeltaImageCount"
    assert (info.value.expected, info.value.actual) == (TOO_MANY_IMAGES - 1, TOO_MANY_IMAGES)
    at_limit = delta(seed_identity(), np.zeros(TOO_MANY_IMAGES - 1, np.uint64))
    assert len(encode_delta_publication(at_limit).payload) <= cbi1.IMAGES_MAX_FRAME_BYTES


def test_delta_errors_come_in_upstreams_order() -> None:
    """Gate, then ``FilterFormat::new``, then ``BucketIndexOverflow`` (per image, before the
    codec), then the codec's ``DeltaImageCount`` before its ``BucketIndex``."""
    over = np.zeros(TOO_MANY_IMAGES, dtype=np.uint64)
    over[-1] = 1 << 32  # too many images, and the last one above u32
    with raises_variant(PublicationError, "UnsupportedFormatIdentity"):
        encode_delta_publication(delta(seed_identity(slots_per_bucket=2, bucket_count=1000), over))
    with raises_variant(PublicationError, "Format.BucketCount") as format_info:
        encode_delta_publication(delta(seed_identity(bucket_count=1000), over))
    assert format_info.value.variant == "Format"
    with raises_variant(PublicationError, "BucketIndexOverflow"):
        encode_delta_publication(delta(seed_identity(), over))
    # an out-of-lane bucket (BucketIndex) before an overflowing one: the overflow still wins,
    # because every image is converted to u32 before the codec looks at any
    with raises_variant(PublicationError, "BucketIndexOverflow"):
        encode_delta_publication(delta(seed_identity(), [BUCKETS, 1 << 32]))
    # too many images, every one outside the lane: the count is checked first
    with raises_variant(PublicationError, "Wire.DeltaImageCount"):
        encode_delta_publication(
            delta(seed_identity(), np.full(TOO_MANY_IMAGES, BUCKETS, np.uint64))
        )
    with raises_variant(PublicationError, "Wire.BucketIndex") as index_info:
        encode_delta_publication(delta(seed_identity(), [5, BUCKETS]))
    assert index_info.value.subvariant == "BucketIndex"
    assert (index_info.value.actual, index_info.value.expected) == (BUCKETS, BUCKETS)

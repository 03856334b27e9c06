"""Every wire validation rule rejects, the valid messages pass, and conversions round-trip."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
from errorcheck import raises_variant

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.errors import Cbi1Error, Cbi1kitError, RelayWireError
from cbi1kit.hashing._identity import DcCkfFormatIdentity, ProducerIdentity, RelayIdentity
from cbi1kit.hashing._pools import (
    CacheSemanticsId,
    DcId,
    IdentitySource,
    IndexerDomainId,
    PoolId,
    RoutingScopeId,
)
from cbi1kit.relay import _messages as r
from cbi1kit.relay._publication import PublicationFrame, PublicationFrameKind

U64 = (1 << 64) - 1


def producer() -> ProducerIdentity:
    return ProducerIdentity(
        pool_id=PoolId(
            IndexerDomainId(
                CacheSemanticsId(bytes(range(16)), IdentitySource.DEFAULT_DERIVED),
                RoutingScopeId(bytes(range(16, 32)), IdentitySource.EXPLICIT),
            ),
            DcId(0xAABBCCDDEEFF0011),
        ),
        producer_incarnation=U64,
        layout_generation=3,
        format=DcCkfFormatIdentity(seed=0x5DEECE66D1B54A33, bucket_count=1024),
    )


RELAY = RelayIdentity(drt_instance_id=U64 - 5, relay_incarnation=42)


def update(kind: int = pb.FILTER_UPDATE_KIND_DELTA) -> pb.FilterUpdate:
    base, seq, payload = 7, 8, b"CBI1-not-decoded-here"
    if kind == pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK:
        base = seq = 7
    if kind == pb.FILTER_UPDATE_KIND_HEARTBEAT:
        base = seq = 7
        payload = b""
    return pb.FilterUpdate(
        protocol_version=1,
        relay=r.relay_identity_to_wire(RELAY),
        producer=r.producer_to_wire(producer()),
        base_sequence=base,
        sequence=seq,
        send_ts_us=1_700_000_000_000_000,
        kind=kind,  # type: ignore[arg-type]
        payload=payload,
        contract_marker=0x4B565231,
    )


@pytest.mark.parametrize(
    "kind",
    [
        pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK,
        pb.FILTER_UPDATE_KIND_DELTA,
        pb.FILTER_UPDATE_KIND_HEARTBEAT,
    ],
)
def test_valid_updates_pass(kind: int) -> None:
    r.validate_filter_update(update(kind))
    assert r.check_filter_update(update(kind)) is None


def _set(path: str, value: object) -> Callable[[pb.FilterUpdate], None]:
    def mutate(msg: pb.FilterUpdate) -> None:
        *parents, leaf = path.split(".")
        target: object = msg
        for name in parents:
            target = getattr(target, name)
        setattr(target, leaf, value)

    return mutate


def _clear(path: str) -> Callable[[pb.FilterUpdate], None]:
    def mutate(msg: pb.FilterUpdate) -> None:
        *parents, leaf = path.split(".")
        target: object = msg
        for name in parents:
            target = getattr(target, name)
        target.ClearField(leaf)  # type: ignore[attr-defined]

    return mutate


P = "producer"
CS = f"{P}.pool_id.indexer_domain.cache_semantics"
RS = f"{P}.pool_id.indexer_domain.routing_scope"
CASES: list[tuple[str, Callable[[pb.FilterUpdate], None], type[r.RelayWireError], str]] = [
    ("marker", _set("contract_marker", 0x4B565232), "ContractMarker", "contract_marker"),
    ("marker zero", _set("contract_marker", 0), "ContractMarker", "contract_marker"),
    ("version 0", _set("protocol_version", 0), "ProtocolVersion", "protocol_version"),
    ("version 2", _set("protocol_version", 2), "ProtocolVersion", "protocol_version"),
    ("no relay", _clear("relay"), "MissingField", "relay"),
    ("no producer", _clear("producer"), "MissingField", "producer"),
    ("no pool", _clear(f"{P}.pool_id"), "MissingField", f"{P}.pool_id"),
    (
        "pool version",
        _set(f"{P}.pool_id.identity_version", 2),
        "PoolIdentityVersion",
        f"{P}.pool_id.identity_version",
    ),
    (
        "no domain",
        _clear(f"{P}.pool_id.indexer_domain"),
        "MissingField",
        f"{P}.pool_id.indexer_domain",
    ),
    ("no cs", _clear(CS), "MissingField", CS),
    ("no rs", _clear(RS), "MissingField", RS),
    ("cs 15", _set(f"{CS}.digest", b"x" * 15), "DigestLength", f"{CS}.digest"),
    ("cs 17", _set(f"{CS}.digest", b"x" * 17), "DigestLength", f"{CS}.digest"),
    ("rs empty", _set(f"{RS}.digest", b""), "DigestLength", f"{RS}.digest"),
    ("cs source 0", _set(f"{CS}.source", 0), "IdentitySource", f"{CS}.source"),
    ("rs source 3", _set(f"{RS}.source", 3), "IdentitySource", f"{RS}.source"),
    (
        "generation 0",
        _set(f"{P}.layout_generation", 0),
        "LayoutGeneration",
        f"{P}.layout_generation",
    ),
    ("no format", _clear(f"{P}.ckf_format"), "MissingField", f"{P}.ckf_format"),
    (
        "format version",
        _set(f"{P}.ckf_format.format_version", 2),
        "UnsupportedCkfFormat",
        f"{P}.ckf_format.format_version",
    ),
    (
        "fp bits",
        _set(f"{P}.ckf_format.fingerprint_bits", 8),
        "UnsupportedCkfFormat",
        f"{P}.ckf_format.fingerprint_bits",
    ),
    (
        "slots",
        _set(f"{P}.ckf_format.slots_per_bucket", 8),
        "UnsupportedCkfFormat",
        f"{P}.ckf_format.slots_per_bucket",
    ),
    # upstream's order (wire/identity.rs · validate_ckf_format, 7216a153): a zero field first
    # (before another field's unsupported value), then version/width/slots, then a bucket
    # count above 2^24 (unsupported: the pool is quarantined), then no power of two (malformed)
    *[
        (
            f"zero {name}",
            _set(f"{P}.ckf_format.{name}", 0),
            "ZeroFormatField",
            f"{P}.ckf_format.{name}",
        )
        for name in ("format_version", "bucket_count", "fingerprint_bits", "slots_per_bucket")
    ],
    (
        "zero buckets before bad bits",
        lambda u: (
            _set(f"{P}.ckf_format.fingerprint_bits", 8)(u),
            _set(f"{P}.ckf_format.bucket_count", 0)(u),
        ),
        "ZeroFormatField",
        f"{P}.ckf_format.bucket_count",
    ),
    *[
        (
            f"buckets {n}",
            _set(f"{P}.ckf_format.bucket_count", n),
            "BucketCount",
            f"{P}.ckf_format.bucket_count",
        )
        for n in (1, 3, 1000, (1 << 24) - 1)
    ],
    *[
        (
            f"buckets {n}",
            _set(f"{P}.ckf_format.bucket_count", n),
            "BucketCountTooLarge",
            f"{P}.ckf_format.bucket_count",
        )
        for n in ((1 << 24) + 1, 1 << 25, U64)
    ],
    ("kind 0", _set("kind", 0), "UpdateKind", "kind"),
    ("kind 9", _set("kind", 9), "UpdateKind", "kind"),
    ("delta gap", _set("sequence", 10), "Sequence", "sequence"),
    ("delta same", _set("sequence", 7), "Sequence", "sequence"),
]


@pytest.mark.parametrize(("name", "mutate", "cls", "field"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_rejects_with_its_field_path(
    name: str, mutate: Callable[[pb.FilterUpdate], None], cls: str, field: str
) -> None:
    msg = update()
    mutate(msg)
    with raises_variant(RelayWireError, cls) as info:
        r.validate_filter_update(msg)
    err = info.value
    assert err.field == f"FilterUpdate.{field}"
    assert f"FilterUpdate.{field}" in str(err)
    assert isinstance(err, Cbi1kitError) and isinstance(err, ValueError)
    checked = r.check_filter_update(msg)
    assert checked is not None and checked.variant == cls
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is RelayWireError and again.variant == cls and str(again) == str(err)


def test_ckf_format_error_carries_all_three_values() -> None:
    msg = update()
    msg.producer.ckf_format.fingerprint_bits = 8
    msg.producer.ckf_format.slots_per_bucket = 2
    with raises_variant(RelayWireError, "UnsupportedCkfFormat") as info:
        r.validate_filter_update(msg)
    assert (info.value.format_version, info.value.fingerprint_bits) == (1, 8)
    assert info.value.slots_per_bucket == 2


def test_marker_is_checked_before_version() -> None:
    msg = update()
    msg.contract_marker = 1
    msg.protocol_version = 9
    with raises_variant(RelayWireError, "ContractMarker"):
        r.validate_filter_update(msg)


@pytest.mark.parametrize(
    "kind", [pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, pb.FILTER_UPDATE_KIND_DELTA]
)
def test_an_empty_chunk_or_delta_payload_decodes_truncated(kind: int) -> None:
    """Upstream has no envelope rule for it: ``decode`` of no bytes is ``Truncated``."""
    from cbi1kit.wire import FilterFormat, decode, rule_for

    msg = update(kind)
    msg.base_sequence, msg.sequence, msg.payload = 7, 7 + (kind == pb.FILTER_UPDATE_KIND_DELTA), b""
    assert r.check_filter_update(msg) is None
    with raises_variant(Cbi1Error, "Truncated") as info:
        decode(FilterFormat(seed=1, bucket_count=1024), msg.payload)
    assert rule_for(info.value) == "cbi1-truncated"


@pytest.mark.parametrize(
    ("kind", "base", "seq", "payload", "cls"),
    [
        (pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, 6, 7, b"x", "Sequence"),
        (pb.FILTER_UPDATE_KIND_HEARTBEAT, 6, 7, b"", "Sequence"),
        (pb.FILTER_UPDATE_KIND_HEARTBEAT, 7, 7, b"x", "Payload"),
        (pb.FILTER_UPDATE_KIND_DELTA, U64, 0, b"x", "Sequence"),
        (pb.FILTER_UPDATE_KIND_DELTA, 8, 7, b"x", "Sequence"),
    ],
)
def test_kind_sequence_and_payload_rules(
    kind: int, base: int, seq: int, payload: bytes, cls: str
) -> None:
    msg = update(kind)
    msg.base_sequence, msg.sequence, msg.payload = base, seq, payload
    with raises_variant(RelayWireError, cls):
        r.validate_filter_update(msg)


def test_sequences_at_u64_edges_pass() -> None:
    msg = update(pb.FILTER_UPDATE_KIND_DELTA)
    msg.base_sequence, msg.sequence = U64 - 1, U64
    r.validate_filter_update(msg)
    chunk = update(pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK)
    chunk.base_sequence = chunk.sequence = 0
    r.validate_filter_update(chunk)


def test_producer_round_trip_is_lossless() -> None:
    wire = r.producer_to_wire(producer())
    assert r.producer_from_wire(wire) == producer()
    again = pb.ProducerIdentity.FromString(wire.SerializeToString())
    assert r.producer_from_wire(again) == producer()
    assert r.relay_identity_from_wire(r.relay_identity_to_wire(RELAY)) == RELAY


def test_producer_from_wire_rejects_what_validation_rejects() -> None:
    wire = r.producer_to_wire(producer())
    wire.layout_generation = 0
    with raises_variant(
        RelayWireError, "LayoutGeneration", match=r"ProducerIdentity\.layout_generation"
    ):
        r.producer_from_wire(wire)


def test_frame_conversion_round_trip_and_heartbeat() -> None:
    frame = PublicationFrame(producer(), 7, 8, PublicationFrameKind.DELTA, b"payload")
    msg = r.filter_update_from_frame(frame, RELAY, send_ts_us=123)
    assert msg.kind == pb.FILTER_UPDATE_KIND_DELTA and msg.contract_marker == 0x4B565231
    assert r.frame_from_filter_update(msg) == frame
    chunk = PublicationFrame(producer(), 9, 9, PublicationFrameKind.SNAPSHOT_CHUNK, b"c")
    msg = r.filter_update_from_frame(chunk, RELAY, send_ts_us=1)
    assert msg.kind == pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
    assert r.frame_from_filter_update(msg) == chunk
    hb = r.heartbeat_update(producer(), 9, RELAY, send_ts_us=5)
    r.validate_filter_update(hb)
    assert (hb.base_sequence, hb.sequence, hb.payload) == (9, 9, b"")
    assert r.frame_from_filter_update(hb) is None


def _catalog() -> pb.KvPoolCatalogUpdate:
    desc = pb.KvPoolDescriptor(
        producer=r.producer_to_wire(producer()),
        serving_endpoint=pb.DynamoEndpointId(namespace="ns", component="c", endpoint="generate"),
        registrations=[
            pb.ModelRegistration(
                canonical_model_id="llama",
                target=pb.ModelTarget(base=pb.BaseModelTarget(base_model="llama")),
                aliases=["chat"],
            )
        ],
        query_semantics=pb.KvQuerySemantics(
            kv_block_size=16, hash_format=pb.KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1
        ),
        pool_roles=[pb.WORKER_ROLE_AGGREGATED],
    )
    return pb.KvPoolCatalogUpdate(
        protocol_version=1,
        relay=r.relay_identity_to_wire(RELAY),
        revision=3,
        snapshot=pb.KvPoolCatalogSnapshot(pools=[desc]),
        contract_marker=0x4B565231,
    )


def test_catalog_validation() -> None:
    r.validate_catalog_update(_catalog())
    bad = _catalog()
    bad.snapshot.pools[0].query_semantics.kv_block_size = 0
    with raises_variant(
        RelayWireError, "Descriptor", match=r"pools\[0\]\.query_semantics\.kv_block_size"
    ):
        r.validate_catalog_update(bad)
    bad = _catalog()
    bad.snapshot.pools[0].pool_roles.append(pb.WORKER_ROLE_AGGREGATED)
    with raises_variant(RelayWireError, "Descriptor", match=r"pool_roles\[1\]"):
        r.validate_catalog_update(bad)
    bad = _catalog()
    bad.snapshot.pools[0].producer.layout_generation = 0
    with raises_variant(
        RelayWireError, "LayoutGeneration", match=r"pools\[0\]\.producer\.layout_generation"
    ):
        r.validate_catalog_update(bad)
    bad = _catalog()
    bad.snapshot.pools[0].registrations[0].aliases.append("chat")
    with raises_variant(RelayWireError, "Descriptor", match=r"aliases\[1\]"):
        r.validate_catalog_update(bad)


def test_catalog_converts_to_native_and_back() -> None:
    """A catalog update validates, converts to native descriptors and back byte for byte; a
    descriptor serves its canonical model and its aliases; LoRA targets survive."""
    wire = _catalog()
    lora = wire.snapshot.pools.add()
    lora.CopyFrom(wire.snapshot.pools[0])
    lora.producer.pool_id.dc_id = 5
    lora.registrations[0].canonical_model_id = "tenant-a"
    lora.registrations[0].target.lora.base_model = "llama"
    lora.registrations[0].target.lora.adapter = "tenant-a"
    lora.pool_roles[:] = [pb.WORKER_ROLE_PREFILL, pb.WORKER_ROLE_DECODE]
    lora.query_semantics.hash_format = pb.KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1
    catalog = r.catalog_from_wire(wire)
    assert catalog.relay == RELAY and catalog.revision == 3
    base, adapter = catalog.pools
    assert base.producer == producer() and base.serving_endpoint == ("ns", "c", "generate")
    assert base.serves("llama") and base.serves("chat") and not base.serves("tenant-a")
    assert adapter.registrations[0].lora_name == "tenant-a"
    assert adapter.roles == ("PREFILL", "DECODE")
    assert adapter.query_semantics.hash_format.is_eagle
    assert r.catalog_to_wire(catalog).SerializeToString(deterministic=True) == (
        wire.SerializeToString(deterministic=True)
    )
    bad = _catalog()
    bad.snapshot.pools[0].serving_endpoint.namespace = " ns"
    with raises_variant(RelayWireError, "Descriptor", match=r"pools\[0\]\.serving_endpoint"):
        r.catalog_from_wire(bad)


def test_subscribe_request_and_relay_info() -> None:
    req = pb.SubscribeKvPoolRequest(
        subscriber_id="gv-1",
        expected_producer=r.producer_to_wire(producer()),
        contract_marker=0x4B565231,
    )
    r.validate_subscribe_request(req)
    for sid in ("", "x" * 129, "a\nb"):
        req.subscriber_id = sid
        with raises_variant(RelayWireError, "SubscriberId"):
            r.validate_subscribe_request(req)
    r.validate_relay_info(
        pb.RelayInfo(
            protocol_version=1, relay=r.relay_identity_to_wire(RELAY), contract_marker=0x4B565231
        )
    )
    with raises_variant(RelayWireError, "ProtocolVersion", match=r"RelayInfo\.protocol_version"):
        r.validate_relay_info(pb.RelayInfo(protocol_version=2, contract_marker=0x4B565231))


def test_producer_model_frames_convert_to_protobuf_and_back() -> None:
    """A frame built from the CKF producer's identity (a real PoolId) crosses the wire intact."""
    from cbi1kit.ckf._producer import CkfConfig, DcCkfPublisher, DcCkfState, KvStored, StoredBlock
    from cbi1kit.hashing._identity import LaneLease
    from cbi1kit.relay._publication import encode_delta_publication

    state = DcCkfState(CkfConfig(64, seed=0x5EED))
    ident = ProducerIdentity(producer().pool_id, 3, 1, state.format)
    pub = DcCkfPublisher(ident, lease=LaneLease(1, 0, 1))
    batch = state.apply(KvStored(1, (StoredBlock(10, 100), StoredBlock(11, 101)))).batch
    assert batch is not None
    delta = pub.publish(batch)
    assert delta is not None
    frame = encode_delta_publication(delta)
    update = r.filter_update_from_frame(frame, RELAY, send_ts_us=1)
    r.validate_filter_update(update)
    back = r.frame_from_filter_update(update)
    assert back == frame and back.identity == ident
    assert r.producer_from_wire(r.producer_to_wire(ident)) == ident


@pytest.mark.parametrize("sid", ["", "x" * 119, "é" * 60, "a\tb", "line\nbreak", "\x7f", "ok\x85"])
def test_a_base_subscriber_id_upstream_refuses_is_refused(sid: str) -> None:
    """Upstream's consumer (coordinator.rs, 0092138f): 1-118 UTF-8 bytes, no control
    character; the recorder refuses such an id before connecting, and the CLI says so (exit 2)."""
    from cbi1kit.relay._messages import validate_base_subscriber_id
    from cbi1kit.relay._session import RecorderConfig

    with raises_variant(RelayWireError, "SubscriberId"):
        validate_base_subscriber_id(sid)
    with raises_variant(RelayWireError, "SubscriberId"):
        RecorderConfig("127.0.0.1:1", Path("unused.kvrcap"), subscriber_id=sid)


@pytest.mark.parametrize("sid", ["g", "x" * 118, "é" * 59, "global view/dc-1 #2"])
def test_a_base_subscriber_id_upstream_takes_is_taken(sid: str) -> None:
    from cbi1kit.relay._messages import validate_base_subscriber_id

    validate_base_subscriber_id(sid)


def test_record_refuses_a_subscriber_id_upstream_would_refuse(tmp_path: Path) -> None:
    from cliutil import cli_run, one_line

    out = tmp_path / "c.kvrcap"
    code, _, err = cli_run("record", "127.0.0.1:1", "-o", str(out), "--subscriber-id", "a\tb")
    assert code == 2 and one_line(err) and "--subscriber-id" in err and "1-118 bytes" in err
    assert not out.exists()

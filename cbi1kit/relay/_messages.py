"""``dynamo.kvrelay.v1`` wire validation and conversion to native identity types.

Proto3 messages are permissive, so a consumer re-checks the contract: upstream's
``wan/grpc/protocol/wire/identity.rs`` rules and the Global View consumer's per-kind envelope
rules (relay.md §1.3, §3.1). Errors are :class:`RelayWireError` subclasses naming the field by
its dotted protobuf path (``FilterUpdate.producer.ckf_format.seed``). Native identity types are
:mod:`cbi1kit.hashing`'s (relay.md §1.2); conversion validates first, so results are executable.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.errors import RelayWireError, RelayWireVariant
from cbi1kit.hashing._formats import KvQueryHashFormat, KvQuerySemantics
from cbi1kit.hashing._identity import DcCkfFormatIdentity, ProducerIdentity, RelayIdentity
from cbi1kit.hashing._models import CanonicalModelRegistration, ModelTarget
from cbi1kit.hashing._pools import (
    CacheSemanticsId,
    DcId,
    IdentitySource,
    IndexerDomainId,
    PoolId,
    RoutingScopeId,
)
from cbi1kit.wire._format import (
    FINGERPRINT_BITS,
    FORMAT_VERSION,
    MAX_BUCKET_COUNT,
    SLOTS_PER_BUCKET,
    U64_MAX,
)

if TYPE_CHECKING:
    from cbi1kit.relay._publication import PublicationFrame

RELAY_CONTRACT_MARKER: Final = 0x4B565231  # "KVR1"
#: Trailer naming the ``RelayErrorReason`` of a failed relay RPC (upstream ``protocol.rs``).
ERROR_REASON_TRAILER: Final = "kv-relay-error-reason"
#: Upstream ``max_message_bytes`` default; clients need the same receive limit.
MAX_MESSAGE_BYTES: Final = 8 * 1024 * 1024
RELAY_PROTOCOL_VERSION: Final = 1
POOL_IDENTITY_VERSION: Final = 1
DIGEST_LEN: Final = 16
# The CKF format the relay carries is CBI1's: one set of constants, in _format.
CKF_FORMAT_VERSION: Final = FORMAT_VERSION
CKF_FINGERPRINT_BITS: Final = FINGERPRINT_BITS
CKF_SLOTS_PER_BUCKET: Final = SLOTS_PER_BUCKET
_U64_MAX: Final = U64_MAX
#: The update kinds that leave the sequence where it is (base_sequence == sequence), as the
#: errors name them.
_UNSTEPPED: Final = {
    pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK: "snapshot chunk",
    pb.FILTER_UPDATE_KIND_HEARTBEAT: "heartbeat",
}
_SOURCES: Final = frozenset(s.proto_value for s in IdentitySource)


# --------------------------------------------------------------------------------------------
# validation


def _validate_marker(contract_marker: int, path: str) -> None:
    if contract_marker != RELAY_CONTRACT_MARKER:
        raise RelayWireError(
            RelayWireVariant.ContractMarker,
            f"{path}.contract_marker",
            expected=RELAY_CONTRACT_MARKER,
            actual=contract_marker,
        )


def validate_envelope(protocol_version: int, contract_marker: int, *, path: str) -> None:
    """Marker first, then version, as upstream's ``validate_protocol_envelope`` does."""
    _validate_marker(contract_marker, path)
    if protocol_version != RELAY_PROTOCOL_VERSION:
        raise RelayWireError(
            RelayWireVariant.ProtocolVersion,
            f"{path}.protocol_version",
            expected=RELAY_PROTOCOL_VERSION,
            actual=protocol_version,
        )


def _require(message: Any, name: str, path: str) -> Any:
    if not message.HasField(name):
        raise RelayWireError(RelayWireVariant.MissingField, f"{path}.{name}")
    return getattr(message, name)


def _validate_digest(parent: pb.IndexerDomainId, name: str, path: str) -> None:
    digest = _require(parent, name, path)
    if len(digest.digest) != DIGEST_LEN:
        raise RelayWireError(
            RelayWireVariant.DigestLength,
            f"{path}.{name}.digest",
            expected=DIGEST_LEN,
            actual=len(digest.digest),
        )
    if digest.source not in _SOURCES:
        raise RelayWireError(
            RelayWireVariant.IdentitySource,
            f"{path}.{name}.source",
            subvariant=_unknown(digest.source),
            expected="1 or 2",
            actual=digest.source,
        )


def _unknown(value: int) -> str | None:
    """``Unsupported`` for a value that is set but unknown (upstream's ``is_unsupported``: the
    pool is quarantined), None for 0, which is missing (malformed)."""
    return "Unsupported" if value else None


def validate_pool_id(pool_id: pb.KvPoolId, *, path: str = "KvPoolId") -> None:
    if pool_id.identity_version != POOL_IDENTITY_VERSION:
        raise RelayWireError(
            RelayWireVariant.PoolIdentityVersion,
            f"{path}.identity_version",
            subvariant=_unknown(pool_id.identity_version),
            expected=POOL_IDENTITY_VERSION,
            actual=pool_id.identity_version,
        )
    domain = _require(pool_id, "indexer_domain", path)
    _validate_digest(domain, "cache_semantics", f"{path}.indexer_domain")
    _validate_digest(domain, "routing_scope", f"{path}.indexer_domain")


def validate_ckf_format(fmt: pb.CkfFormat, *, path: str = "CkfFormat") -> None:
    """Only the executable CBI1 shape ``(1, seed, 2^k ≤ 2^24, 16, 4)`` is accepted, checked in
    upstream's order (``wan/grpc/protocol/wire/identity.rs`` · ``validate_ckf_format``, 7216a153):
    a zero field first, then the version, width and slots, then a bucket count too large
    (unsupported: the pool is quarantined), then one that is no power of two (malformed)."""
    for name in ("format_version", "bucket_count", "fingerprint_bits", "slots_per_bucket"):
        if getattr(fmt, name) == 0:
            raise RelayWireError(RelayWireVariant.ZeroFormatField, f"{path}.{name}", actual=0)
    for name, want in (
        ("format_version", CKF_FORMAT_VERSION),
        ("fingerprint_bits", CKF_FINGERPRINT_BITS),
        ("slots_per_bucket", CKF_SLOTS_PER_BUCKET),
    ):
        got = getattr(fmt, name)
        if got != want:
            raise RelayWireError(
                RelayWireVariant.UnsupportedCkfFormat,
                f"{path}.{name}",
                expected=want,
                actual=got,
                format_version=fmt.format_version,
                fingerprint_bits=fmt.fingerprint_bits,
                slots_per_bucket=fmt.slots_per_bucket,
            )
    count = fmt.bucket_count
    if count > MAX_BUCKET_COUNT:
        raise RelayWireError(
            RelayWireVariant.BucketCountTooLarge, f"{path}.bucket_count", actual=count
        )
    if count < 2 or count & (count - 1):
        raise RelayWireError(RelayWireVariant.BucketCount, f"{path}.bucket_count", actual=count)


#: a base subscriber id's most bytes: the relay's 128 less the longest suffix a consumer adds
#: (``/readiness``) (``global_view_consumer/coordinator.rs`` · run_relay_view_publishing, 0092138f)
BASE_SUBSCRIBER_ID_BYTES: Final = 118


def validate_base_subscriber_id(sid: str, *, path: str = "subscriber_id") -> None:
    """A consumer's base subscriber id: 1-118 UTF-8 bytes with no control character."""
    if not 1 <= len(sid.encode()) <= BASE_SUBSCRIBER_ID_BYTES or any(
        unicodedata.category(ch) == "Cc" for ch in sid
    ):
        raise RelayWireError(
            RelayWireVariant.SubscriberId,
            path,
            actual=sid,
            detail=f"a base subscriber id is 1-{BASE_SUBSCRIBER_ID_BYTES} bytes without "
            "control characters",
        )


def validate_producer_identity(
    identity: pb.ProducerIdentity, *, path: str = "ProducerIdentity"
) -> None:
    validate_pool_id(_require(identity, "pool_id", path), path=f"{path}.pool_id")
    if identity.layout_generation == 0:
        raise RelayWireError(
            RelayWireVariant.LayoutGeneration, f"{path}.layout_generation", actual=0
        )
    validate_ckf_format(_require(identity, "ckf_format", path), path=f"{path}.ckf_format")


def validate_filter_update(update: pb.FilterUpdate) -> None:
    """Raise on the first contract violation of one ``FilterUpdate`` taken on its own.

    Per kind (relay.md §1.1, §2.4, §3.1), in the rulebook's order (:data:`cbi1kit.wire.RULES`,
    upstream ``stream.rs``): envelope, producer, relay, kind, then the kind's rules (a delta's
    sequence rule, the lane ingestor's, ranks after its payload's decode). Stream rules: replay.
    """
    path = "FilterUpdate"
    validate_envelope(update.protocol_version, update.contract_marker, path=path)
    validate_producer_identity(_require(update, "producer", path), path=f"{path}.producer")
    _require(update, "relay", path)
    kind = update.kind
    base, seq = update.base_sequence, update.sequence
    if kind in _UNSTEPPED:
        if base != seq:
            raise RelayWireError(
                RelayWireVariant.Sequence,
                f"{path}.base_sequence",
                detail=f"a {_UNSTEPPED[kind]} needs base_sequence == sequence, got {base} != {seq}",
            )
    elif kind == pb.FILTER_UPDATE_KIND_DELTA:
        # an empty chunk or delta payload is upstream's CBI1 ``Truncated``, from decode
        if base == _U64_MAX or seq != base + 1:
            raise RelayWireError(
                RelayWireVariant.Sequence,
                f"{path}.sequence",
                detail=f"a delta needs sequence == base_sequence + 1, got {base} -> {seq}",
            )
    else:
        raise RelayWireError(RelayWireVariant.UpdateKind, f"{path}.kind", actual=kind)
    if kind == pb.FILTER_UPDATE_KIND_HEARTBEAT and update.payload:
        raise RelayWireError(
            RelayWireVariant.Payload,
            f"{path}.payload",
            detail=f"a heartbeat has an empty payload, got {len(update.payload)} bytes",
        )


def check_filter_update(update: pb.FilterUpdate) -> RelayWireError | None:
    """The first violation as a value (``None`` if valid), for table columns and reports."""
    try:
        validate_filter_update(update)
    except RelayWireError as err:
        return err
    return None


def validate_relay_info(info: pb.RelayInfo) -> None:
    validate_envelope(info.protocol_version, info.contract_marker, path="RelayInfo")
    _require(info, "relay", "RelayInfo")


def _validate_text(value: str, path: str) -> None:
    if not value or value.strip() != value:
        raise RelayWireError(
            RelayWireVariant.Descriptor,
            path,
            detail=f"empty or surrounded by whitespace: {value!r}",
        )


def _validate_roles(roles: Any, path: str) -> None:
    if not roles:
        raise RelayWireError(
            RelayWireVariant.Descriptor, path, detail="worker-role set must not be empty"
        )
    seen: set[int] = set()
    for i, role in enumerate(roles):
        if role not in pb.WorkerRole.values() or role == pb.WORKER_ROLE_UNSPECIFIED:
            raise RelayWireError(
                RelayWireVariant.Descriptor,
                f"{path}[{i}]",
                detail=f"unsupported worker role {role}",
            )
        if role in seen:
            raise RelayWireError(
                RelayWireVariant.Descriptor, f"{path}[{i}]", detail=f"worker role {role} repeated"
            )
        seen.add(role)


def _validate_descriptor(desc: pb.KvPoolDescriptor, path: str) -> None:
    validate_producer_identity(_require(desc, "producer", path), path=f"{path}.producer")
    endpoint = _require(desc, "serving_endpoint", path)
    for name in ("namespace", "component", "endpoint"):
        _validate_text(getattr(endpoint, name), f"{path}.serving_endpoint.{name}")
    semantics = _require(desc, "query_semantics", path)
    if semantics.kv_block_size == 0:
        raise RelayWireError(
            RelayWireVariant.Descriptor,
            f"{path}.query_semantics.kv_block_size",
            detail="must be nonzero",
        )
    if semantics.hash_format not in (1, 2):
        raise RelayWireError(
            RelayWireVariant.Descriptor,
            f"{path}.query_semantics.hash_format",
            detail=f"unsupported KV query hash format {semantics.hash_format}",
        )
    for i, reg in enumerate(desc.registrations):
        rpath = f"{path}.registrations[{i}]"
        _validate_text(reg.canonical_model_id, f"{rpath}.canonical_model_id")
        target = _require(reg, "target", rpath)
        which = target.WhichOneof("target")
        if which is None:
            raise RelayWireError(
                RelayWireVariant.Descriptor,
                f"{rpath}.target",
                detail="model target is missing or unknown",
            )
        if which == "base":
            _validate_text(target.base.base_model, f"{rpath}.target.base.base_model")
        else:
            _validate_text(target.lora.base_model, f"{rpath}.target.lora.base_model")
            _validate_text(target.lora.adapter, f"{rpath}.target.lora.adapter")
        aliases: set[str] = set()
        for j, alias in enumerate(reg.aliases):
            _validate_text(alias, f"{rpath}.aliases[{j}]")
            if alias in aliases:
                raise RelayWireError(
                    RelayWireVariant.Descriptor,
                    f"{rpath}.aliases[{j}]",
                    detail=f"alias {alias!r} repeated",
                )
            aliases.add(alias)
    _validate_roles(desc.pool_roles, f"{path}.pool_roles")


def validate_catalog_update(update: pb.KvPoolCatalogUpdate) -> None:
    """Envelope plus every pool descriptor (producer key, endpoint, semantics, registrations)."""
    path = "KvPoolCatalogUpdate"
    validate_envelope(update.protocol_version, update.contract_marker, path=path)
    _require(update, "relay", path)
    snapshot = _require(update, "snapshot", path)
    for i, desc in enumerate(snapshot.pools):
        _validate_descriptor(desc, f"{path}.snapshot.pools[{i}]")


def validate_subscribe_request(request: pb.SubscribeKvPoolRequest) -> None:
    path = "SubscribeKvPoolRequest"
    _validate_marker(request.contract_marker, path)
    sid = request.subscriber_id
    if not 1 <= len(sid.encode()) <= 128 or any(ch.isprintable() is False for ch in sid):
        raise RelayWireError(RelayWireVariant.SubscriberId, f"{path}.subscriber_id", actual=sid)
    validate_producer_identity(
        _require(request, "expected_producer", path), path=f"{path}.expected_producer"
    )


# --------------------------------------------------------------------------------------------
# conversion


def producer_key(identity: pb.ProducerIdentity) -> tuple[Any, ...]:
    """The frozen v1 ``ProducerKey``: every identity field, recursively (relay.md §1.3)."""
    pool, fmt = identity.pool_id, identity.ckf_format
    cs, rs = pool.indexer_domain.cache_semantics, pool.indexer_domain.routing_scope
    return (
        pool.identity_version,
        (bytes(cs.digest), cs.source),
        (bytes(rs.digest), rs.source),
        pool.dc_id,
        identity.producer_incarnation,
        identity.layout_generation,
        (
            fmt.format_version,
            fmt.seed,
            fmt.bucket_count,
            fmt.fingerprint_bits,
            fmt.slots_per_bucket,
        ),
    )


def relay_identity_to_wire(relay: RelayIdentity) -> pb.RelayIdentity:
    return pb.RelayIdentity(
        drt_instance_id=relay.drt_instance_id, relay_incarnation=relay.relay_incarnation
    )


def relay_identity_from_wire(relay: pb.RelayIdentity) -> RelayIdentity:
    return RelayIdentity(relay.drt_instance_id, relay.relay_incarnation)


def pool_id_to_wire(pool_id: PoolId) -> pb.KvPoolId:
    domain = pool_id.indexer_domain
    return pb.KvPoolId(
        identity_version=POOL_IDENTITY_VERSION,
        indexer_domain=pb.IndexerDomainId(
            cache_semantics=pb.DigestIdentity(
                digest=domain.cache_semantics.digest,
                source=domain.cache_semantics.source.proto_value,  # type: ignore[arg-type]
            ),
            routing_scope=pb.DigestIdentity(
                digest=domain.routing_scope.digest,
                source=domain.routing_scope.source.proto_value,  # type: ignore[arg-type]
            ),
        ),
        dc_id=pool_id.dc_id.value,
    )


def pool_id_from_wire(pool_id: pb.KvPoolId, *, path: str = "KvPoolId") -> PoolId:
    """Validate, then convert; the inverse of :func:`pool_id_to_wire`."""
    validate_pool_id(pool_id, path=path)
    domain = pool_id.indexer_domain
    return PoolId(
        IndexerDomainId(
            CacheSemanticsId(
                bytes(domain.cache_semantics.digest),
                IdentitySource.from_proto(domain.cache_semantics.source),
            ),
            RoutingScopeId(
                bytes(domain.routing_scope.digest),
                IdentitySource.from_proto(domain.routing_scope.source),
            ),
        ),
        DcId(pool_id.dc_id),
    )


def format_to_wire(fmt: DcCkfFormatIdentity) -> pb.CkfFormat:
    return pb.CkfFormat(
        format_version=fmt.format_version,
        seed=fmt.seed,
        bucket_count=fmt.bucket_count,
        fingerprint_bits=fmt.fingerprint_bits,
        slots_per_bucket=fmt.slots_per_bucket,
    )


def format_from_wire(fmt: pb.CkfFormat, *, path: str = "CkfFormat") -> DcCkfFormatIdentity:
    validate_ckf_format(fmt, path=path)
    return DcCkfFormatIdentity(
        seed=fmt.seed,
        bucket_count=fmt.bucket_count,
        format_version=fmt.format_version,
        fingerprint_bits=fmt.fingerprint_bits,
        slots_per_bucket=fmt.slots_per_bucket,
    )


def producer_to_wire(identity: ProducerIdentity) -> pb.ProducerIdentity:
    return pb.ProducerIdentity(
        pool_id=pool_id_to_wire(identity.pool_id),
        producer_incarnation=identity.producer_incarnation,
        layout_generation=identity.layout_generation,
        ckf_format=format_to_wire(identity.format),
    )


def producer_from_wire(
    identity: pb.ProducerIdentity, *, path: str = "ProducerIdentity"
) -> ProducerIdentity:
    """Validate the whole key (relay.md §1.3), then convert; rejects what upstream rejects."""
    validate_producer_identity(identity, path=path)
    return ProducerIdentity(
        pool_id=pool_id_from_wire(identity.pool_id, path=f"{path}.pool_id"),
        producer_incarnation=identity.producer_incarnation,
        layout_generation=identity.layout_generation,
        format=format_from_wire(identity.ckf_format, path=f"{path}.ckf_format"),
    )


@dataclass(frozen=True, slots=True)
class PoolDescriptor:
    """One pool of a relay's catalog (``KvPoolDescriptor``): its producer generation, the
    endpoint serving it, the models it registers, its query semantics and its worker roles
    (upstream's variant names: ``AGGREGATED``, ``PREFILL``, ...)."""

    producer: ProducerIdentity
    serving_endpoint: tuple[str, str, str]
    registrations: tuple[CanonicalModelRegistration, ...]
    query_semantics: KvQuerySemantics
    roles: tuple[str, ...] = ("AGGREGATED",)

    def serves(self, model: str) -> bool:
        """A request naming ``model`` (canonical id or alias) resolves to this pool."""
        return any(r.matches(model) for r in self.registrations)


@dataclass(frozen=True, slots=True)
class PoolCatalog:
    """A complete ``KvPoolCatalogUpdate``: every pool the relay advertises at ``revision``."""

    relay: RelayIdentity
    revision: int
    pools: tuple[PoolDescriptor, ...]


def _registration_to_wire(reg: CanonicalModelRegistration) -> pb.ModelRegistration:
    target = reg.target
    if target.adapter is None:
        wire = pb.ModelTarget(base=pb.BaseModelTarget(base_model=target.base_model.value))
    else:
        wire = pb.ModelTarget(
            lora=pb.LoraModelTarget(
                base_model=target.base_model.value, adapter=target.adapter.value
            )
        )
    return pb.ModelRegistration(
        canonical_model_id=reg.model.value, target=wire, aliases=[a.value for a in reg.aliases]
    )


def _registration_from_wire(reg: pb.ModelRegistration) -> CanonicalModelRegistration:
    target = reg.target
    if target.WhichOneof("target") == "lora":
        native = ModelTarget.lora(target.lora.base_model, target.lora.adapter)
    else:
        native = ModelTarget.base(target.base.base_model)
    return CanonicalModelRegistration.with_target(reg.canonical_model_id, native, reg.aliases)


def descriptor_to_wire(desc: PoolDescriptor) -> pb.KvPoolDescriptor:
    namespace, component, endpoint = desc.serving_endpoint
    return pb.KvPoolDescriptor(
        producer=producer_to_wire(desc.producer),
        serving_endpoint=pb.DynamoEndpointId(
            namespace=namespace, component=component, endpoint=endpoint
        ),
        registrations=[_registration_to_wire(r) for r in desc.registrations],
        query_semantics=pb.KvQuerySemantics(
            kv_block_size=desc.query_semantics.kv_block_size,
            hash_format=desc.query_semantics.hash_format.identity_version,  # type: ignore[arg-type]
        ),
        pool_roles=[pb.WorkerRole.Value(f"WORKER_ROLE_{r}") for r in desc.roles],  # type: ignore[misc]
    )


def descriptor_from_wire(
    desc: pb.KvPoolDescriptor, *, path: str = "KvPoolDescriptor"
) -> PoolDescriptor:
    """Validate the descriptor as the contract does, then convert."""
    _validate_descriptor(desc, path)
    ep, sem = desc.serving_endpoint, desc.query_semantics
    return PoolDescriptor(
        producer_from_wire(desc.producer, path=f"{path}.producer"),
        (ep.namespace, ep.component, ep.endpoint),
        tuple(_registration_from_wire(r) for r in desc.registrations),
        KvQuerySemantics(sem.kv_block_size, KvQueryHashFormat(sem.hash_format)),
        tuple(pb.WorkerRole.Name(r).removeprefix("WORKER_ROLE_") for r in desc.pool_roles),
    )


def catalog_to_wire(catalog: PoolCatalog) -> pb.KvPoolCatalogUpdate:
    return pb.KvPoolCatalogUpdate(
        protocol_version=RELAY_PROTOCOL_VERSION,
        relay=relay_identity_to_wire(catalog.relay),
        revision=catalog.revision,
        snapshot=pb.KvPoolCatalogSnapshot(pools=[descriptor_to_wire(d) for d in catalog.pools]),
        contract_marker=RELAY_CONTRACT_MARKER,
    )


def catalog_from_wire(update: pb.KvPoolCatalogUpdate) -> PoolCatalog:
    """Validate the whole update (:func:`validate_catalog_update`), then convert."""
    validate_catalog_update(update)
    path = "KvPoolCatalogUpdate.snapshot.pools"
    return PoolCatalog(
        relay_identity_from_wire(update.relay),
        update.revision,
        tuple(
            descriptor_from_wire(d, path=f"{path}[{i}]")
            for i, d in enumerate(update.snapshot.pools)
        ),
    )


def filter_update_from_frame(
    frame: PublicationFrame,
    relay: RelayIdentity,
    *,
    send_ts_us: int,
    producer: pb.ProducerIdentity | None = None,
    payload: bytes | None = None,
) -> pb.FilterUpdate:
    """What upstream's gRPC driver sends for one publication frame (payload not re-encoded).

    ``producer`` passes an already converted wire identity (a server sends the same one for
    every frame); ``payload`` replaces the frame's bytes (fault injection in tests).
    """
    from cbi1kit.relay._publication import PublicationFrameKind

    kind = (
        pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
        if frame.kind is PublicationFrameKind.SNAPSHOT_CHUNK
        else pb.FILTER_UPDATE_KIND_DELTA
    )
    return pb.FilterUpdate(
        protocol_version=RELAY_PROTOCOL_VERSION,
        relay=relay_identity_to_wire(relay),
        producer=producer_to_wire(frame.identity) if producer is None else producer,
        base_sequence=frame.base_sequence,
        sequence=frame.sequence,
        send_ts_us=send_ts_us,
        kind=kind,
        payload=frame.payload if payload is None else payload,
        contract_marker=RELAY_CONTRACT_MARKER,
    )


def heartbeat_update(
    identity: ProducerIdentity, sequence: int, relay: RelayIdentity, *, send_ts_us: int
) -> pb.FilterUpdate:
    """A driver-synthesised heartbeat: same envelope, ``base == sequence``, empty payload."""
    return pb.FilterUpdate(
        protocol_version=RELAY_PROTOCOL_VERSION,
        relay=relay_identity_to_wire(relay),
        producer=producer_to_wire(identity),
        base_sequence=sequence,
        sequence=sequence,
        send_ts_us=send_ts_us,
        kind=pb.FILTER_UPDATE_KIND_HEARTBEAT,
        contract_marker=RELAY_CONTRACT_MARKER,
    )


def frame_from_filter_update(update: pb.FilterUpdate) -> PublicationFrame | None:
    """Validate and convert back to a publication frame; ``None`` for a (valid) heartbeat."""
    from cbi1kit.relay._publication import PublicationFrame, PublicationFrameKind

    validate_filter_update(update)
    if update.kind == pb.FILTER_UPDATE_KIND_HEARTBEAT:
        return None
    kind = (
        PublicationFrameKind.SNAPSHOT_CHUNK
        if update.kind == pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
        else PublicationFrameKind.DELTA
    )
    return PublicationFrame(
        identity=producer_from_wire(update.producer, path="FilterUpdate.producer"),
        base_sequence=update.base_sequence,
        sequence=update.sequence,
        kind=kind,
        payload=bytes(update.payload),
    )

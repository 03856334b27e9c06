# mypy: disable-error-code="type-arg"
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RelayErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RELAY_ERROR_REASON_UNSPECIFIED: _ClassVar[RelayErrorReason]
    RELAY_ERROR_REASON_CONTRACT_MISMATCH: _ClassVar[RelayErrorReason]
    RELAY_ERROR_REASON_INVALID_REQUEST: _ClassVar[RelayErrorReason]
    RELAY_ERROR_REASON_UNSUPPORTED_FEATURE: _ClassVar[RelayErrorReason]
    RELAY_ERROR_REASON_POOL_NOT_FOUND: _ClassVar[RelayErrorReason]
    RELAY_ERROR_REASON_PRODUCER_CHANGED: _ClassVar[RelayErrorReason]
    RELAY_ERROR_REASON_RESOURCE_LIMIT: _ClassVar[RelayErrorReason]
    RELAY_ERROR_REASON_SUBSCRIBER_LAGGED: _ClassVar[RelayErrorReason]
    RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT: _ClassVar[RelayErrorReason]
    RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE: _ClassVar[RelayErrorReason]
    RELAY_ERROR_REASON_INVALID_PUBLICATION: _ClassVar[RelayErrorReason]
    RELAY_ERROR_REASON_INTERNAL: _ClassVar[RelayErrorReason]

class IdentitySource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IDENTITY_SOURCE_UNSPECIFIED: _ClassVar[IdentitySource]
    IDENTITY_SOURCE_DEFAULT_DERIVED: _ClassVar[IdentitySource]
    IDENTITY_SOURCE_EXPLICIT: _ClassVar[IdentitySource]

class FilterUpdateKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILTER_UPDATE_KIND_UNSPECIFIED: _ClassVar[FilterUpdateKind]
    FILTER_UPDATE_KIND_SNAPSHOT_CHUNK: _ClassVar[FilterUpdateKind]
    FILTER_UPDATE_KIND_DELTA: _ClassVar[FilterUpdateKind]
    FILTER_UPDATE_KIND_HEARTBEAT: _ClassVar[FilterUpdateKind]

class WorkerRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKER_ROLE_UNSPECIFIED: _ClassVar[WorkerRole]
    WORKER_ROLE_PREFILL: _ClassVar[WorkerRole]
    WORKER_ROLE_DECODE: _ClassVar[WorkerRole]
    WORKER_ROLE_ENCODE: _ClassVar[WorkerRole]
    WORKER_ROLE_AGGREGATED: _ClassVar[WorkerRole]
    WORKER_ROLE_LEGACY: _ClassVar[WorkerRole]

class KvQueryHashFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KV_QUERY_HASH_FORMAT_UNSPECIFIED: _ClassVar[KvQueryHashFormat]
    KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1: _ClassVar[KvQueryHashFormat]
    KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1: _ClassVar[KvQueryHashFormat]
RELAY_ERROR_REASON_UNSPECIFIED: RelayErrorReason
RELAY_ERROR_REASON_CONTRACT_MISMATCH: RelayErrorReason
RELAY_ERROR_REASON_INVALID_REQUEST: RelayErrorReason
RELAY_ERROR_REASON_UNSUPPORTED_FEATURE: RelayErrorReason
RELAY_ERROR_REASON_POOL_NOT_FOUND: RelayErrorReason
RELAY_ERROR_REASON_PRODUCER_CHANGED: RelayErrorReason
RELAY_ERROR_REASON_RESOURCE_LIMIT: RelayErrorReason
RELAY_ERROR_REASON_SUBSCRIBER_LAGGED: RelayErrorReason
RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT: RelayErrorReason
RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE: RelayErrorReason
RELAY_ERROR_REASON_INVALID_PUBLICATION: RelayErrorReason
RELAY_ERROR_REASON_INTERNAL: RelayErrorReason
IDENTITY_SOURCE_UNSPECIFIED: IdentitySource
IDENTITY_SOURCE_DEFAULT_DERIVED: IdentitySource
IDENTITY_SOURCE_EXPLICIT: IdentitySource
FILTER_UPDATE_KIND_UNSPECIFIED: FilterUpdateKind
FILTER_UPDATE_KIND_SNAPSHOT_CHUNK: FilterUpdateKind
FILTER_UPDATE_KIND_DELTA: FilterUpdateKind
FILTER_UPDATE_KIND_HEARTBEAT: FilterUpdateKind
WORKER_ROLE_UNSPECIFIED: WorkerRole
WORKER_ROLE_PREFILL: WorkerRole
WORKER_ROLE_DECODE: WorkerRole
WORKER_ROLE_ENCODE: WorkerRole
WORKER_ROLE_AGGREGATED: WorkerRole
WORKER_ROLE_LEGACY: WorkerRole
KV_QUERY_HASH_FORMAT_UNSPECIFIED: KvQueryHashFormat
KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1: KvQueryHashFormat
KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1: KvQueryHashFormat

class RelayIdentity(_message.Message):
    __slots__ = ("drt_instance_id", "relay_incarnation")
    DRT_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    RELAY_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    drt_instance_id: int
    relay_incarnation: int
    def __init__(self, drt_instance_id: _Optional[int] = ..., relay_incarnation: _Optional[int] = ...) -> None: ...

class DigestIdentity(_message.Message):
    __slots__ = ("digest", "source")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    digest: bytes
    source: IdentitySource
    def __init__(self, digest: _Optional[bytes] = ..., source: _Optional[_Union[IdentitySource, str]] = ...) -> None: ...

class IndexerDomainId(_message.Message):
    __slots__ = ("cache_semantics", "routing_scope")
    CACHE_SEMANTICS_FIELD_NUMBER: _ClassVar[int]
    ROUTING_SCOPE_FIELD_NUMBER: _ClassVar[int]
    cache_semantics: DigestIdentity
    routing_scope: DigestIdentity
    def __init__(self, cache_semantics: _Optional[_Union[DigestIdentity, _Mapping]] = ..., routing_scope: _Optional[_Union[DigestIdentity, _Mapping]] = ...) -> None: ...

class KvPoolId(_message.Message):
    __slots__ = ("identity_version", "indexer_domain", "dc_id")
    IDENTITY_VERSION_FIELD_NUMBER: _ClassVar[int]
    INDEXER_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    DC_ID_FIELD_NUMBER: _ClassVar[int]
    identity_version: int
    indexer_domain: IndexerDomainId
    dc_id: int
    def __init__(self, identity_version: _Optional[int] = ..., indexer_domain: _Optional[_Union[IndexerDomainId, _Mapping]] = ..., dc_id: _Optional[int] = ...) -> None: ...

class CkfFormat(_message.Message):
    __slots__ = ("format_version", "seed", "bucket_count", "fingerprint_bits", "slots_per_bucket")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    BUCKET_COUNT_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_BITS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_PER_BUCKET_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    seed: int
    bucket_count: int
    fingerprint_bits: int
    slots_per_bucket: int
    def __init__(self, format_version: _Optional[int] = ..., seed: _Optional[int] = ..., bucket_count: _Optional[int] = ..., fingerprint_bits: _Optional[int] = ..., slots_per_bucket: _Optional[int] = ...) -> None: ...

class ProducerIdentity(_message.Message):
    __slots__ = ("pool_id", "producer_incarnation", "layout_generation", "ckf_format")
    POOL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CKF_FORMAT_FIELD_NUMBER: _ClassVar[int]
    pool_id: KvPoolId
    producer_incarnation: int
    layout_generation: int
    ckf_format: CkfFormat
    def __init__(self, pool_id: _Optional[_Union[KvPoolId, _Mapping]] = ..., producer_incarnation: _Optional[int] = ..., layout_generation: _Optional[int] = ..., ckf_format: _Optional[_Union[CkfFormat, _Mapping]] = ...) -> None: ...

class DynamoEndpointId(_message.Message):
    __slots__ = ("namespace", "component", "endpoint")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    endpoint: str
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., endpoint: _Optional[str] = ...) -> None: ...

class BaseModelTarget(_message.Message):
    __slots__ = ("base_model",)
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    base_model: str
    def __init__(self, base_model: _Optional[str] = ...) -> None: ...

class LoraModelTarget(_message.Message):
    __slots__ = ("base_model", "adapter")
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    base_model: str
    adapter: str
    def __init__(self, base_model: _Optional[str] = ..., adapter: _Optional[str] = ...) -> None: ...

class ModelTarget(_message.Message):
    __slots__ = ("base", "lora")
    BASE_FIELD_NUMBER: _ClassVar[int]
    LORA_FIELD_NUMBER: _ClassVar[int]
    base: BaseModelTarget
    lora: LoraModelTarget
    def __init__(self, base: _Optional[_Union[BaseModelTarget, _Mapping]] = ..., lora: _Optional[_Union[LoraModelTarget, _Mapping]] = ...) -> None: ...

class ModelRegistration(_message.Message):
    __slots__ = ("canonical_model_id", "target", "aliases")
    CANONICAL_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    canonical_model_id: str
    target: ModelTarget
    aliases: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, canonical_model_id: _Optional[str] = ..., target: _Optional[_Union[ModelTarget, _Mapping]] = ..., aliases: _Optional[_Iterable[str]] = ...) -> None: ...

class KvQuerySemantics(_message.Message):
    __slots__ = ("kv_block_size", "hash_format")
    KV_BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    HASH_FORMAT_FIELD_NUMBER: _ClassVar[int]
    kv_block_size: int
    hash_format: KvQueryHashFormat
    def __init__(self, kv_block_size: _Optional[int] = ..., hash_format: _Optional[_Union[KvQueryHashFormat, str]] = ...) -> None: ...

class KvPoolDescriptor(_message.Message):
    __slots__ = ("producer", "serving_endpoint", "registrations", "query_semantics", "pool_roles")
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    SERVING_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REGISTRATIONS_FIELD_NUMBER: _ClassVar[int]
    QUERY_SEMANTICS_FIELD_NUMBER: _ClassVar[int]
    POOL_ROLES_FIELD_NUMBER: _ClassVar[int]
    producer: ProducerIdentity
    serving_endpoint: DynamoEndpointId
    registrations: _containers.RepeatedCompositeFieldContainer[ModelRegistration]
    query_semantics: KvQuerySemantics
    pool_roles: _containers.RepeatedScalarFieldContainer[WorkerRole]
    def __init__(self, producer: _Optional[_Union[ProducerIdentity, _Mapping]] = ..., serving_endpoint: _Optional[_Union[DynamoEndpointId, _Mapping]] = ..., registrations: _Optional[_Iterable[_Union[ModelRegistration, _Mapping]]] = ..., query_semantics: _Optional[_Union[KvQuerySemantics, _Mapping]] = ..., pool_roles: _Optional[_Iterable[_Union[WorkerRole, str]]] = ...) -> None: ...

class KvPoolCatalogSnapshot(_message.Message):
    __slots__ = ("pools",)
    POOLS_FIELD_NUMBER: _ClassVar[int]
    pools: _containers.RepeatedCompositeFieldContainer[KvPoolDescriptor]
    def __init__(self, pools: _Optional[_Iterable[_Union[KvPoolDescriptor, _Mapping]]] = ...) -> None: ...

class RelayInfoRequest(_message.Message):
    __slots__ = ("contract_marker",)
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    contract_marker: int
    def __init__(self, contract_marker: _Optional[int] = ...) -> None: ...

class RelayInfo(_message.Message):
    __slots__ = ("protocol_version", "relay", "contract_marker")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    RELAY_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    relay: RelayIdentity
    contract_marker: int
    def __init__(self, protocol_version: _Optional[int] = ..., relay: _Optional[_Union[RelayIdentity, _Mapping]] = ..., contract_marker: _Optional[int] = ...) -> None: ...

class WatchKvPoolCatalogRequest(_message.Message):
    __slots__ = ("subscriber_id", "contract_marker")
    SUBSCRIBER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    subscriber_id: str
    contract_marker: int
    def __init__(self, subscriber_id: _Optional[str] = ..., contract_marker: _Optional[int] = ...) -> None: ...

class KvPoolCatalogUpdate(_message.Message):
    __slots__ = ("protocol_version", "relay", "revision", "snapshot", "contract_marker")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    RELAY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    relay: RelayIdentity
    revision: int
    snapshot: KvPoolCatalogSnapshot
    contract_marker: int
    def __init__(self, protocol_version: _Optional[int] = ..., relay: _Optional[_Union[RelayIdentity, _Mapping]] = ..., revision: _Optional[int] = ..., snapshot: _Optional[_Union[KvPoolCatalogSnapshot, _Mapping]] = ..., contract_marker: _Optional[int] = ...) -> None: ...

class SubscribeKvPoolRequest(_message.Message):
    __slots__ = ("subscriber_id", "expected_producer", "contract_marker")
    SUBSCRIBER_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_PRODUCER_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    subscriber_id: str
    expected_producer: ProducerIdentity
    contract_marker: int
    def __init__(self, subscriber_id: _Optional[str] = ..., expected_producer: _Optional[_Union[ProducerIdentity, _Mapping]] = ..., contract_marker: _Optional[int] = ...) -> None: ...

class FilterUpdate(_message.Message):
    __slots__ = ("protocol_version", "relay", "producer", "base_sequence", "sequence", "send_ts_us", "kind", "payload", "contract_marker")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    RELAY_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SEND_TS_US_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    relay: RelayIdentity
    producer: ProducerIdentity
    base_sequence: int
    sequence: int
    send_ts_us: int
    kind: FilterUpdateKind
    payload: bytes
    contract_marker: int
    def __init__(self, protocol_version: _Optional[int] = ..., relay: _Optional[_Union[RelayIdentity, _Mapping]] = ..., producer: _Optional[_Union[ProducerIdentity, _Mapping]] = ..., base_sequence: _Optional[int] = ..., sequence: _Optional[int] = ..., send_ts_us: _Optional[int] = ..., kind: _Optional[_Union[FilterUpdateKind, str]] = ..., payload: _Optional[bytes] = ..., contract_marker: _Optional[int] = ...) -> None: ...

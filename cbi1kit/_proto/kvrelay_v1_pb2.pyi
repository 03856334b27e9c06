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

class ServingReadinessState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SERVING_READINESS_STATE_UNKNOWN: _ClassVar[ServingReadinessState]
    SERVING_READINESS_STATE_UNAVAILABLE: _ClassVar[ServingReadinessState]
    SERVING_READINESS_STATE_READY: _ClassVar[ServingReadinessState]

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

class DataStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATA_STATUS_UNSPECIFIED: _ClassVar[DataStatus]
    DATA_STATUS_COMPLETE: _ClassVar[DataStatus]
    DATA_STATUS_DEGRADED: _ClassVar[DataStatus]
    DATA_STATUS_UNAVAILABLE: _ClassVar[DataStatus]
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
SERVING_READINESS_STATE_UNKNOWN: ServingReadinessState
SERVING_READINESS_STATE_UNAVAILABLE: ServingReadinessState
SERVING_READINESS_STATE_READY: ServingReadinessState
WORKER_ROLE_UNSPECIFIED: WorkerRole
WORKER_ROLE_PREFILL: WorkerRole
WORKER_ROLE_DECODE: WorkerRole
WORKER_ROLE_ENCODE: WorkerRole
WORKER_ROLE_AGGREGATED: WorkerRole
WORKER_ROLE_LEGACY: WorkerRole
KV_QUERY_HASH_FORMAT_UNSPECIFIED: KvQueryHashFormat
KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1: KvQueryHashFormat
KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1: KvQueryHashFormat
DATA_STATUS_UNSPECIFIED: DataStatus
DATA_STATUS_COMPLETE: DataStatus
DATA_STATUS_DEGRADED: DataStatus
DATA_STATUS_UNAVAILABLE: DataStatus

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

class SubscribeServingReadinessRequest(_message.Message):
    __slots__ = ("subscriber_id", "contract_marker")
    SUBSCRIBER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    subscriber_id: str
    contract_marker: int
    def __init__(self, subscriber_id: _Optional[str] = ..., contract_marker: _Optional[int] = ...) -> None: ...

class TopologyMember(_message.Message):
    __slots__ = ("endpoint", "roles", "pool_id")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    POOL_ID_FIELD_NUMBER: _ClassVar[int]
    endpoint: DynamoEndpointId
    roles: _containers.RepeatedScalarFieldContainer[WorkerRole]
    pool_id: KvPoolId
    def __init__(self, endpoint: _Optional[_Union[DynamoEndpointId, _Mapping]] = ..., roles: _Optional[_Iterable[_Union[WorkerRole, str]]] = ..., pool_id: _Optional[_Union[KvPoolId, _Mapping]] = ...) -> None: ...

class AdapterReadiness(_message.Message):
    __slots__ = ("canonical_model_id", "state", "missing_roles")
    CANONICAL_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MISSING_ROLES_FIELD_NUMBER: _ClassVar[int]
    canonical_model_id: str
    state: ServingReadinessState
    missing_roles: _containers.RepeatedScalarFieldContainer[WorkerRole]
    def __init__(self, canonical_model_id: _Optional[str] = ..., state: _Optional[_Union[ServingReadinessState, str]] = ..., missing_roles: _Optional[_Iterable[_Union[WorkerRole, str]]] = ...) -> None: ...

class TopologyEntry(_message.Message):
    __slots__ = ("namespace", "canonical_model_id", "state", "present_roles", "missing_roles", "members", "duplicate_role_endpoints", "legacy_fallback_active", "adapters")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    CANONICAL_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PRESENT_ROLES_FIELD_NUMBER: _ClassVar[int]
    MISSING_ROLES_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_ROLE_ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    LEGACY_FALLBACK_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    canonical_model_id: str
    state: ServingReadinessState
    present_roles: _containers.RepeatedScalarFieldContainer[WorkerRole]
    missing_roles: _containers.RepeatedScalarFieldContainer[WorkerRole]
    members: _containers.RepeatedCompositeFieldContainer[TopologyMember]
    duplicate_role_endpoints: _containers.RepeatedScalarFieldContainer[WorkerRole]
    legacy_fallback_active: bool
    adapters: _containers.RepeatedCompositeFieldContainer[AdapterReadiness]
    def __init__(self, namespace: _Optional[str] = ..., canonical_model_id: _Optional[str] = ..., state: _Optional[_Union[ServingReadinessState, str]] = ..., present_roles: _Optional[_Iterable[_Union[WorkerRole, str]]] = ..., missing_roles: _Optional[_Iterable[_Union[WorkerRole, str]]] = ..., members: _Optional[_Iterable[_Union[TopologyMember, _Mapping]]] = ..., duplicate_role_endpoints: _Optional[_Iterable[_Union[WorkerRole, str]]] = ..., legacy_fallback_active: _Optional[bool] = ..., adapters: _Optional[_Iterable[_Union[AdapterReadiness, _Mapping]]] = ...) -> None: ...

class ServingReadinessUpdate(_message.Message):
    __slots__ = ("protocol_version", "relay", "revision", "entries", "contract_marker")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    RELAY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    relay: RelayIdentity
    revision: int
    entries: _containers.RepeatedCompositeFieldContainer[TopologyEntry]
    contract_marker: int
    def __init__(self, protocol_version: _Optional[int] = ..., relay: _Optional[_Union[RelayIdentity, _Mapping]] = ..., revision: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[TopologyEntry, _Mapping]]] = ..., contract_marker: _Optional[int] = ...) -> None: ...

class SubscribeKvPoolLoadRequest(_message.Message):
    __slots__ = ("subscriber_id", "contract_marker")
    SUBSCRIBER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    subscriber_id: str
    contract_marker: int
    def __init__(self, subscriber_id: _Optional[str] = ..., contract_marker: _Optional[int] = ...) -> None: ...

class KvPoolLoadEntry(_message.Message):
    __slots__ = ("producer", "kv_used_blocks", "total_kv_blocks", "kv_observed_ranks", "kv_expected_ranks")
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    KV_USED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_KV_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    KV_OBSERVED_RANKS_FIELD_NUMBER: _ClassVar[int]
    KV_EXPECTED_RANKS_FIELD_NUMBER: _ClassVar[int]
    producer: ProducerIdentity
    kv_used_blocks: int
    total_kv_blocks: int
    kv_observed_ranks: int
    kv_expected_ranks: int
    def __init__(self, producer: _Optional[_Union[ProducerIdentity, _Mapping]] = ..., kv_used_blocks: _Optional[int] = ..., total_kv_blocks: _Optional[int] = ..., kv_observed_ranks: _Optional[int] = ..., kv_expected_ranks: _Optional[int] = ...) -> None: ...

class KvPoolLoadUpdate(_message.Message):
    __slots__ = ("protocol_version", "relay", "window_sequence", "observed_ms", "window_ms", "pools", "contract_marker")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    RELAY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_MS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    relay: RelayIdentity
    window_sequence: int
    observed_ms: int
    window_ms: int
    pools: _containers.RepeatedCompositeFieldContainer[KvPoolLoadEntry]
    contract_marker: int
    def __init__(self, protocol_version: _Optional[int] = ..., relay: _Optional[_Union[RelayIdentity, _Mapping]] = ..., window_sequence: _Optional[int] = ..., observed_ms: _Optional[int] = ..., window_ms: _Optional[int] = ..., pools: _Optional[_Iterable[_Union[KvPoolLoadEntry, _Mapping]]] = ..., contract_marker: _Optional[int] = ...) -> None: ...

class SubscribeServingLoadRequest(_message.Message):
    __slots__ = ("subscriber_id", "contract_marker")
    SUBSCRIBER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    subscriber_id: str
    contract_marker: int
    def __init__(self, subscriber_id: _Optional[str] = ..., contract_marker: _Optional[int] = ...) -> None: ...

class RequestLifecycleStats(_message.Message):
    __slots__ = ("requests_started_total", "requests_completed_total", "requests_failed_total", "requests_cancelled_total", "requests_awaiting_first_token", "requests_generating")
    REQUESTS_STARTED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_COMPLETED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FAILED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_CANCELLED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_AWAITING_FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_GENERATING_FIELD_NUMBER: _ClassVar[int]
    requests_started_total: int
    requests_completed_total: int
    requests_failed_total: int
    requests_cancelled_total: int
    requests_awaiting_first_token: int
    requests_generating: int
    def __init__(self, requests_started_total: _Optional[int] = ..., requests_completed_total: _Optional[int] = ..., requests_failed_total: _Optional[int] = ..., requests_cancelled_total: _Optional[int] = ..., requests_awaiting_first_token: _Optional[int] = ..., requests_generating: _Optional[int] = ...) -> None: ...

class TokenLoadStats(_message.Message):
    __slots__ = ("active_prefill_tokens", "active_decode_blocks", "awaiting_first_token_input_tokens", "inflight_input_tokens", "input_tokens_total", "output_tokens_total")
    ACTIVE_PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_DECODE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    AWAITING_FIRST_TOKEN_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    active_prefill_tokens: int
    active_decode_blocks: int
    awaiting_first_token_input_tokens: int
    inflight_input_tokens: int
    input_tokens_total: int
    output_tokens_total: int
    def __init__(self, active_prefill_tokens: _Optional[int] = ..., active_decode_blocks: _Optional[int] = ..., awaiting_first_token_input_tokens: _Optional[int] = ..., inflight_input_tokens: _Optional[int] = ..., input_tokens_total: _Optional[int] = ..., output_tokens_total: _Optional[int] = ...) -> None: ...

class LoadView(_message.Message):
    __slots__ = ("requests", "tokens", "status", "source_observed_ms")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_OBSERVED_MS_FIELD_NUMBER: _ClassVar[int]
    requests: RequestLifecycleStats
    tokens: TokenLoadStats
    status: DataStatus
    source_observed_ms: int
    def __init__(self, requests: _Optional[_Union[RequestLifecycleStats, _Mapping]] = ..., tokens: _Optional[_Union[TokenLoadStats, _Mapping]] = ..., status: _Optional[_Union[DataStatus, str]] = ..., source_observed_ms: _Optional[int] = ...) -> None: ...

class PoolDeploymentStatus(_message.Message):
    __slots__ = ("live_workers", "max_concurrency")
    LIVE_WORKERS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    live_workers: int
    max_concurrency: int
    def __init__(self, live_workers: _Optional[int] = ..., max_concurrency: _Optional[int] = ...) -> None: ...

class PoolServingLoad(_message.Message):
    __slots__ = ("producer", "load", "deployment")
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    producer: ProducerIdentity
    load: LoadView
    deployment: PoolDeploymentStatus
    def __init__(self, producer: _Optional[_Union[ProducerIdentity, _Mapping]] = ..., load: _Optional[_Union[LoadView, _Mapping]] = ..., deployment: _Optional[_Union[PoolDeploymentStatus, _Mapping]] = ...) -> None: ...

class ModelDeploymentStatus(_message.Message):
    __slots__ = ("expected_frontends", "observed_frontends", "ready_frontends", "serving_pools")
    EXPECTED_FRONTENDS_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FRONTENDS_FIELD_NUMBER: _ClassVar[int]
    READY_FRONTENDS_FIELD_NUMBER: _ClassVar[int]
    SERVING_POOLS_FIELD_NUMBER: _ClassVar[int]
    expected_frontends: int
    observed_frontends: int
    ready_frontends: int
    serving_pools: _containers.RepeatedCompositeFieldContainer[KvPoolId]
    def __init__(self, expected_frontends: _Optional[int] = ..., observed_frontends: _Optional[int] = ..., ready_frontends: _Optional[int] = ..., serving_pools: _Optional[_Iterable[_Union[KvPoolId, _Mapping]]] = ...) -> None: ...

class ModelServingLoad(_message.Message):
    __slots__ = ("namespace", "canonical_model_id", "load", "deployment")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    CANONICAL_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    canonical_model_id: str
    load: LoadView
    deployment: ModelDeploymentStatus
    def __init__(self, namespace: _Optional[str] = ..., canonical_model_id: _Optional[str] = ..., load: _Optional[_Union[LoadView, _Mapping]] = ..., deployment: _Optional[_Union[ModelDeploymentStatus, _Mapping]] = ...) -> None: ...

class ServingLoadUpdate(_message.Message):
    __slots__ = ("protocol_version", "relay", "window_sequence", "observed_ms", "window_ms", "pools", "models", "contract_marker")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    RELAY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_MS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_MARKER_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    relay: RelayIdentity
    window_sequence: int
    observed_ms: int
    window_ms: int
    pools: _containers.RepeatedCompositeFieldContainer[PoolServingLoad]
    models: _containers.RepeatedCompositeFieldContainer[ModelServingLoad]
    contract_marker: int
    def __init__(self, protocol_version: _Optional[int] = ..., relay: _Optional[_Union[RelayIdentity, _Mapping]] = ..., window_sequence: _Optional[int] = ..., observed_ms: _Optional[int] = ..., window_ms: _Optional[int] = ..., pools: _Optional[_Iterable[_Union[PoolServingLoad, _Mapping]]] = ..., models: _Optional[_Iterable[_Union[ModelServingLoad, _Mapping]]] = ..., contract_marker: _Optional[int] = ...) -> None: ...

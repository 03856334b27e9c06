"""The relay: upstream's publication adapter (CKF snapshots and deltas to CBI1 frames), the
dynamo.kvrelay.v1 message contract, and the recorder.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cbi1kit.relay._messages import (
    ERROR_REASON_TRAILER,
    MAX_MESSAGE_BYTES,
    POOL_IDENTITY_VERSION,
    RELAY_CONTRACT_MARKER,
    RELAY_PROTOCOL_VERSION,
    check_filter_update,
    filter_update_from_frame,
    format_from_wire,
    format_to_wire,
    frame_from_filter_update,
    heartbeat_update,
    pool_id_from_wire,
    pool_id_to_wire,
    producer_from_wire,
    producer_key,
    producer_to_wire,
    relay_identity_from_wire,
    relay_identity_to_wire,
    validate_catalog_update,
    validate_ckf_format,
    validate_envelope,
    validate_filter_update,
    validate_pool_id,
    validate_producer_identity,
    validate_relay_info,
    validate_subscribe_request,
)
from cbi1kit.relay._publication import (
    ENVELOPE_HEADROOM_BYTES,
    HubSnapshot,
    PublicationFrame,
    PublicationFrameKind,
    SnapshotFrames,
    encode_delta,
    encode_snapshot,
    filter_format,
)

if TYPE_CHECKING:
    from cbi1kit.relay._recorder import (
        CATALOG_METHOD,
        RELAY_INFO_METHOD,
        SUBSCRIBE_METHOD,
        Action,
        CloseInfo,
        PoolSelector,
        Recorder,
        RecorderConfig,
        RecordReport,
        StreamValidator,
        classify_close,
        describe_pool,
        producer_key_text,
    )

# heavy imports (altair, grpc) load on first use
_LAZY = {
    "Action": "_recorder",
    "CATALOG_METHOD": "_recorder",
    "CloseInfo": "_recorder",
    "PoolSelector": "_recorder",
    "RELAY_INFO_METHOD": "_recorder",
    "RecordReport": "_recorder",
    "Recorder": "_recorder",
    "RecorderConfig": "_recorder",
    "SUBSCRIBE_METHOD": "_recorder",
    "StreamValidator": "_recorder",
    "classify_close": "_recorder",
    "describe_pool": "_recorder",
    "producer_key_text": "_recorder",
}

__all__ = [
    "CATALOG_METHOD",
    "ENVELOPE_HEADROOM_BYTES",
    "ERROR_REASON_TRAILER",
    "MAX_MESSAGE_BYTES",
    "POOL_IDENTITY_VERSION",
    "RELAY_CONTRACT_MARKER",
    "RELAY_INFO_METHOD",
    "RELAY_PROTOCOL_VERSION",
    "SUBSCRIBE_METHOD",
    "Action",
    "CloseInfo",
    "HubSnapshot",
    "PoolSelector",
    "PublicationFrame",
    "PublicationFrameKind",
    "RecordReport",
    "Recorder",
    "RecorderConfig",
    "SnapshotFrames",
    "StreamValidator",
    "check_filter_update",
    "classify_close",
    "describe_pool",
    "encode_delta",
    "encode_snapshot",
    "filter_format",
    "filter_update_from_frame",
    "format_from_wire",
    "format_to_wire",
    "frame_from_filter_update",
    "heartbeat_update",
    "pool_id_from_wire",
    "pool_id_to_wire",
    "producer_from_wire",
    "producer_key",
    "producer_key_text",
    "producer_to_wire",
    "relay_identity_from_wire",
    "relay_identity_to_wire",
    "validate_catalog_update",
    "validate_ckf_format",
    "validate_envelope",
    "validate_filter_update",
    "validate_pool_id",
    "validate_producer_identity",
    "validate_relay_info",
    "validate_subscribe_request",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

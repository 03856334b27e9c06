"""The consumer's per-message rulebook: every rule once, as data, in the order upstream checks it.

A ``FilterUpdate`` (or bare CBI1 frame)'s verdict is the first failing rule of :data:`RULES`, in
upstream's order (``lib/llm/src/kv_dc_relay/global_view_consumer/stream.rs`` ·
``CkfStreamSession::process_update``, then ``cbi1::decode``, ``check_header`` and
``GlobalCkfLaneIngestor::apply_delta``; see docs/tables.md). Rules needing stream state are
replay's. Users: the compiled frames table (its kernel returns ``RULES`` indices), the reference
frames table, and the per-message Python paths (errors map to a rule id via :func:`rule_for`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from cbi1kit.errors import Cbi1kitError, error_name

_CBI1_RS: Final = "lib/llm/src/kv_dc_relay/publication/cbi1.rs"
_STREAM_RS: Final = "lib/llm/src/kv_dc_relay/global_view_consumer/stream.rs"
_IDENTITY_RS: Final = "lib/llm/src/kv_dc_relay/wan/grpc/protocol/wire/identity.rs"
_CONVERT_RS: Final = "lib/llm/src/kv_dc_relay/wan/grpc/identity.rs"
_GLOBAL_RS: Final = "lib/kv-router/src/indexer/cuckoo/global.rs"


#: what a consumer does on a break (upstream ``lib/llm/src/kv_dc_relay/docs/grpc-contract.md``
#: @ 32a11122, "Unknown Types and Validation"): drop the lane's replica and close its stream, to
#: start again from a snapshot; or, for unsupported semantics
#: (``WireIdentityError::is_unsupported``), quarantine the pool with its previous CKF state,
#: never falling back to a default interpretation
INVALIDATE_LANE: Final = "invalidate-lane"
QUARANTINE_POOL: Final = "quarantine-pool"
ACTIONS: Final = (INVALIDATE_LANE, QUARANTINE_POOL)
#: damage to a recording (a record no reader can read) is no message a consumer saw, so it
#: takes no action: replay reads on, and the next message's continuity checks show whether
#: what was lost changed the lane
SOURCE_DAMAGED: Final = "SourceDamaged"
NO_ACTION: Final = "none"


@dataclass(frozen=True, slots=True)
class Rule:
    """One per-message consumer rule; ``id`` is stable, ``action`` one of ``ACTIONS``.

    ``field`` its protobuf / CBI1 path; ``message`` the ``validation_error`` text; ``upstream``
    ``path · function → error``; ``errors`` the errors reporting it (``Family.Variant[.Sub]``,
    ``@field-prefix`` if one reports several); ``replay`` what every compiled-replay message meets.
    """

    id: str
    field: str
    message: str
    upstream: str
    errors: tuple[str, ...] = ()
    replay: str = ""
    action: str = INVALIDATE_LANE


RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "relay-protobuf-decode",
        "FilterUpdate",
        "FilterUpdate: malformed protobuf",
        f"{_STREAM_RS} · run_exact_aggregated_producer (`update?`): prost decode → tonic::Status",
        errors=("DecodeError", "CaptureError.Unreadable@FilterUpdate"),
        replay="no malformed, repeated or unknown field in the walk; relay and producer bytes "
        "equal to ones that parsed",
    ),
    Rule(
        "relay-contract-marker",
        "FilterUpdate.contract_marker",
        "FilterUpdate.contract_marker: wrong relay contract marker",
        f"{_IDENTITY_RS} · validate_protocol_envelope → WireIdentityError::ContractMarker",
        errors=("RelayWireError.ContractMarker",),
        replay="contract_marker == RELAY_CONTRACT_MARKER",
    ),
    Rule(
        "relay-protocol-version",
        "FilterUpdate.protocol_version",
        "FilterUpdate.protocol_version: unsupported relay protocol version",
        f"{_IDENTITY_RS} · validate_protocol_envelope → WireIdentityError::ProtocolVersion",
        errors=("RelayWireError.ProtocolVersion",),
        replay="protocol_version == RELAY_PROTOCOL_VERSION",
    ),
    Rule(
        "relay-producer-present",
        "FilterUpdate.producer",
        "FilterUpdate.producer: required message field is missing",
        f'{_STREAM_RS} · CkfStreamSession::process_update → bail "missing frame producer"',
        errors=("RelayWireError.MissingField@FilterUpdate.producer",),
        replay="producer present",
    ),
    Rule(
        "relay-producer-identity",
        "FilterUpdate.producer.*",
        "FilterUpdate.producer: invalid producer identity",  # the table shows the validator's
        f"{_CONVERT_RS} · producer_from_wire → {_IDENTITY_RS} · validate_producer_identity → "
        "WireConversionError::InvalidIdentity",
        errors=(
            "RelayWireError.MissingField@FilterUpdate.producer.",
            "RelayWireError.PoolIdentityVersion",
            "RelayWireError.DigestLength",
            "RelayWireError.IdentitySource",
            "RelayWireError.LayoutGeneration",
            "RelayWireError.ZeroFormatField",
            "RelayWireError.BucketCount",
        ),
        replay="producer bytes equal to the session's, or to ones that validated",
    ),
    Rule(  # the same validator's other outcome: known fields, semantics not supported
        "relay-producer-unsupported",
        "FilterUpdate.producer.*",
        "FilterUpdate.producer: unsupported producer identity",  # the validator's words
        f"{_CONVERT_RS} · producer_from_wire → {_IDENTITY_RS} · validate_producer_identity → "
        "WireIdentityError::is_unsupported (7216a153): an unknown pool identity version or "
        "identity source, an unsupported CKF format, a bucket count above 2^24",
        errors=(
            "RelayWireError.PoolIdentityVersion.Unsupported",
            "RelayWireError.IdentitySource.Unsupported",
            "RelayWireError.UnsupportedCkfFormat",
            "RelayWireError.BucketCountTooLarge",
        ),
        replay="producer bytes equal to the session's, or to ones that validated",
        action=QUARANTINE_POOL,
    ),
    Rule(
        "relay-identity-present",
        "FilterUpdate.relay",
        "FilterUpdate.relay: required message field is missing",
        f'{_STREAM_RS} · CkfStreamSession::process_update → bail "missing relay identity" '
        "(after the producer checks)",
        errors=("RelayWireError.MissingField@FilterUpdate.relay",),
        replay="relay present",
    ),
    Rule(
        "relay-update-kind",
        "FilterUpdate.kind",
        "FilterUpdate.kind: unspecified or unknown FilterUpdate kind",
        f"{_STREAM_RS} · CkfStreamSession::process_update → FilterUpdateKind::try_from "
        '(UnknownEnumValue) / bail "unspecified CKF frame kind"',
        errors=("RelayWireError.UpdateKind",),
        replay="kind is DELTA or HEARTBEAT (a skipped chunk: SNAPSHOT_CHUNK)",
    ),
    Rule(
        "relay-base-equals-sequence",
        "FilterUpdate.base_sequence",
        "FilterUpdate.base_sequence: a snapshot chunk or heartbeat needs base_sequence == sequence",
        f'{_STREAM_RS} · CkfStreamSession::process_update → bail "snapshot chunk has mismatched '
        'base sequence" (before decode) / "CKF heartbeat has unexpected payload or sequence"',
        errors=("RelayWireError.Sequence@FilterUpdate.base_sequence",),
        replay="a heartbeat or skipped chunk: base_sequence == sequence",
    ),
    Rule(
        "relay-payload",
        "FilterUpdate.payload",
        "FilterUpdate.payload: a heartbeat carries no payload",
        f'{_STREAM_RS} · CkfStreamSession::process_update → bail "CKF heartbeat has unexpected '
        "payload or sequence\" (an empty chunk or delta payload is decode's Truncated)",
        errors=("RelayWireError.Payload",),
        replay="a heartbeat: no payload bytes",
    ),
    Rule(
        "cbi1-truncated",
        "header",
        "CBI1: frame shorter than its 48-byte header",
        f"{_CBI1_RS} · decode → ImagesWireError::Truncated",
        errors=("Cbi1Error.Truncated",),
        replay="a delta: payload >= the header and delta prefix",
    ),
    Rule(
        "cbi1-frame-too-large",
        "frame",
        "CBI1: frame larger than the CBI1 maximum",
        f"{_CBI1_RS} · decode → ImagesWireError::FrameTooLarge",
        errors=("Cbi1Error.FrameTooLarge",),
        replay="a delta: payload <= IMAGES_MAX_FRAME_BYTES",
    ),
    Rule(
        "cbi1-legacy-ckf1",
        "header.magic",
        "CBI1 header.magic: legacy CKF1 prototype frame, not CBI1",
        f"{_CBI1_RS} · decode → ImagesWireError::Magic (named apart: a CKF1 prototype frame)",
        errors=("Cbi1Error.Magic.Legacy",),
        replay="a delta: magic == MAGIC",
    ),
    Rule(
        "cbi1-magic",
        "header.magic",
        "CBI1 header.magic: not a CBI1 frame",
        f"{_CBI1_RS} · decode → ImagesWireError::Magic",
        errors=("Cbi1Error.Magic",),
        replay="a delta: magic == MAGIC",
    ),
    Rule(
        "cbi1-wire-version",
        "header.wire_version",
        "CBI1 header.wire_version: unsupported CBI1 wire version",
        f"{_CBI1_RS} · decode → ImagesWireError::WireVersion",
        errors=("Cbi1Error.WireVersion",),
        replay="a delta: wire_version == WIRE_VERSION",
    ),
    Rule(
        "cbi1-checksum",
        "header.body_checksum",
        "CBI1 header.body_checksum: body checksum mismatch",
        f"{_CBI1_RS} · decode → ImagesWireError::Checksum",
        errors=("Cbi1Error.Checksum",),
        replay="a delta: the body checksum == body_checksum",
    ),
    Rule(
        "cbi1-format-shape",
        "header.format_version",
        "CBI1 header: format version / fingerprint bits / slots are not (1, 16, 4)",
        f"{_CBI1_RS} · FilterFormat::validate → FormatError::{{Version, FingerprintBits, "
        "SlotsPerBucket}",
        errors=(
            "Cbi1Error.Format@header.format_version",
            "Cbi1Error.Format@header.fingerprint_bits",
            "Cbi1Error.Format@header.slots_per_bucket",
        ),
        replay="a delta: format_version, fingerprint_bits, slots_per_bucket are "
        "FORMAT_VERSION, FINGERPRINT_BITS, SLOTS_PER_BUCKET",
    ),
    Rule(
        "cbi1-format-mismatch",
        "header.seed",
        "CBI1 header: seed or bucket_count differ from the producer's CKF format",
        f"{_CBI1_RS} · FilterFormat::validate → FormatError::Mismatch (expected: the "
        f"subscribed producer's format, {_STREAM_RS} · CkfStreamSession::new)",
        errors=("Cbi1Error.Format@header.seed", "Cbi1Error.Format@header.bucket_count"),
        replay="a delta: seed and bucket_count are the session's",
    ),
    Rule(
        "cbi1-flags",
        "header.flags",
        "CBI1 header.flags: unknown frame flags (1 = snapshot chunk, 2 = delta)",
        f"{_CBI1_RS} · decode → ImagesWireError::Flags",
        errors=("Cbi1Error.Flags",),
        replay="a delta: flags == FrameKind.DELTA",
    ),
    Rule(
        "cbi1-delta-length",
        "delta.image_count",
        "CBI1 delta: body is not 12 + 12 * image_count bytes (or image_count over the maximum)",
        f"{_CBI1_RS} · decode_delta → ImagesWireError::Malformed (body < 12, length) / "
        "DeltaImageCount",
        errors=("Cbi1Error.Malformed@delta", "Cbi1Error.DeltaImageCount"),
        replay="a delta: 1 <= image_count <= max_delta_images(), payload == prefix + "
        "image_count images",
    ),
    Rule(
        "cbi1-delta-bucket-range",
        "delta.images[].bucket",
        "CBI1 delta: an image's bucket is not below bucket_count",
        f"{_CBI1_RS} · decode_delta → ImagesWireError::Malformed",
        errors=("Cbi1Error.Malformed@delta.images[",),
        replay="a delta: every bucket < the session's bucket_count",
    ),
    Rule(
        "cbi1-chunk-layout",
        "snapshot",
        "CBI1 snapshot chunk: chunk_index/chunk_count/word count/bucket range inconsistent",
        f"{_CBI1_RS} · decode_snapshot_chunk → ImagesWireError::Malformed / "
        "SnapshotChunkWordCount (bucket_offset is not tied to chunk_index: only the encoder "
        "cuts at chunk_index * 524288)",
        errors=("Cbi1Error.Malformed@snapshot", "Cbi1Error.SnapshotChunkWordCount"),
        replay="no snapshot chunk is applied (a skipped one is not decoded)",
    ),
    Rule(
        "cbi1-kind-mismatch",
        "header.flags",
        "CBI1 header.flags: frame kind differs from the envelope's kind",
        f'{_STREAM_RS} · CkfStreamSession::process_update → bail "snapshot frame contains a '
        'non-snapshot CBI1 payload" / "delta frame contains a non-delta CBI1 payload"',
        errors=(),
        replay="a delta: flags == FrameKind.DELTA",
    ),
    Rule(
        "cbi1-dc-id",
        "header.dc_id",
        "CBI1 header.dc_id differs from the producer's dc_id",
        f'{_STREAM_RS} · CkfStreamSession::check_header → bail "CBI1 header differs from CKF '
        'frame envelope"',
        errors=(),
        replay="a delta: dc_id is the session's",
    ),
    Rule(
        "cbi1-epoch",
        "header.epoch",
        "CBI1 header.epoch differs from the envelope sequence",
        f'{_STREAM_RS} · CkfStreamSession::check_header → bail "CBI1 header differs from CKF '
        'frame envelope"',
        errors=(),
        replay="a delta: epoch == sequence",
    ),
    Rule(
        "cbi1-delta-base-epoch",
        "delta.base_epoch",
        "CBI1 delta: base_epoch differs from the envelope base_sequence",
        f'{_STREAM_RS} · CkfStreamSession::process_update → bail "delta CBI1 base sequence '
        'differs from frame envelope"',
        errors=(),
        replay="a delta: base_epoch == base_sequence",
    ),
    Rule(
        "relay-delta-contiguous",
        "FilterUpdate.sequence",
        "FilterUpdate.sequence: a delta needs sequence == base_sequence + 1",
        f"{_GLOBAL_RS} · GlobalCkfLaneIngestor::apply_delta → GlobalCkfLaneFault::"
        f'{{NonContiguousSequence, SequenceExhausted}} → {_STREAM_RS} bail "CKF delta rejected"',
        errors=("RelayWireError.Sequence@FilterUpdate.sequence",),
        replay="a delta: base_sequence < 2**64 - 1, sequence == base_sequence + 1",
    ),
)

RULE_INDEX: Final[dict[str, int]] = {rule.id: i for i, rule in enumerate(RULES)}
assert len(RULE_INDEX) == len(RULES)


# ------------------------------------------------------------------ errors -> rule ids
#
# Keyed on (name, field prefix), from each rule's ``errors``: ``name`` is
# ``Family.Variant.Subvariant``, then ``Family.Variant`` (``cbi1kit.errors``), or the class name
# of a foreign error (protobuf's ``DecodeError``); among the entries of the first name that has
# any, the longest field prefix that the error's ``field`` starts with wins ("" is any field).
def _by_error() -> dict[str, dict[str, str]]:
    """Every rule's ``errors``, as ``{name: {field prefix: rule id}}``."""
    table: dict[str, dict[str, str]] = {}
    for rule in RULES:
        for key in rule.errors:
            name, _, prefix = key.partition("@")
            assert prefix not in table.get(name, {}), key  # an error names one rule
            table.setdefault(name, {})[prefix] = rule.id
    return table


_BY_ERROR: Final = _by_error()


def rule_id(rule: str) -> str:
    """``rule`` itself, once it is known to be a rule of :data:`RULES` (``KeyError`` if not), so
    a module that names a rule by id fails at import on a typo."""
    RULE_INDEX[rule]
    return rule


def rule_for(error: BaseException) -> str:
    """The id of the rule that ``error`` (a relay validation, protobuf or CBI1 decode error)
    reports. ``LookupError`` for errors that are no per-message rule (encoder inputs, snapshot
    assembly, stream state)."""
    if isinstance(error, Cbi1kitError):
        names = [f"{error.name}.{error.subvariant}", error.name]
    else:
        names = [cls.__name__ for cls in type(error).__mro__]
    field = getattr(error, "field", None) or ""
    for name in names:
        table = _BY_ERROR.get(name)
        if table is None:
            continue
        hits = [prefix for prefix in table if field.startswith(prefix)]
        if hits:
            return table[max(hits, key=len)]
    raise LookupError(f"{type(error).__name__} ({field or 'no field'}) is no per-message rule")


def rule_of(error: BaseException) -> str:
    """What a report names a violation by: the rule id for a per-message rule, else the error's
    ``Family.Variant`` (stream rules: snapshot assembly, lane faults)."""
    try:
        return rule_for(error)
    except LookupError:
        return error_name(error)


def action_of(rule: str) -> str:
    """What a consumer does on a break of ``rule`` (a rule id, or a stream rule's
    ``Family.Variant``: those all invalidate the lane); nothing for a recording's damage."""
    if rule == SOURCE_DAMAGED:
        return NO_ACTION
    index = RULE_INDEX.get(rule)
    return INVALIDATE_LANE if index is None else RULES[index].action

"""The catalog and readiness streams' rules: one engine for a live recording
(``record --validate``) and a capture's replay (docs/replay.md, "Catalog and readiness").

Upstream's newest consumer (``lib/llm/src/kv_dc_relay/global_view_consumer/coordinator.rs``,
91ec3789; 0092138f agrees), in order: every update names a relay, one relay (drt instance and
incarnation) across the epoch's streams; a revision never moves backwards; an update at the held
revision is a heartbeat repeating the content. A capture has no epochs: an update's epoch is the
plane streams open when it arrives. Plane rule breaks are listed apart from frame violations.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import DecodeError

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._items import CatalogRecord, ReadinessRecord, StreamEvent
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD

_COORDINATOR: Final = "lib/llm/src/kv_dc_relay/global_view_consumer/coordinator.rs @ 91ec3789"
_STREAM: Final = "lib/llm/src/kv_dc_relay/global_view_consumer/stream.rs @ 53c7c79f"
#: a pool stream whose producer the catalog describes as no CKF source of upstream's consumer
POOL_SOURCE_RULE: Final = "catalog-pool-not-aggregated"

#: rule id -> upstream's error text (coordinator.rs), per plane, in the order it checks them
PLANE_RULES: Final[dict[str, str]] = {
    f"{plane}-{rule}": text.format(plane=plane)
    for plane in ("catalog", "readiness")
    for rule, text in (
        ("relay-missing", "Relay update is missing relay identity"),
        ("relay-changed", "Relay incarnation changed within a connection epoch"),
        ("revision-backwards", "Relay {plane} revision moved backwards"),
        ("revision-unchanged", "Relay {plane} changed without advancing its revision"),
    )
}

PLANE_RULES[POOL_SOURCE_RULE] = "CKF producer is not an aggregated source for this model"

PlaneRecord = CatalogRecord | ReadinessRecord


@dataclass(frozen=True, slots=True)
class PlaneViolation:
    """A catalog or readiness update that breaks a rule: where it is (``record_index`` -1:
    a live stream's, not a capture's), which rule, why."""

    record_index: int
    stream_id: int
    plane: str
    revision: int
    rule: str
    reason: str

    def describe(self) -> str:
        """The violation in one line: record, plane, revision, rule, reason."""
        return (
            f"record {self.record_index} ({self.plane} stream {self.stream_id}) revision "
            f"{self.revision}: {self.rule}: {self.reason}"
        )

    def to_dict(self) -> dict[str, object]:
        """The violation as JSON-ready values."""
        return {
            "record_index": self.record_index,
            "stream_id": self.stream_id,
            "plane": self.plane,
            "revision": self.revision,
            "rule": self.rule,
            "reason": self.reason,
        }


@dataclass(slots=True)
class _Held:
    """What one plane stream holds: its relay, its revision and that revision's content."""

    relay: tuple[int, int]
    revision: int
    content: bytes


PlaneUpdate = pb.KvPoolCatalogUpdate | pb.ServingReadinessUpdate


def _content(update: PlaneUpdate) -> bytes:
    """What a heartbeat must repeat: the catalog's snapshot (absent is not empty, as upstream's
    ``Option`` compares) or the readiness entries, serialized deterministically."""
    if isinstance(update, pb.KvPoolCatalogUpdate):
        if not update.HasField("snapshot"):
            return b""
        return b"\1" + update.snapshot.SerializeToString(deterministic=True)
    return b"".join(
        len(b).to_bytes(4, "little") + b
        for b in (e.SerializeToString(deterministic=True) for e in update.entries)
    )


class PlaneRules:
    """The rules over the plane streams open together, fed in arrival order: ``check`` each
    update of a stream, ``close`` a stream when it ends (its part of the epoch ends)."""

    def __init__(self) -> None:
        self._held: dict[int, _Held] = {}

    def close(self, stream_id: int) -> None:
        self._held.pop(stream_id, None)

    def check(
        self, stream_id: int, update: PlaneUpdate, record_index: int = -1
    ) -> PlaneViolation | None:
        """The rule ``update`` breaks (None: none). After a break the stream keeps what it
        held: upstream ends the epoch there, so that stays the reference."""
        relay = (
            (update.relay.drt_instance_id, update.relay.relay_incarnation)
            if update.HasField("relay")
            else None
        )
        content = _content(update)
        rule, other = _broken(self._held, stream_id, relay, update.revision, content)
        if rule is not None:
            return _violation(update, stream_id, record_index, rule, other)
        assert relay is not None
        self._held[stream_id] = _Held(relay, update.revision, content)
        return None


def not_a_ckf_source(desc: pb.KvPoolDescriptor) -> str | None:
    """Why upstream's Global View consumer takes no CKF stream from the pool ``desc``
    describes (stream.rs · ``CkfStreamSession::new``: the aggregated role and a base-model
    target are required; a LoRA target alone is not one), or None."""
    if pb.WORKER_ROLE_AGGREGATED not in desc.pool_roles:
        roles = ", ".join(pb.WorkerRole.Name(r) for r in desc.pool_roles) or "none"
        return f"the pool declares no aggregated role (roles: {roles})"
    if not any(r.target.WhichOneof("target") == "base" for r in desc.registrations):
        return "no registration of the pool has a base-model target"
    return None


def pool_source_violation(
    stream_id: int,
    producer: pb.ProducerIdentity,
    catalog: pb.KvPoolCatalogUpdate | None,
    record_index: int = -1,
) -> PlaneViolation | None:
    """A pool stream subscribed to ``producer``, against the catalog it came from: a
    violation when the catalog describes it as no CKF source (None: it is one, or the
    catalog does not describe it)."""
    if catalog is None:
        return None
    key = producer.SerializeToString(deterministic=True)
    for desc in catalog.snapshot.pools:
        if desc.producer.SerializeToString(deterministic=True) != key:
            continue
        why = not_a_ckf_source(desc)
        if why is None:
            return None
        reason = f"{PLANE_RULES[POOL_SOURCE_RULE]}: {why} [{_STREAM}]"
        rule = POOL_SOURCE_RULE
        return PlaneViolation(record_index, stream_id, "catalog", catalog.revision, rule, reason)
    return None


def plane_violations(items: Iterable[PlaneRecord | StreamEvent]) -> list[PlaneViolation]:
    """Every plane update of a capture that breaks a rule, in record order, from its plane
    records and the closes of their streams (see the module docstring); and every pool stream,
    from its open, that the catalog then describes as no CKF source."""
    rules = PlaneRules()
    found: list[PlaneViolation] = []
    catalog: pb.KvPoolCatalogUpdate | None = None  # the last one that kept the rules
    for item in items:
        if isinstance(item, StreamEvent):
            if item.closed is not None:
                rules.close(item.stream_id)
            elif (v := _subscribed(item, catalog)) is not None:
                found.append(v)
        elif (v := rules.check(item.stream_id, item.update, item.record_index)) is not None:
            found.append(v)
        elif isinstance(item, CatalogRecord):
            catalog = item.update
    return found


def _subscribed(
    event: StreamEvent, catalog: pb.KvPoolCatalogUpdate | None
) -> PlaneViolation | None:
    opened = event.opened
    if opened is None or opened.method != SUBSCRIBE_KV_POOL_METHOD:
        return None
    try:
        request = pb.SubscribeKvPoolRequest.FromString(opened.request)
    except DecodeError:
        return None  # the stream's own damage; nothing to compare
    if not request.HasField("expected_producer"):
        return None
    return pool_source_violation(
        event.stream_id, request.expected_producer, catalog, event.record_index
    )


def _broken(
    held: dict[int, _Held],
    stream: int,
    relay: tuple[int, int] | None,
    revision: int,
    content: bytes,
) -> tuple[str | None, _Held | None]:
    """The first rule (without its plane) an update breaks, and the holder it broke it against."""
    if relay is None:
        return "relay-missing", None
    for other in held.values():
        if other.relay != relay:
            return "relay-changed", other
    before = held.get(stream)
    if before is None:
        return None, None
    if revision < before.revision:
        return "revision-backwards", before
    if revision == before.revision and content != before.content:
        return "revision-unchanged", before
    return None, None


def _violation(
    update: PlaneUpdate, stream: int, record_index: int, rule: str, other: _Held | None
) -> PlaneViolation:
    plane = "catalog" if isinstance(update, pb.KvPoolCatalogUpdate) else "readiness"
    detail = ""
    if other is not None and rule == "revision-backwards":
        detail = f" ({update.revision} after {other.revision})"
    elif other is not None and rule == "relay-changed":
        drt, inc = update.relay.drt_instance_id, update.relay.relay_incarnation
        detail = f" (relay {drt:016x}/{inc:016x} after {other.relay[0]:016x}/{other.relay[1]:016x})"
    rule = f"{plane}-{rule}"
    reason = f"{PLANE_RULES[rule]}{detail} [{_COORDINATOR}]"
    return PlaneViolation(record_index, stream, plane, update.revision, rule, reason)

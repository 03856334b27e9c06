"""The catalog stream's rules over a capture's catalog updates (docs/replay.md, "Catalog").

Upstream's newest consumer (``lib/llm/src/kv_dc_relay/global_view_consumer/coordinator.rs``,
0092138f) holds each connection's catalog stream to three rules: its revision never moves
backwards; an update at the revision it already holds is a heartbeat and carries the same
snapshot; and every update names one relay (drt instance and incarnation). A new stream (a
resubscription, a restarted relay) starts afresh. The catalog's rule breaks are the catalog's,
listed apart from the frames' violations, as its damage is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from cbi1kit.capture._items import CatalogRecord

__all__ = ["CATALOG_RULES", "CatalogViolation", "catalog_violations"]

_COORDINATOR: Final = "lib/llm/src/kv_dc_relay/global_view_consumer/coordinator.rs @ 0092138f"

#: rule id -> upstream's error text (coordinator.rs), in the order it checks them
CATALOG_RULES: Final[dict[str, str]] = {
    "catalog-relay-missing": "Relay update is missing relay identity",
    "catalog-relay-changed": "Relay incarnation changed within a connection epoch",
    "catalog-revision-backwards": "Relay catalog revision moved backwards",
    "catalog-revision-unchanged": "Relay catalog changed without advancing its revision",
}


@dataclass(frozen=True, slots=True)
class CatalogViolation:
    """A catalog update that breaks a rule: where it is, which rule, why."""

    record_index: int
    stream_id: int
    revision: int
    rule: str
    reason: str

    def describe(self) -> str:
        return (
            f"record {self.record_index} (stream {self.stream_id}) revision {self.revision}: "
            f"{self.rule}: {self.reason}"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "record_index": self.record_index,
            "stream_id": self.stream_id,
            "revision": self.revision,
            "rule": self.rule,
            "reason": self.reason,
        }


@dataclass(slots=True)
class _Held:
    """What one catalog stream holds: its relay, its revision and that revision's snapshot."""

    relay: tuple[int, int] | None
    revision: int
    snapshot: bytes


def catalog_violations(catalogs: Iterable[CatalogRecord]) -> list[CatalogViolation]:
    """Every catalog update that breaks a rule, in record order (see the module docstring)."""
    held: dict[int, _Held] = {}
    found: list[CatalogViolation] = []
    for record in catalogs:
        update = record.update
        relay = (
            (update.relay.drt_instance_id, update.relay.relay_incarnation)
            if update.HasField("relay")
            else None
        )
        snapshot = update.snapshot.SerializeToString(deterministic=True)
        before = held.get(record.stream_id)
        rule = _broken(before, relay, update.revision, snapshot)
        if rule is not None:
            found.append(_violation(record, rule, before))
            continue  # upstream ends the epoch here: what it held stays the reference
        held[record.stream_id] = _Held(relay, update.revision, snapshot)
    return found


def _broken(
    before: _Held | None, relay: tuple[int, int] | None, revision: int, snapshot: bytes
) -> str | None:
    """The first rule an update breaks after what its stream held (None: none)."""
    if relay is None:
        return "catalog-relay-missing"
    if before is None:
        return None
    if before.relay is not None and relay != before.relay:
        return "catalog-relay-changed"
    if revision < before.revision:
        return "catalog-revision-backwards"
    if revision == before.revision and snapshot != before.snapshot:
        return "catalog-revision-unchanged"
    return None


def _violation(record: CatalogRecord, rule: str, before: _Held | None) -> CatalogViolation:
    update = record.update
    detail = ""
    if before is not None and rule == "catalog-revision-backwards":
        detail = f" ({update.revision} after {before.revision})"
    elif before is not None and rule == "catalog-relay-changed" and before.relay is not None:
        drt, inc = update.relay.drt_instance_id, update.relay.relay_incarnation
        detail = (
            f" (relay {drt:016x}/{inc:016x} after {before.relay[0]:016x}/{before.relay[1]:016x})"
        )
    reason = f"{CATALOG_RULES[rule]}{detail} [{_COORDINATOR}]"
    return CatalogViolation(record.record_index, record.stream_id, update.revision, rule, reason)

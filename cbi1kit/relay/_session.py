"""A recording session's terms: the relay's RPCs and the planes beside the pool streams
(``PLANES``), what a stream's end asks for (``classify_close``), which pools (``PoolSelector``),
the settings (``RecorderConfig``) and the report (``RecordReport``, a ``PoolRecord`` per pool).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._streams import (
    KV_EVENT_RELAY,
    SUBSCRIBE_KV_POOL_METHOD,
    WATCH_KV_POOL_CATALOG_METHOD,
)
from cbi1kit.errors import Cbi1kitError, RecorderError, RecorderVariant
from cbi1kit.hashing._dc_names import dc_text
from cbi1kit.hashing._pools import DcId, stable_dc_id
from cbi1kit.relay._messages import ERROR_REASON_TRAILER, producer_key, validate_base_subscriber_id
from cbi1kit.relay._transport import ClientTls

# --------------------------------------------------------------------------------------------
# the relay's RPCs

RELAY_INFO_METHOD: Final = KV_EVENT_RELAY + "GetRelayInfo"
CATALOG_METHOD: Final = WATCH_KV_POOL_CATALOG_METHOD
SUBSCRIBE_METHOD: Final = SUBSCRIBE_KV_POOL_METHOD  # the name the capture readers look for
READINESS_METHOD: Final = KV_EVENT_RELAY + "SubscribeServingReadiness"
POOL_LOAD_METHOD: Final = KV_EVENT_RELAY + "SubscribeKvPoolLoad"
SERVING_LOAD_METHOD: Final = KV_EVENT_RELAY + "SubscribeServingLoad"


@dataclass(frozen=True, slots=True)
class Plane:
    """A stream the recorder keeps open beside the pool's, for the whole session.

    ``required`` (the catalog) is watched again whatever its end; another plane refused for good
    (``UNIMPLEMENTED``, a contract error) is given up and reported. ``heartbeat``: upstream sends
    readiness every 10 s and load every 1 s, so ``stall_timeout`` of silence is a stall.
    """

    name: str
    method: str
    request: Any  # the request message class: subscriber_id and contract_marker
    response: Any  # the response message class
    required: bool = False
    heartbeat: bool = True


#: What a consumer watches beside its pool streams; readiness and load say why a pool that
#: is in the catalog is not routed to (a topology UNAVAILABLE, ranks that stopped reporting).
PLANES: Final = (
    Plane(
        "catalog",
        CATALOG_METHOD,
        pb.WatchKvPoolCatalogRequest,
        pb.KvPoolCatalogUpdate,
        required=True,
        heartbeat=False,
    ),
    Plane(
        "readiness",
        READINESS_METHOD,
        pb.SubscribeServingReadinessRequest,
        pb.ServingReadinessUpdate,
    ),
    Plane("pool load", POOL_LOAD_METHOD, pb.SubscribeKvPoolLoadRequest, pb.KvPoolLoadUpdate),
    Plane(
        "serving load", SERVING_LOAD_METHOD, pb.SubscribeServingLoadRequest, pb.ServingLoadUpdate
    ),
)
_CATALOG: Final = PLANES[0]


class Action(enum.Enum):
    """What a stream's end asks of the recorder."""

    STOP = "stop"  # we ended it (duration, frames, Ctrl-C)
    RESUBSCRIBE = "resubscribe"  # reopen from a fresh snapshot, with backoff
    REFRESH = "refresh"  # wait for a newer catalog, then resubscribe to its key
    FATAL = "fatal"  # do not retry unchanged


_REFRESH_REASONS: Final = frozenset(
    {
        "RELAY_ERROR_REASON_PRODUCER_CHANGED",
        "RELAY_ERROR_REASON_POOL_NOT_FOUND",
        "RELAY_ERROR_REASON_INVALID_PUBLICATION",
        "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE",
    }
)
_FATAL_REASONS: Final = frozenset(
    {
        "RELAY_ERROR_REASON_CONTRACT_MISMATCH",
        "RELAY_ERROR_REASON_INVALID_REQUEST",
        "RELAY_ERROR_REASON_UNSUPPORTED_FEATURE",
    }
)


def classify_close(code: grpc.StatusCode | None, reason: str | None) -> Action:
    """The spec's client action for a stream end (``grpc-contract.md`` reason table).

    Unknown/absent reasons fall back to the status code: ``INVALID_ARGUMENT`` and
    ``UNIMPLEMENTED`` are fatal, ``FAILED_PRECONDITION``/``NOT_FOUND`` refresh the catalog,
    everything else (``UNAVAILABLE``, ``RESOURCE_EXHAUSTED``, clean EOF, ...) resubscribes.
    """
    if reason in _FATAL_REASONS:
        return Action.FATAL
    if reason in _REFRESH_REASONS:
        return Action.REFRESH
    if reason is not None and reason.startswith("RELAY_ERROR_REASON_"):
        known = reason in pb.RelayErrorReason.keys()  # noqa: SIM118 - enum wrapper
        if known and reason != "RELAY_ERROR_REASON_UNSPECIFIED":
            return Action.RESUBSCRIBE
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED):
        return Action.FATAL
    if code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
        return Action.REFRESH
    return Action.RESUBSCRIBE


def _trailer_reason(md: Sequence[tuple[str, Any]] | None) -> str | None:
    for key, value in md or ():
        if key == ERROR_REASON_TRAILER:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def _md(md: Sequence[tuple[str, Any]] | None) -> list[tuple[str, str]]:
    out = []
    for key, value in md or ():
        out.append((key, value.hex() if isinstance(value, bytes) else str(value)))
    return out


@dataclass(frozen=True, slots=True)
class CloseInfo:
    """How one recorded stream ended."""

    method: str
    status: str
    details: str
    reason: str | None
    local_reason: str | None
    messages: int
    action: Action | None = None

    @classmethod
    def from_error(
        cls, method: str, err: grpc.RpcError, messages: int, local: str | None
    ) -> CloseInfo:
        """A call that ended in an RPC error: its status, details and reason trailer."""
        code: grpc.StatusCode = err.code()
        reason = _trailer_reason(err.trailing_metadata())
        action = classify_close(code, reason)
        return cls(method, code.name, err.details() or "", reason, local, messages, action=action)

    @classmethod
    def stalled(cls, method: str, why: str, messages: int) -> CloseInfo:
        """A call the stall watchdog ended (``why``): a deadline exceeded, to resubscribe."""
        name = grpc.StatusCode.DEADLINE_EXCEEDED.name
        return cls(method, name, why, None, why, messages, action=Action.RESUBSCRIBE)


_SESSION_VARIANTS: Final = {
    0: RecorderVariant.Stopped,
    1: RecorderVariant.Invalid,
    2: RecorderVariant.Usage,
    3: RecorderVariant.Unreachable,
}


def _session_error(message: str, exit_code: int) -> RecorderError:
    """A session that cannot go on; ``exit_code`` follows the CLI (1 invalid, 3 unreachable)."""
    return RecorderError(_SESSION_VARIANTS[exit_code], message, exit_code=exit_code)


# --------------------------------------------------------------------------------------------
# pool selection


def pool_key_text(pool: pb.KvPoolId) -> str:
    """``<cs>:<rs>/<dc>`` (hex digests, hex dc): a pool across its producer generations."""
    d = pool.indexer_domain
    return (
        f"{bytes(d.cache_semantics.digest).hex()}:{bytes(d.routing_scope.digest).hex()}"
        f"/{pool.dc_id:016x}"
    )


def producer_key_text(producer: pb.ProducerIdentity) -> str:
    """``<cs>:<rs>/<dc>@<incarnation>.<generation>`` (hex digests, hex dc and incarnation)."""
    return (
        f"{pool_key_text(producer.pool_id)}@{producer.producer_incarnation:x}"
        f".{producer.layout_generation}"
    )


def _relay_text(relay: pb.RelayIdentity) -> str:
    """``<drt_instance_id>/<relay_incarnation>`` in hex: which relay process, which start."""
    return f"{relay.drt_instance_id:016x}/{relay.relay_incarnation:016x}"


def _names(desc: pb.KvPoolDescriptor) -> list[str]:
    out: list[str] = []
    for reg in desc.registrations:
        out.append(reg.canonical_model_id)
        out.extend(reg.aliases)
    return out


def _pool_of(producer: pb.ProducerIdentity) -> tuple[Any, ...]:
    """The pool part of a producer key: what stays when the generation changes."""
    return producer_key(producer)[:4]


def pool_label(desc: pb.KvPoolDescriptor) -> str:
    """A pool for people: its first model name and its DC (``sim/model dc=1a2b... (name)``)."""
    names = [reg.canonical_model_id for reg in desc.registrations]
    return f"{names[0] if names else '-'} dc={dc_text(desc.producer.pool_id.dc_id)}"


def describe_pool(desc: pb.KvPoolDescriptor) -> str:
    """One line for ``--list``."""
    p, sem = desc.producer, desc.query_semantics
    ep = desc.serving_endpoint
    names = ", ".join(_names(desc)) or "-"
    fmt = pb.KvQueryHashFormat.Name(sem.hash_format).removeprefix("KV_QUERY_HASH_FORMAT_")
    roles = ",".join(pb.WorkerRole.Name(r).removeprefix("WORKER_ROLE_") for r in desc.pool_roles)
    return (
        f"{names}  dc={dc_text(p.pool_id.dc_id)}  buckets={p.ckf_format.bucket_count}  "
        f"block={sem.kv_block_size} {fmt}  roles={roles}  "
        f"endpoint={ep.namespace}/{ep.component}/{ep.endpoint}  key={producer_key_text(p)}"
    )


@dataclass(frozen=True, slots=True)
class PoolSelector:
    """Which pools to record: every catalog pool, or those matching each criterion kind given.

    A pool must match one of ``models`` (canonical id or alias), one of ``dcs`` (a name, hashed
    with ``stable_dc_id``, or 16 hex digits) and one of ``producers`` (a prefix of
    ``producer_key_text``; its ``pool_key_text`` part survives generation changes).
    """

    models: tuple[str, ...] = ()
    dcs: tuple[str, ...] = ()
    producers: tuple[str, ...] = ()

    def _dc_ids(self) -> set[int]:
        ids: set[int] = set()
        for dc in self.dcs:
            ids.add(stable_dc_id(dc).value)
            with contextlib.suppress(Cbi1kitError, ValueError):
                ids.add(DcId.parse(dc).value)
        return ids

    def matches(self, desc: pb.KvPoolDescriptor) -> bool:
        """Whether the catalog's pool ``desc`` meets every kind of criterion given."""
        if self.models and not set(self.models) & set(_names(desc)):
            return False
        if self.dcs and desc.producer.pool_id.dc_id not in self._dc_ids():
            return False
        key = producer_key_text(desc.producer)
        return not self.producers or any(key.startswith(p) for p in self.producers)

    def select(self, catalog: pb.KvPoolCatalogUpdate) -> list[pb.KvPoolDescriptor]:
        """The pools of ``catalog``'s snapshot this selector records, in catalog order."""
        return [d for d in catalog.snapshot.pools if self.matches(d)]


# --------------------------------------------------------------------------------------------
# the report


@dataclass(slots=True)
class PoolRecord:
    """One selected pool's part of a session: its ``SubscribeKvPool`` streams, one after the
    other as it resubscribes. ``ended`` says why it stopped recording before the session did
    (a failure for good: the relay refused it, it left the catalog, it was unreachable), with
    the CLI's ``exit_code`` for it; None while it records or when the session stopped it."""

    pool: str  # pool_key_text
    label: str  # pool_label
    messages: int = 0
    payload_bytes: int = 0
    subscriptions: int = 0
    last_sequence: int | None = None
    last_kind: str | None = None  # FilterUpdateKind name of its newest message
    violations: list[str] = field(default_factory=list)
    closes: list[CloseInfo] = field(default_factory=list)
    ended: str | None = None
    exit_code: int = 0


@dataclass(slots=True)
class RecordReport:
    """What a session did; ``exit_code`` is the CLI's. ``pools`` holds each selected pool's
    part in the order they were first subscribed; the pool figures beside it (``messages``,
    ``subscriptions``, ``last_sequence``, ``violations``, ...) are the session's, over every
    pool (with one pool, that pool's)."""

    exit_code: int = 0
    stop_reason: str = ""
    messages: int = 0
    payload_bytes: int = 0
    subscriptions: int = 0
    #: messages that parsed, per plane name (``PLANES``)
    plane_messages: dict[str, int] = field(default_factory=dict)
    #: planes the relay refused for good: ``"Method: STATUS details"``
    unserved: list[str] = field(default_factory=list)
    last_sequence: int | None = None
    last_kind: str | None = None  # FilterUpdateKind name of the newest pool message
    violations: list[str] = field(default_factory=list)
    closes: list[CloseInfo] = field(default_factory=list)
    pools: list[PoolRecord] = field(default_factory=list)
    #: appending to a capture whose last record was torn: what was cut off (else None)
    recovered: str | None = None
    #: messages of every RPC written to the capture (the relay's info and planes included)
    received: int = 0
    #: the capture this run started received no message at all and was not kept
    removed: bool = False

    @property
    def subscribe_closes(self) -> list[CloseInfo]:
        """How each ``SubscribeKvPool`` stream ended, in order."""
        return [c for c in self.closes if c.method == SUBSCRIBE_METHOD]

    @property
    def catalog_updates(self) -> int:
        """Catalog messages that parsed (``plane_messages["catalog"]``)."""
        return self.plane_messages.get(_CATALOG.name, 0)

    @property
    def failed_pools(self) -> list[PoolRecord]:
        """The pools that stopped recording for good before the session ended."""
        return [p for p in self.pools if p.ended is not None]

    def pool(self, key: str) -> PoolRecord:
        """The pool whose ``pool_key_text`` starts with ``key``, or whose label is
        ``key``; ``KeyError`` unless exactly one is."""
        found = [p for p in self.pools if p.pool.startswith(key) or p.label == key]
        if len(found) != 1:
            raise KeyError(f"{len(found)} recorded pools match {key!r}")
        return found[0]


@dataclass(frozen=True, slots=True)
class RecorderConfig:
    """Session settings; times in seconds. ``on_message`` is called after each pool message
    is written (tests use it to play a slow consumer)."""

    target: str
    capture: Path
    selector: PoolSelector = PoolSelector()
    subscriber_id: str = "cbi1kit-recorder"
    tls: ClientTls | None = None  # None: plaintext
    #: the ``:authority`` sent and, over TLS, the name the server's certificate must carry
    authority: str | None = None
    #: sent with every call (auth headers); only their names go into the capture
    metadata: tuple[tuple[str, str], ...] = ()
    duration: float | None = None
    max_frames: int | None = None
    validate: bool = False
    status: bool | None = None  # None: only when stderr is a terminal
    rpc_timeout: float = 10.0
    stall_timeout: float = 30.0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    backoff_reset_after: float = 30.0
    give_up_after: float | None = 60.0
    append: bool = False
    seed: int | None = None
    on_message: Callable[[pb.FilterUpdate], None] | None = None
    channel_options: tuple[tuple[str, Any], ...] = ()
    #: rotate to a new segment (``OUT.0001.kvrcap``, ...) at this many bytes / seconds
    rotate_bytes: int | None = None
    rotate_seconds: float | None = None

    def __post_init__(self) -> None:
        validate_base_subscriber_id(self.subscriber_id, path="RecorderConfig.subscriber_id")

    @property
    def rotates(self) -> bool:
        """Whether the capture rotates into segments (``rotate_bytes`` or ``rotate_seconds``)."""
        return self.rotate_bytes is not None or self.rotate_seconds is not None

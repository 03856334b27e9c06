"""Record a live ``dynamo.kvrelay.v1`` relay into a kvrcap capture file: the relay info, the
planes, and one stream per selected pool, each resubscribing on its own as a consumer does.
``docs/recorder.md`` gives the lifecycle, the schemas spoken and every reason to resubscribe.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal, TextIO

import grpc
from google.protobuf.message import DecodeError

from cbi1kit._files import unwritable
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._rotating import RotatingCaptureWriter
from cbi1kit.capture._segments import read_segment_info
from cbi1kit.capture._streams import (
    KV_EVENT_RELAY,
    SUBSCRIBE_KV_POOL_METHOD,
    WATCH_KV_POOL_CATALOG_METHOD,
)
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.errors import Cbi1kitError, RecorderError, RecorderVariant, RelayWireError
from cbi1kit.hashing._identity import DcId, stable_dc_id
from cbi1kit.relay._messages import (
    ERROR_REASON_TRAILER,
    MAX_MESSAGE_BYTES,
    RELAY_CONTRACT_MARKER,
    producer_key,
    validate_base_subscriber_id,
    validate_relay_info,
)
from cbi1kit.relay._planes import PlaneRules, PlaneUpdate, pool_source_violation
from cbi1kit.relay._stream import StepKind, StreamChecker
from cbi1kit.relay._transport import ClientTls, authority_host, keepalive_options

__all__ = [
    "CATALOG_METHOD",
    "PLANES",
    "POOL_LOAD_METHOD",
    "READINESS_METHOD",
    "RELAY_INFO_METHOD",
    "SERVING_LOAD_METHOD",
    "SUBSCRIBE_METHOD",
    "WITHHELD",
    "Action",
    "CloseInfo",
    "Plane",
    "PoolRecord",
    "PoolSelector",
    "RecordReport",
    "Recorder",
    "RecorderConfig",
    "classify_close",
    "describe_pool",
    "pool_key_text",
    "pool_label",
    "producer_key_text",
]

RELAY_INFO_METHOD: Final = KV_EVENT_RELAY + "GetRelayInfo"
CATALOG_METHOD: Final = WATCH_KV_POOL_CATALOG_METHOD
SUBSCRIBE_METHOD: Final = SUBSCRIBE_KV_POOL_METHOD  # the name the capture readers look for
READINESS_METHOD: Final = KV_EVENT_RELAY + "SubscribeServingReadiness"
POOL_LOAD_METHOD: Final = KV_EVENT_RELAY + "SubscribeKvPoolLoad"
SERVING_LOAD_METHOD: Final = KV_EVENT_RELAY + "SubscribeServingLoad"


@dataclass(frozen=True, slots=True)
class Plane:
    """A stream the recorder keeps open beside the pool's, for the whole session.

    ``required``: the session cannot go on without it (the catalog), so it is watched again
    whatever its end; another plane the relay refuses for good (``UNIMPLEMENTED`` from a relay
    of an older schema, a contract error) is given up and named in the report. ``heartbeat``:
    the relay sends at least every few seconds (readiness heartbeats every 10 s, load windows
    every 1 s upstream), so silence for ``stall_timeout`` ends the stream as a stall; the
    catalog speaks only on change.
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


#: what the capture holds in place of a header value the recorder sent (a credential)
WITHHELD: Final = "(not recorded)"

_SESSION_VARIANTS: Final = {
    0: RecorderVariant.Stopped,
    1: RecorderVariant.Invalid,
    2: RecorderVariant.Usage,
    3: RecorderVariant.Unreachable,
}
_DURATION_REACHED: Final = "duration reached"
_UNWRITABLE: Final = 3  # the README's exit code for an output that cannot be written


def _one_row(line: str, columns: int) -> str:
    """``line`` cut to fit one terminal row (short of the last column, where a terminal wraps),
    so ``\\r`` redraws it in place instead of scrolling."""
    room = max(1, columns - 1)
    return line if len(line) <= room else line[: room - 1] + "…"


def _session_error(message: str, exit_code: int) -> RecorderError:
    """A session that cannot go on; ``exit_code`` follows the CLI (1 invalid, 3 unreachable)."""
    return RecorderError(_SESSION_VARIANTS[exit_code], message, exit_code=exit_code)


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
    """A pool for people: its first model name and its DC id (``sim/model dc=1a2b...``)."""
    names = [reg.canonical_model_id for reg in desc.registrations]
    return f"{names[0] if names else '-'} dc={desc.producer.pool_id.dc_id:016x}"


def describe_pool(desc: pb.KvPoolDescriptor) -> str:
    """One line for ``--list``."""
    p, sem = desc.producer, desc.query_semantics
    ep = desc.serving_endpoint
    names = ", ".join(_names(desc)) or "-"
    fmt = pb.KvQueryHashFormat.Name(sem.hash_format).removeprefix("KV_QUERY_HASH_FORMAT_")
    roles = ",".join(pb.WorkerRole.Name(r).removeprefix("WORKER_ROLE_") for r in desc.pool_roles)
    return (
        f"{names}  dc={p.pool_id.dc_id:016x}  buckets={p.ckf_format.bucket_count}  "
        f"block={sem.kv_block_size} {fmt}  roles={roles}  "
        f"endpoint={ep.namespace}/{ep.component}/{ep.endpoint}  key={producer_key_text(p)}"
    )


@dataclass(frozen=True, slots=True)
class PoolSelector:
    """Which pools to record: no criterion, every pool of the catalog; otherwise a pool that
    matches one of the ``models``, one of the ``dcs`` and one of the ``producers``, each kind
    of criterion counting only when given (``cbi1kit record --model a --model b --dc x``: the
    pools of model a or b in DC x).

    A model is a canonical model id or alias; a DC a name (hashed with ``stable_dc_id``) or its
    16-hex-digit id; a producer a prefix of :func:`producer_key_text` (so the pool part alone,
    :func:`pool_key_text`, survives generation changes).
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
        """The pool whose :func:`pool_key_text` starts with ``key``, or whose label is
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


@dataclass(slots=True)
class _Watched:
    """A plane's open call and when it last spoke, for the stall watchdog."""

    call: Any
    last: float
    heartbeat: bool
    reason: str | None = None


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


class Recorder:
    """One recording session. ``run()`` blocks; ``stop()`` (any thread) ends it cleanly.

    Threads: the caller's runs the session (relay info, the first catalog, then waits); each
    plane is watched on its own (``_watch``), each selected pool subscribed on its own
    (:class:`_PoolStream`), a ticker flushes, runs the stall watchdog and the status line. One
    lock (``_lock``) guards the capture writer, the report and every stream's state.
    """

    def __init__(self, config: RecorderConfig, *, status_stream: TextIO | None = None) -> None:
        self.config = config
        self.report = RecordReport()
        self._stop = threading.Event()
        self._lock = threading.RLock()  # the writer and the shared state
        self._catalog_cond = threading.Condition(self._lock)
        self._catalog: pb.KvPoolCatalogUpdate | None = None
        self._rng = random.Random(config.seed)
        self._writer: CaptureWriter | RotatingCaptureWriter | None = None
        #: the capture's files: one, or a rotated recording's segments
        self.paths: list[Path] = []
        self._started_empty = False  # --append onto an empty file
        #: what the session waits for before its first frame (the status line says it)
        self._waiting = f"the relay at {config.target}"
        self._channel: grpc.Channel | None = None
        self._status_out = status_stream or sys.stderr
        show = config.status
        self._show_status = self._status_out.isatty() if show is None else show
        self._lag_ms: float | None = None
        self._status_len = 0
        self._watched: dict[str, _Watched] = {}  # plane name -> its open call
        #: --validate: the catalog and readiness streams' rules (under the lock)
        self._plane_rules = PlaneRules() if config.validate else None
        self._plane_threads: list[threading.Thread] = []
        #: every selected pool's stream, by pool key, once the session records (``_recording``)
        self._pools: dict[tuple[Any, ...], _PoolStream] = {}
        self._recording = False

    # -- public
    def stop(self, reason: str = "stopped") -> None:
        """End the session (any thread): keep the first stop reason, cancel every pool stream."""
        with self._lock:
            if not self._stop.is_set():
                self.report.stop_reason = self.report.stop_reason or reason
            self._stop.set()
            self._catalog_cond.notify_all()
            calls = [p.call for p in self._pools.values() if p.call is not None]
        for call in calls:
            call.cancel()

    def catalog(self) -> pb.KvPoolCatalogUpdate | None:
        """The newest pool catalog the relay sent, or None before the first."""
        with self._lock:
            return self._catalog

    def run(self, *, list_only: bool = False) -> RecordReport:
        """Record until stopped, the duration or frame limit, or a failure; the report.
        ``list_only``: fetch the catalog and stop."""
        cfg = self.config
        if cfg.duration is not None:
            timer = threading.Timer(cfg.duration, self.stop, args=(_DURATION_REACHED,))
            timer.daemon = True
            timer.start()
        else:
            timer = None
        self._channel = self._make_channel()
        ticker = threading.Thread(target=self._tick, name="cbi1kit-recorder-tick", daemon=True)
        try:
            mode = self._mode()
            writer: CaptureWriter | RotatingCaptureWriter
            if cfg.rotates or (mode == "a" and read_segment_info(cfg.capture) is not None):
                # a rotated recording goes on in its last segment, rotating on if asked
                writer = RotatingCaptureWriter(
                    cfg.capture,
                    rotate_bytes=cfg.rotate_bytes,
                    rotate_seconds=cfg.rotate_seconds,
                    mode=mode,
                    flush_records=16,
                    flush_seconds=0.2,
                )
                self.paths = writer.paths  # grows as it rotates
            else:
                writer = CaptureWriter(cfg.capture, mode=mode, flush_records=16, flush_seconds=0.2)
                self.paths = [cfg.capture]
            with self._closing(writer) as w:
                self._writer = w
                cut = w.recovered
                if cut is not None:  # appending cut a torn last record off: said, and marked
                    self.report.recovered = (
                        f"a torn last record was cut off before appending (record "
                        f"{cut.record_index} at byte offset {cut.at}: {cut.reason})"
                    )
                    w.mark(f"cbi1kit record --append: {self.report.recovered}")
                ticker.start()
                try:
                    self._session(list_only)
                except RecorderError as exc:
                    self.report.exit_code = exc.exit_code
                    self.report.stop_reason = str(exc)
                finally:
                    self.stop(self.report.stop_reason or "done")
                    self._join_streams()
                    with self._lock:
                        self._writer = None
            if self.report.received == 0:  # nothing a reader could use
                self._unkeep(mode)
        finally:
            if timer is not None:
                timer.cancel()
            self._channel.close()
            self._clear_status()
        return self.report

    @contextlib.contextmanager
    def _closing(self, writer: Any) -> Iterator[Any]:
        """``writer``, closed at the end; a close that cannot write (a full disk) ends the
        session as any failed write does, not as a traceback."""
        with contextlib.ExitStack() as stack:
            stack.push(self._close_failed)
            yield stack.enter_context(writer)

    def _close_failed(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, OSError):
            self._write_failed(exc)
            return True
        return False

    def _mode(self) -> Literal["x", "a"]:
        """``a`` to append to a capture that exists (an empty file is started); else ``x``."""
        capture = self.config.capture
        if not self.config.append or not capture.exists():
            return "x"
        self._started_empty = capture.is_file() and capture.stat().st_size == 0
        return "a"

    def _unkeep(self, mode: Literal["x", "a"]) -> None:
        """Take back a recording that received no message: the files this run made are
        removed; an empty file it started is empty again."""
        if mode == "a" and not self._started_empty:
            return
        for i, path in enumerate(self.paths):
            if i == 0 and mode == "a":
                os.truncate(path, 0)
            else:
                path.unlink(missing_ok=True)
        self.report.removed = True

    # -- plumbing
    def channel_options(self) -> list[tuple[str, Any]]:
        """The channel's settings: the relay's message size, no transparent retries (the
        recorder decides), upstream's keepalive, the authority (and TLS name) override."""
        cfg = self.config
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.enable_retries", 0),
            *keepalive_options(),
        ]
        if cfg.authority is not None:
            options.append(("grpc.default_authority", cfg.authority))
            if cfg.tls is not None:
                options.append(("grpc.ssl_target_name_override", authority_host(cfg.authority)))
        return [*options, *cfg.channel_options]

    def _make_channel(self) -> grpc.Channel:
        cfg = self.config
        if cfg.tls is not None:
            creds = cfg.tls.credentials()
            return grpc.secure_channel(cfg.target, creds, options=self.channel_options())
        return grpc.insecure_channel(cfg.target, options=self.channel_options())

    def _write_open(self, method: str, request: bytes, info: dict[str, Any]) -> int:
        """Open a stream in the capture; -1 once the writer is closed (a stream that outlived
        the session's end: nothing of it is written)."""
        cfg = self.config
        tls = cfg.tls
        transport = "plaintext" if tls is None else "mtls" if tls.private_key else "tls"
        info = {"transport": transport, **info}
        if cfg.authority is not None:
            info["authority"] = cfg.authority
        # header values are credentials: the capture keeps their names only
        metadata = [(key, WITHHELD) for key, _ in cfg.metadata]
        opened = self._write(
            lambda w: w.open_stream(cfg.target, method, request, metadata=metadata, info=info)
        )
        return -1 if opened is None else opened

    def _write(self, call: Callable[[Any], Any]) -> Any:
        """``call(writer)`` under the lock; None once the writer is closed. A write that fails
        (a full disk) ends the session, exit 3 naming the capture, and nothing more is
        written (the threads that write go on quietly to their end)."""
        with self._lock:
            if self._writer is None:
                return None
            try:
                return call(self._writer)
            except OSError as exc:
                self._writer = None
                self._write_failed(exc)
        # ended from another thread: this one may hold the lock for its caller
        threading.Thread(target=self.stop, name="cbi1kit-recorder-stop", daemon=True).start()
        return None

    def _write_failed(self, exc: OSError) -> None:
        """The session's end for a capture that cannot be written: the first such reason."""
        with self._lock:
            if self.report.exit_code == 0:
                self.report.exit_code = _UNWRITABLE
                self.report.stop_reason = str(unwritable([self.config.capture], exc))

    def _write_message(self, stream: int, data: bytes, wall: int, mono: int) -> None:
        """Append one message as received, with its receive times (wall, monotonic ns)."""
        if stream < 0:
            return
        with self._lock:
            written = self._write(
                lambda w: w.message(stream, data, recv_unix_ns=wall, recv_mono_ns=mono) or True
            )
            self.report.received += written is not None

    def _write_close(
        self,
        stream: int,
        close: CloseInfo,
        trailers: list[tuple[str, str]],
        pool: PoolRecord | None = None,
    ) -> None:
        with self._lock:
            self.report.closes.append(close)
            if pool is not None:
                pool.closes.append(close)
            if stream < 0:
                return
            code = getattr(grpc.StatusCode, close.status, None)
            self._write(
                lambda w: w.close_stream(
                    stream,
                    status_code=code.value[0] if code is not None else -1,
                    status_name=close.status,
                    details=close.details,
                    error_reason=close.reason,
                    local_reason=close.local_reason,
                    trailing_metadata=trailers,
                )
            )

    def _close_from_error(
        self, method: str, err: grpc.RpcError, messages: int, local: str | None
    ) -> CloseInfo:
        code: grpc.StatusCode = err.code()
        reason = _trailer_reason(err.trailing_metadata())
        action = classify_close(code, reason)
        return CloseInfo(
            method, code.name, err.details() or "", reason, local, messages, action=action
        )

    def _tick(self) -> None:
        """Flushes, stall watchdog (every pool stream and every heartbeat plane) and the status
        line, every 0.2 s."""
        limit = self.config.stall_timeout
        reason = f"stall deadline: no message within {limit} s"
        while not self._stop.wait(0.2):
            now = time.monotonic()
            cancel = []
            with self._lock:
                self._write(lambda w: w.flush())
                for pool in self._pools.values():
                    if pool.call is not None and now - pool.last_recv > limit:
                        pool.call_reason, pool.stalled = reason, True
                        cancel.append(pool.call)
                for watched in self._watched.values():
                    if watched.heartbeat and watched.reason is None and now - watched.last > limit:
                        watched.reason = reason
                        cancel.append(watched.call)
            for call in cancel:
                call.cancel()
            self._print_status()

    def status_line(self) -> str:
        """The live status: frames, bytes, the newest sequence, lag, subscriptions; with several
        pools, how many record and each one's frames and newest sequence (``[i] frames@seq``)."""
        with self._lock:
            r = self.report
            if r.messages == 0 and self._waiting:
                return f"waiting for {self._waiting}  subscriptions {r.subscriptions}"
            lag = "-" if self._lag_ms is None else f"{self._lag_ms:.1f} ms"
            head = f"frames {r.messages}  bytes {r.payload_bytes / 1048576:.1f} MiB  "
            if len(r.pools) <= 1:
                seq = "-" if r.last_sequence is None else str(r.last_sequence)
                return f"{head}seq {seq}  lag {lag}  subscriptions {r.subscriptions}"
            live = sum(p.ended is None for p in r.pools)
            each = " ".join(
                f"[{i}] {p.messages}@{'-' if p.last_sequence is None else p.last_sequence}"
                + ("!" if p.ended is not None else "")
                for i, p in enumerate(r.pools)
            )
            return (
                f"pools {live}/{len(r.pools)}  {head}lag {lag}  "
                f"subscriptions {r.subscriptions}  {each}"
            )

    def _print_status(self) -> None:
        if not self._show_status:
            return
        line = _one_row(self.status_line(), shutil.get_terminal_size((80, 24)).columns)
        pad = max(0, self._status_len - len(line))
        self._status_out.write("\r" + line + " " * pad)
        self._status_out.flush()
        self._status_len = len(line)

    def _clear_status(self) -> None:
        if self._show_status and self._status_len:
            self._status_out.write("\r" + " " * self._status_len + "\r")
            self._status_out.flush()

    def _sleep(self, seconds: float) -> bool:
        """Wait unless stopped; True if the session should go on."""
        return not self._stop.wait(seconds)

    # -- the session
    def _relay_info(self) -> None:
        """``GetRelayInfo`` until the relay answers in our contract. Its identity is not kept:
        it holds only until the relay restarts; each stream is checked against its own
        (``StreamChecker``), and each subscription records its catalog's."""
        assert self._channel is not None
        cfg = self.config
        call = self._channel.unary_unary(
            RELAY_INFO_METHOD,
            request_serializer=pb.RelayInfoRequest.SerializeToString,
            response_deserializer=None,
        )
        request = pb.RelayInfoRequest(contract_marker=RELAY_CONTRACT_MARKER)
        started = time.monotonic()
        delay = cfg.backoff_initial
        for attempt in itertools.count(1):
            stream = self._write_open(RELAY_INFO_METHOD, request.SerializeToString(), {})
            try:
                raw, rpc = call.with_call(request, timeout=cfg.rpc_timeout, metadata=cfg.metadata)
            except grpc.RpcError as err:
                close = self._close_from_error(RELAY_INFO_METHOD, err, 0, None)
                self._write_close(stream, close, _md(err.trailing_metadata()))
                if close.action is Action.FATAL:
                    raise _session_error(f"GetRelayInfo: {close.details}", 1) from None
                why = f"{close.status} {close.details}{self._tls_hint()}"
                failure = (f"relay {cfg.target} unreachable: {why}", 3)
                self._waiting = f"the relay at {cfg.target} (try {attempt}: {close.status})"
            else:
                self._write_message(stream, raw, time.time_ns(), time.monotonic_ns())
                try:
                    info = pb.RelayInfo.FromString(raw)
                except DecodeError as exc:
                    # a bad message ends that call, kept as received; like the gateway's failed
                    # connect_and_verify (relay.md §3.2) it is retried after backoff
                    local = f"malformed RelayInfo: {exc}"
                    close = CloseInfo(RELAY_INFO_METHOD, "OK", "", None, local, 1)
                    self._write_close(stream, close, _md(rpc.trailing_metadata()))
                    failure = (f"relay {cfg.target} answers no RelayInfo: {exc}", 1)
                else:
                    close = CloseInfo(RELAY_INFO_METHOD, "OK", "", None, None, 1)
                    self._write_close(stream, close, _md(rpc.trailing_metadata()))
                    try:
                        validate_relay_info(info)  # the contract's envelope rules, once
                    except RelayWireError as exc:
                        raise _session_error(f"relay speaks another contract: {exc}", 1) from None
                    self._waiting = f"the pool catalog of {cfg.target}"
                    return
            waited = time.monotonic() - started
            if cfg.give_up_after is not None and waited >= cfg.give_up_after:
                raise _session_error(*failure)
            pause = self._jitter(delay)
            if cfg.give_up_after is not None:  # the last try comes when the budget ends
                pause = min(pause, cfg.give_up_after - waited)
            if not self._sleep(pause):
                if self.report.stop_reason == _DURATION_REACHED:  # never answered: a failure
                    raise _session_error(*failure)
                raise _session_error("stopped before the relay answered", 0)
            delay = min(delay * 2, cfg.backoff_max)

    def _tls_hint(self) -> str:
        """What to check when a TLS relay never answers: a refused client (mTLS) shows only as
        a closed socket, since TLS 1.3 checks the client after the handshake."""
        tls = self.config.tls
        if tls is None:
            return ""
        if tls.private_key is None:
            return (
                " (TLS: check --ca-cert and --authority; a relay that requires a client "
                "certificate needs --client-cert and --client-key)"
            )
        return " (TLS: check --ca-cert and --authority, and that the relay trusts --client-cert)"

    def _jitter(self, delay: float) -> float:
        """Equal jitter: half fixed, half random."""
        return delay / 2 + self._rng.random() * delay / 2

    def _session(self, list_only: bool) -> None:
        cfg = self.config
        self._relay_info()
        for plane in PLANES if not list_only else (_CATALOG,):
            thread = threading.Thread(
                target=self._watch, args=(plane,), name=f"cbi1kit-recorder-{plane.name}"
            )
            thread.daemon = True
            self._plane_threads.append(thread)
            thread.start()
        with self._catalog_cond:
            deadline = time.monotonic() + cfg.rpc_timeout
            while self._catalog is None and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._catalog_cond.wait(left)
            catalog = self._catalog
        if catalog is None:
            if self._stop.is_set() and self.report.stop_reason:
                return
            raise _session_error(f"no pool catalog from {cfg.target} within {cfg.rpc_timeout} s", 3)
        if list_only:
            self.report.stop_reason = "listed the catalog"
            return
        with self._catalog_cond:
            catalog = self._catalog
            assert catalog is not None
            if not cfg.selector.select(catalog):
                raise _session_error("no pool in the catalog matches the selection (try --list)", 1)
            self._recording = True
            self._follow(catalog)
            self._waiting = f"the first frame of {len(self._pools)} selected pool(s)"
        self._await_pools()

    def _follow(self, catalog: pb.KvPoolCatalogUpdate) -> None:
        """A stream for every selected pool of ``catalog`` that has none: a pool seen for the
        first time, or one that failed and is back (it had left the catalog, or the catalog
        now advertises another producer than the one that failed). Under the lock."""
        if not self._recording or self._stop.is_set():
            return
        for desc in self.config.selector.select(catalog):
            pool = _pool_of(desc.producer)
            stream = self._pools.get(pool)
            if stream is None:
                record = PoolRecord(pool_key_text(desc.producer.pool_id), pool_label(desc))
                stream = _PoolStream(self, pool, record)
                self._pools[pool] = stream
                self.report.pools.append(record)
                stream.start()
            elif stream.failed and stream.retry_key != producer_key(desc.producer):
                stream.start()

    def _await_pools(self) -> None:
        """Until the session stops, or every pool's stream has failed for good (the session
        then fails with it: one pool's error as it is, several named each)."""
        with self._catalog_cond:
            while True:
                streams = list(self._pools.values())
                crashed = [s.crash for s in streams if s.crash is not None]
                if crashed:
                    raise crashed[0]
                if self._stop.is_set():
                    return
                if streams and all(s.failed for s in streams):
                    errors = [(s.record, s.error) for s in streams if s.error is not None]
                    break
                self._catalog_cond.wait(0.5)
        if len(errors) == 1:
            raise errors[0][1]
        named = "; ".join(f"{record.label}: {err}" for record, err in errors)
        raise _session_error(f"every selected pool failed: {named}", errors[0][1].exit_code)

    # -- the planes (a background thread each)
    def _watch(self, plane: Plane) -> None:
        """Keep one plane's stream open: every message raw into the capture; watched again
        after backoff whenever it ends (a malformed message, a stall, an error, a clean EOF),
        unless the relay refuses an optional plane for good."""
        assert self._channel is not None
        cfg = self.config
        stub = self._channel.unary_stream(
            plane.method,
            request_serializer=plane.request.SerializeToString,
            response_deserializer=None,
        )
        request = plane.request(
            subscriber_id=cfg.subscriber_id, contract_marker=RELAY_CONTRACT_MARKER
        )
        delay = cfg.backoff_initial
        while not self._stop.is_set():
            stream = self._write_open(plane.method, request.SerializeToString(), {})
            with self._lock:
                if self._stop.is_set():
                    stopped = CloseInfo(plane.method, "CANCELLED", "", None, "stopped", 0)
                    self._write_close(stream, stopped, [])
                    return
                call = stub(request, metadata=cfg.metadata)
                watched = _Watched(call, time.monotonic(), plane.heartbeat)
                self._watched[plane.name] = watched
            count = parsed = 0
            malformed: str | None = None
            close: CloseInfo | None = None
            try:
                for raw in call:
                    self._write_message(stream, raw, time.time_ns(), time.monotonic_ns())
                    count += 1
                    try:
                        update = plane.response.FromString(raw)
                    except DecodeError as exc:  # ends this watch; the next starts after backoff
                        malformed = f"malformed {plane.response.__name__}: {exc}"
                        call.cancel()
                        break
                    parsed += 1
                    self._took(plane, watched, stream, update)
                else:
                    close = CloseInfo(plane.method, "OK", "clean end of stream", None, "EOF", count)
                    self._write_close(stream, close, _md(call.trailing_metadata()))
            except grpc.RpcError as err:
                local = watched.reason or ("stopped" if self._stop.is_set() else None)
                close = self._close_from_error(plane.method, err, count, local)
                if watched.reason is not None:
                    close = CloseInfo(
                        plane.method,
                        grpc.StatusCode.DEADLINE_EXCEEDED.name,
                        watched.reason,
                        None,
                        watched.reason,
                        count,
                        action=Action.RESUBSCRIBE,
                    )
                self._write_close(stream, close, _md(err.trailing_metadata()))
            finally:
                with self._lock:
                    self._watched.pop(plane.name, None)
                    if self._plane_rules is not None:
                        self._plane_rules.close(stream)
            if malformed is not None:
                close = CloseInfo(plane.method, "CANCELLED", "", None, malformed, count)
                self._write_close(stream, close, [])
            if close is not None and close.action is Action.FATAL and not plane.required:
                if not self._stop.is_set():
                    with self._lock:
                        name = plane.method.rsplit("/", 1)[1]
                        self.report.unserved.append(f"{name}: {close.status} {close.details}")
                return
            if parsed:
                delay = cfg.backoff_initial
            if not self._sleep(self._jitter(delay)):
                return
            delay = min(delay * 2, cfg.backoff_max)

    def _took(self, plane: Plane, watched: _Watched, stream: int, update: Any) -> None:
        """One parsed plane message: counted, checked (--validate: the catalog and readiness
        streams' rules), and a catalog followed."""
        with self._lock:
            watched.last = time.monotonic()
            counts = self.report.plane_messages
            counts[plane.name] = counts.get(plane.name, 0) + 1
            rules = self._plane_rules
            broken = None
            if rules is not None and isinstance(update, PlaneUpdate):
                broken = rules.check(stream, update)
            if broken is not None:
                self.report.violations.append(
                    f"{broken.plane} stream {stream}: {broken.rule}: {broken.reason}"
                )
        if plane is _CATALOG:
            self._on_catalog(update)

    def _join_streams(self) -> None:
        """End every plane's and pool's call and wait for their threads (bounded)."""
        with self._lock:
            calls = [w.call for w in self._watched.values()]
            calls += [p.call for p in self._pools.values() if p.call is not None]
            threads = [*self._plane_threads]
            threads += [p.thread for p in self._pools.values() if p.thread is not None]
        for call in calls:
            call.cancel()
        deadline = time.monotonic() + 5.0
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _on_catalog(self, update: pb.KvPoolCatalogUpdate) -> None:
        """Keep the newest catalog; end each pool's subscription whose producer left or
        changed; start a stream for each selected pool that has none."""
        cancel = []
        with self._catalog_cond:
            self._catalog = update
            self._catalog_cond.notify_all()
            for stream in self._pools.values():
                call = stream.on_catalog(update)
                if call is not None:
                    cancel.append(call)
            self._follow(update)
        for call in cancel:
            call.cancel()


@dataclass(slots=True)
class _Taken:
    """What one subscription call took: messages kept, and why we ended it (None: the relay
    or the frame limit did)."""

    count: int = 0
    local: str | None = None


def _open_info(
    cfg: RecorderConfig, producer: pb.ProducerIdentity, catalog: pb.KvPoolCatalogUpdate
) -> dict[str, Any]:
    """A pool stream's open record: the catalog the key came from too (its revisions count
    anew after a relay restart, so the revision alone is ambiguous without its relay)."""
    return {
        "subscriber_id": cfg.subscriber_id,
        "producer_key": producer_key_text(producer),
        "catalog_revision": catalog.revision,
        "catalog_relay": _relay_text(catalog.relay),
    }


class _PoolStream:
    """One selected pool's ``SubscribeKvPool`` stream, on its own thread, with its own
    resubscription state: the producer it subscribed to, backoff, the stall watchdog's clock,
    why it ended, and its part of the report (``record``). Everything it shares with the
    session (the writer, the catalog, the report) is under the recorder's lock."""

    def __init__(self, recorder: Recorder, pool: tuple[Any, ...], record: PoolRecord) -> None:
        self.r = recorder
        self.pool = pool
        self.record = record
        seed = recorder.config.seed
        self._rng = random.Random(None if seed is None else f"{seed}/{record.pool}")
        self.call: Any = None
        self.call_reason: str | None = None
        self.stalled = False  # the watchdog ended the call: no message within stall_timeout
        self.last_recv = time.monotonic()
        self.current: pb.ProducerIdentity | None = None
        self.thread: threading.Thread | None = None
        self.running = False  # its thread is on (set and cleared under the lock)
        #: the failure that ended it for good, and the producer key it failed on (None: it left
        #: the catalog): only a catalog that advertises another key starts it again
        self.error: RecorderError | None = None
        self.retry_key: tuple[Any, ...] | None = None
        self.crash: BaseException | None = None  # a bug: the session re-raises it

    @property
    def failed(self) -> bool:
        """Ended for good: its thread is over, with an error."""
        return not self.running and self.error is not None

    def start(self) -> None:
        """Start (or, after a failure, restart) its thread. Under the recorder's lock."""
        if self.running:
            return
        self.running = True
        self.error, self.retry_key = None, None
        self.record.ended, self.record.exit_code = None, 0
        self.thread = threading.Thread(
            target=self._run, name=f"cbi1kit-recorder-pool-{self.record.label}", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        try:
            self._loop()
        except RecorderError as exc:
            with self.r._lock:
                self.error = exc
                self.record.ended, self.record.exit_code = str(exc), exc.exit_code
        except BaseException as exc:  # a bug or an unwritable capture: the session ends on it
            self.crash = exc
            self.r.stop(f"{type(exc).__name__}: {exc}")
        finally:
            with self.r._catalog_cond:
                self.running = False
                self.r._catalog_cond.notify_all()  # the session checks whether any is left

    def candidates(self, catalog: pb.KvPoolCatalogUpdate) -> list[pb.KvPoolDescriptor]:
        """The catalog's entries of this pool that the selection still picks."""
        return [
            d
            for d in catalog.snapshot.pools
            if _pool_of(d.producer) == self.pool and self.r.config.selector.matches(d)
        ]

    def on_catalog(self, update: pb.KvPoolCatalogUpdate) -> Any:
        """The open call to end if ``update`` withdrew this pool or advertises another producer
        generation for it (None: keep it). Under the recorder's lock."""
        if self.current is None or self.call is None:
            return None
        key = producer_key(self.current)
        same_pool = self.candidates(update)
        if not same_pool:
            self.call_reason, self.stalled = "catalog: pool withdrawn", False
            return self.call
        if all(producer_key(p.producer) != key for p in same_pool):
            self.call_reason, self.stalled = "catalog: new producer generation", False
            return self.call
        return None

    def _pick(
        self, avoid: tuple[Any, ...] | None, wait: float | None
    ) -> tuple[pb.ProducerIdentity, pb.KvPoolCatalogUpdate] | None:
        """The pool's producer and the newest catalog it is from; with ``avoid``, wait up to
        ``wait`` seconds (None: until the session stops) for a catalog that advertises another
        key."""
        r = self.r
        deadline = None if wait is None else time.monotonic() + wait
        with r._catalog_cond:
            while True:
                catalog = r._catalog
                pools = [] if catalog is None else self.candidates(catalog)
                if pools and producer_key(pools[0].producer) != avoid:
                    assert catalog is not None
                    return pools[0].producer, catalog
                if r._stop.is_set():
                    return None
                if deadline is None:
                    r._catalog_cond.wait(1.0)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                r._catalog_cond.wait(left)

    def _loop(self) -> None:
        r, cfg = self.r, self.r.config
        delay = cfg.backoff_initial
        unreachable_since: float | None = None
        avoid: tuple[Any, ...] | None = None
        while not r._stop.is_set():
            wait = cfg.backoff_max if avoid is not None else 0.0
            if cfg.give_up_after is not None and unreachable_since is not None:
                # waiting for a catalog naming another producer spends the same budget
                spent = time.monotonic() - unreachable_since
                wait = min(wait, max(0.0, cfg.give_up_after - spent))
            picked = self._pick(avoid, wait)
            if picked is None:
                picked = self._pick(None, 0.0)
            if picked is None:
                # The pool is withdrawn; wait for it to come back, bounded by give_up_after.
                picked = self._pick(None, cfg.give_up_after)
                if picked is None:
                    if r._stop.is_set():
                        return
                    raise _session_error("the selected pool left the catalog", 3)
                # it was the pool that was gone, not the relay: the catalog naming it again
                # came from the relay, so its failed subscriptions before do not count
                unreachable_since = None
            producer, catalog = picked
            started = time.monotonic()
            close = self._once(producer, catalog)
            if close.action is Action.STOP or r._stop.is_set():
                return
            if close.action is Action.FATAL:
                self.retry_key = producer_key(producer)
                raise _session_error(f"SubscribeKvPool: {close.status} {close.details}", 1)
            lasted = time.monotonic() - started
            if lasted >= cfg.backoff_reset_after:
                delay = cfg.backoff_initial
            if close.messages > 0:  # the relay answered until now: an outage starts here
                unreachable_since = time.monotonic()
            elif unreachable_since is None:
                unreachable_since = started
            if (
                cfg.give_up_after is not None
                and unreachable_since is not None
                and time.monotonic() - unreachable_since >= cfg.give_up_after
            ):
                self.retry_key = producer_key(producer)
                raise _session_error(
                    f"relay {cfg.target} unreachable for {cfg.give_up_after} s: "
                    f"{close.status} {close.details}",
                    3,
                )
            avoid = producer_key(producer) if close.action is Action.REFRESH else None
            pause = delay / 2 + self._rng.random() * delay / 2  # equal jitter
            if cfg.give_up_after is not None and unreachable_since is not None:
                # a backoff grown over a flapping relay does not outlast the budget
                spent = time.monotonic() - unreachable_since
                pause = min(pause, max(0.0, cfg.give_up_after - spent))
            if not r._sleep(pause):
                return
            delay = min(delay * 2, cfg.backoff_max)

    def _once(self, producer: pb.ProducerIdentity, catalog: pb.KvPoolCatalogUpdate) -> CloseInfo:
        r, cfg = self.r, self.r.config
        assert r._channel is not None
        record = self.record
        request = pb.SubscribeKvPoolRequest(
            subscriber_id=cfg.subscriber_id,
            expected_producer=producer,
            contract_marker=RELAY_CONTRACT_MARKER,
        )
        stream = r._write_open(
            SUBSCRIBE_METHOD, request.SerializeToString(), _open_info(cfg, producer, catalog)
        )
        stub = r._channel.unary_stream(
            SUBSCRIBE_METHOD,
            request_serializer=pb.SubscribeKvPoolRequest.SerializeToString,
            response_deserializer=None,
        )
        # --validate: the replay engine's rules over this stream (its relay identity is the
        # stream's own: a restarted relay answers the next subscription with a new one), and
        # whether upstream's consumer would take a CKF stream from the pool at all
        checker = StreamChecker(expected_producer=producer) if cfg.validate else None
        source = pool_source_violation(stream, producer, catalog) if cfg.validate else None
        if source is not None:
            self._violation(f"pool stream {stream}: {source.rule}: {source.reason}")
        taken = _Taken()
        with r._lock:
            if r._stop.is_set():
                close = CloseInfo(SUBSCRIBE_METHOD, "CANCELLED", "", None, "stopped", 0)
                r._write_close(stream, close, [], record)
                return replace(close, action=Action.STOP)
            call = stub(request, wait_for_ready=False, metadata=cfg.metadata)
            self.call, self.call_reason, self.stalled = call, None, False
            self.current = producer
            self.last_recv = time.monotonic()
            record.subscriptions += 1
            r.report.subscriptions += 1
        try:
            for raw in call:
                if self._take(stream, raw, call, checker, taken):
                    break
            else:
                close = CloseInfo(
                    SUBSCRIBE_METHOD,
                    "OK",
                    "clean end of stream",
                    _trailer_reason(call.trailing_metadata()),
                    "EOF",
                    taken.count,
                    action=Action.RESUBSCRIBE,
                )
                r._write_close(stream, close, _md(call.trailing_metadata()), record)
                return close
        except grpc.RpcError as err:
            close = self._error_close(err, taken)
            r._write_close(stream, close, _md(err.trailing_metadata()), record)
            return close
        finally:
            with r._lock:
                self.call = None
        # left the loop ourselves: a validation failure or the frame limit
        with r._lock:
            reason_text = taken.local or r.report.stop_reason or "stopped"
        action = Action.STOP if r._stop.is_set() else Action.RESUBSCRIBE
        close = CloseInfo(SUBSCRIBE_METHOD, "CANCELLED", "", None, reason_text, taken.count, action)
        r._write_close(stream, close, [], record)
        return close

    def _take(
        self, stream: int, raw: bytes, call: Any, checker: StreamChecker | None, taken: _Taken
    ) -> bool:
        """One message of the stream: kept as received, counted, validated; whether to stop
        reading (``taken.local`` then says why, unless the frame limit was reached)."""
        r, cfg, record = self.r, self.r.config, self.record
        wall, mono = time.time_ns(), time.monotonic_ns()
        try:
            update = pb.FilterUpdate.FromString(raw)
        except DecodeError as exc:
            # relay.md: a message that does not decode ends the stream; resubscribe
            # (the bytes are kept in the capture as received)
            r._write_message(stream, raw, wall, mono)
            taken.count += 1
            taken.local = f"malformed FilterUpdate: {exc}"
            if checker is not None:
                self._violation(f"relay-protobuf-decode: {exc}")
            call.cancel()
            return True
        kind = pb.FilterUpdateKind.Name(update.kind)
        with r._lock:
            if cfg.max_frames is not None and r.report.messages >= cfg.max_frames:
                return True  # another pool's message was the last one asked for
            r._write_message(stream, raw, wall, mono)
            taken.count += 1
            self.last_recv = time.monotonic()
            for figures in (r.report, record):
                figures.messages += 1
                figures.payload_bytes += len(update.payload)
                figures.last_sequence = update.sequence
                figures.last_kind = kind
            r._lag_ms = (wall / 1000 - update.send_ts_us) / 1000
            last = cfg.max_frames is not None and r.report.messages >= cfg.max_frames
            if last:  # exactly max_frames, whichever pools they came from
                r.stop("frame limit reached")
        if checker is not None:
            step = checker.check(update)
            if step.kind is StepKind.VIOLATION:
                problem = f"{step.rule}: {step.reason}"
                self._violation(problem)
                taken.local = f"validation: {problem}"
                call.cancel()
                return True
        if cfg.on_message is not None:
            cfg.on_message(update)
        return last

    def _error_close(self, err: grpc.RpcError, taken: _Taken) -> CloseInfo:
        """How a call that ended in an RPC error closes, and what follows (resubscribe, stop)."""
        r = self.r
        with r._lock:
            stalled = taken.local is None and self.stalled
            local = taken.local or self.call_reason
        if err.code() == grpc.StatusCode.CANCELLED and local is None and r._stop.is_set():
            local = r.report.stop_reason or "stopped"
        close = r._close_from_error(SUBSCRIBE_METHOD, err, taken.count, local)
        if stalled and local is not None:
            return CloseInfo(
                SUBSCRIBE_METHOD,
                grpc.StatusCode.DEADLINE_EXCEEDED.name,
                local,
                None,
                local,
                taken.count,
                action=Action.RESUBSCRIBE,
            )
        if r._stop.is_set() and close.status == "CANCELLED":
            return replace(close, action=Action.STOP)
        if local is not None and close.status == "CANCELLED":
            return replace(close, action=Action.RESUBSCRIBE)
        return close

    def _violation(self, problem: str) -> None:
        with self.r._lock:
            self.r.report.violations.append(problem)
            self.record.violations.append(problem)

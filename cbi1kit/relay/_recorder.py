"""Record a live ``dynamo.kvrelay.v1`` relay into a kvrcap capture file: the relay info, the
planes, and one stream per selected pool, each resubscribing on its own as a consumer does.
``docs/recorder.md`` gives the lifecycle, the schemas spoken and every reason to resubscribe.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal, TextIO

import grpc
from google.protobuf.message import DecodeError

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._rotating import RotatingCaptureWriter
from cbi1kit.capture._segments import read_segment_info
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.errors import RecorderError, RelayWireError
from cbi1kit.relay._core import _RecorderCore
from cbi1kit.relay._messages import (
    MAX_MESSAGE_BYTES,
    RELAY_CONTRACT_MARKER,
    producer_key,
    validate_relay_info,
)
from cbi1kit.relay._plane_watch import _PlaneWatch
from cbi1kit.relay._pool_stream import _PoolStream
from cbi1kit.relay._session import (
    _CATALOG,
    PLANES,
    RELAY_INFO_METHOD,
    Action,
    CloseInfo,
    PoolRecord,
    RecorderConfig,
    RecordReport,
    _md,
    _pool_of,
    _session_error,
    pool_key_text,
    pool_label,
)
from cbi1kit.relay._transport import authority_host, keepalive_options

_DURATION_REACHED: Final = "duration reached"


def _one_row(line: str, columns: int) -> str:
    """``line`` cut to fit one terminal row (short of the last column, where a terminal wraps),
    so ``\\r`` redraws it in place instead of scrolling."""
    room = max(1, columns - 1)
    return line if len(line) <= room else line[: room - 1] + "…"


class Recorder(_RecorderCore):
    """One recording session. ``run()`` blocks; ``stop()`` (any thread) ends it cleanly.

    Threads: the caller's runs the session; each plane (``_PlaneWatch``) and selected pool
    (``_PoolStream``) has its own; a ticker flushes and runs the stall watchdog and status
    line. Shared state is ``_RecorderCore``'s, under its one lock.
    """

    def __init__(self, config: RecorderConfig, *, status_stream: TextIO | None = None) -> None:
        super().__init__(config)
        #: the capture's files: one, or a rotated recording's segments
        self.paths: list[Path] = []
        self._started_empty = False  # --append onto an empty file
        #: what the session waits for before its first frame (the status line says it)
        self._waiting = f"the relay at {config.target}"
        self._status_out = status_stream or sys.stderr
        show = config.status
        self._show_status = self._status_out.isatty() if show is None else show
        self._status_len = 0
        self._planes: list[_PlaneWatch] = []  # each plane's watch, once the session starts
        #: every selected pool's stream, by pool key, once the session records (``_recording``)
        self._pools: dict[tuple[Any, ...], _PoolStream] = {}
        self._recording = False

    # -- public
    def stop(self, reason: str = "stopped") -> None:
        """End the session (any thread): keep the first stop reason, cancel every pool stream."""
        with self._lock:
            super().stop(reason)
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
                for watch in self._planes:
                    quiet = watch.call is not None and now - watch.last > limit
                    if quiet and watch.plane.heartbeat and watch.reason is None:
                        watch.reason = reason
                        cancel.append(watch.call)
            for call in cancel:
                call.cancel()
            self._print_status()

    @property
    def waiting(self) -> str | None:
        """What the recording still waits for before its first frame (None: frames flow)."""
        with self._lock:
            return self._waiting if self.report.messages == 0 and self._waiting else None

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
                close = CloseInfo.from_error(RELAY_INFO_METHOD, err, 0, None)
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

    def _session(self, list_only: bool) -> None:
        cfg = self.config
        self._relay_info()
        planes = PLANES if not list_only else (_CATALOG,)
        self._planes = [_PlaneWatch(self, plane, self._on_catalog) for plane in planes]
        for watch in self._planes:
            watch.thread.start()
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

    def _join_streams(self) -> None:
        """End every plane's and pool's call and wait for their threads (bounded)."""
        with self._lock:
            calls = [w.call for w in self._planes if w.call is not None]
            calls += [p.call for p in self._pools.values() if p.call is not None]
            threads = [w.thread for w in self._planes]
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


class BackgroundRecorder:
    """A :class:`Recorder` on a thread of its own, into ``output`` or a scratch capture
    (``path``) that ``stop()`` removes: what ``watch`` and ``ck.live`` follow. ``config``: the
    other :class:`RecorderConfig` fields; one that upstream's relay would refuse raises here,
    before anything starts."""

    def __init__(self, output: str | os.PathLike[str] | None, name: str, **config: Any) -> None:
        import tempfile

        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        if output is None:
            self._scratch = tempfile.TemporaryDirectory(prefix=f"{name}-")
            output = Path(self._scratch.name) / f"{name}.kvrcap"
        self.path = Path(output)
        try:
            self.recorder = Recorder(RecorderConfig(capture=self.path, status=False, **config))
        except BaseException:
            self._cleanup()
            raise
        self._thread = threading.Thread(target=self.recorder.run, name=name, daemon=True)
        self._thread.start()

    @property
    def report(self) -> RecordReport:
        """The recording's report so far: ``exit_code`` non-zero once it has failed."""
        return self.recorder.report

    def stop(self, reason: str) -> None:
        """End the recording, wait for its thread, remove a scratch capture."""
        self.recorder.stop(reason)
        self._thread.join(timeout=30)
        self._cleanup()

    def _cleanup(self) -> None:
        if self._scratch is not None:
            self._scratch.cleanup()

"""What every stream of a recording session shares, under one lock: the channel, the capture
written as received, the newest catalog, the report, and the stop.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any, Final

import grpc

from cbi1kit._files import unwritable
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._rotating import RotatingCaptureWriter
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.hashing._dc_names import said_dc_names
from cbi1kit.relay._planes import PlaneRules
from cbi1kit.relay._session import CloseInfo, PoolRecord, RecorderConfig, RecordReport

#: what the capture holds in place of a header value the recorder sent (a credential)
WITHHELD: Final = "(not recorded)"

_UNWRITABLE: Final = 3  # the README's exit code for an output that cannot be written


class _RecorderCore:
    """What a session's threads share: one lock (``_lock``) guards the capture writer, the
    report and every stream's state; ``_catalog_cond`` wakes whoever waits for a catalog or the
    stop. A write that fails (a full disk) ends the session.
    """

    def __init__(self, config: RecorderConfig) -> None:
        self.config = config
        self.report = RecordReport()
        self._stop = threading.Event()
        self._lock = threading.RLock()  # the writer and the shared state
        self._catalog_cond = threading.Condition(self._lock)
        self._catalog: pb.KvPoolCatalogUpdate | None = None
        self._rng = random.Random(config.seed)
        self._writer: CaptureWriter | RotatingCaptureWriter | None = None
        self._channel: grpc.Channel | None = None
        self._lag_ms: float | None = None
        #: --validate: the catalog and readiness streams' rules (under the lock)
        self._plane_rules = PlaneRules() if config.validate else None

    def stop(self, reason: str = "stopped") -> None:
        """End the session (any thread), keeping the first stop reason."""
        with self._lock:
            if not self._stop.is_set():
                self.report.stop_reason = self.report.stop_reason or reason
            self._stop.set()
            self._catalog_cond.notify_all()

    def _write_open(self, method: str, request: bytes, info: dict[str, Any]) -> int:
        """Open a stream in the capture; -1 once the writer is closed (a stream that outlived
        the session's end: nothing of it is written)."""
        cfg = self.config
        tls = cfg.tls
        transport = "plaintext" if tls is None else "mtls" if tls.private_key else "tls"
        info = {"transport": transport, **info}
        if cfg.authority is not None:
            info["authority"] = cfg.authority
        if names := said_dc_names(cfg.selector.dcs):
            info["dc_names"] = names  # the wire carries no DC name: the capture keeps those said
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

    def _sleep(self, seconds: float) -> bool:
        """Wait unless stopped; True if the session should go on."""
        return not self._stop.wait(seconds)

    def _jitter(self, delay: float) -> float:
        """Equal jitter: half fixed, half random."""
        return delay / 2 + self._rng.random() * delay / 2

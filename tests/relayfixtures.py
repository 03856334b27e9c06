"""What the recorder tests share: a capture read back per stream, a recorder on a thread, the
simulated relay's fast settings, bounded waits (the ``serve`` and ``recorders`` fixtures that use
them are in ``conftest.py``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cbi1kit.capture._file import RecordType, decode_stream_close, decode_stream_open
from cbi1kit.capture._reader import CaptureReader
from cbi1kit.relay._recorder import Recorder
from cbi1kit.relay._session import SUBSCRIBE_METHOD, RecorderConfig, RecordReport
from cbi1kit.sim._feeds import FrameListFeed, ProducerFeed
from cbi1kit.sim._hub import ServerConfig
from cbi1kit.sim._server import RelayServer

FAST = ServerConfig(
    pace=0.005, heartbeat_interval=0.2, readiness_heartbeat_interval=0.2, load_window=0.2
)


@dataclass
class Stream:
    method: str
    messages: list[bytes] = field(default_factory=list)
    close: dict[str, object] | None = None
    request: bytes = b""
    info: dict[str, object] = field(default_factory=dict)


def read_streams(path: Path) -> list[Stream]:
    streams: dict[int, Stream] = {}
    with CaptureReader(path) as reader:
        for rec in reader.records():
            if rec.type is RecordType.STREAM_OPEN:
                opened = decode_stream_open(rec.body)
                streams[rec.stream_id] = Stream(
                    opened.method, request=opened.request, info=dict(opened.info or {})
                )
            elif rec.type is RecordType.MESSAGE:
                streams[rec.stream_id].messages.append(rec.body)
            elif rec.type is RecordType.STREAM_CLOSE:
                c = decode_stream_close(rec.body)
                streams[rec.stream_id].close = {
                    "status": c.status_name,
                    "reason": c.error_reason,
                    "local": c.local_reason,
                    "count": c.message_count,
                }
    return list(streams.values())


def subscriptions(path: Path) -> list[Stream]:
    return [s for s in read_streams(path) if s.method == SUBSCRIBE_METHOD]


def wait_for(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


class Running:
    """A recorder on a thread, always stopped and joined."""

    def __init__(self, config: RecorderConfig) -> None:
        self.recorder = Recorder(config)
        self.thread = threading.Thread(target=self.recorder.run, daemon=True)
        self.thread.start()

    @property
    def report(self) -> RecordReport:
        return self.recorder.report

    def finish(self, timeout: float = 10.0) -> None:
        self.recorder.stop("test done")
        self.thread.join(timeout)
        assert not self.thread.is_alive()


def recorder_config(address: str, path: Path, **kw: object) -> RecorderConfig:
    base: dict[str, object] = {
        "status": False,
        "seed": 7,
        "backoff_initial": 0.05,
        "backoff_max": 0.3,
        "rpc_timeout": 5.0,
        "give_up_after": 10.0,
    }
    base.update(kw)
    return RecorderConfig(address, path, **base)  # type: ignore[arg-type]


def run_to_end(srv: RelayServer, rec: Running, feed: ProducerFeed | FrameListFeed) -> None:
    def done() -> bool:
        r = rec.report
        live = r.last_kind in ("FILTER_UPDATE_KIND_DELTA", "FILTER_UPDATE_KIND_HEARTBEAT")
        return srv.pool_exhausted() and live and r.last_sequence == feed.sequence

    wait_for(done)
    rec.finish()

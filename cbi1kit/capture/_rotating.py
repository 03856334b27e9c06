"""Writing a rotated recording: one capture as a set of segment files, each a whole capture
that re-opens the streams still open at its rotation (``docs/capture-format.md``, Segments;
reading the set back is ``_segments``)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cbi1kit.capture._file import _ClosesOnExit
from cbi1kit.capture._layout import RecordType
from cbi1kit.capture._segments import (
    CONTINUED,
    SegmentInfo,
    _discover,
    _segment_pattern,
    _segments_error,
    read_segment_info,
    segment_path,
)
from cbi1kit.capture._writer import CaptureWriter, _usage
from cbi1kit.errors import CaptureError, OutputError, OutputVariant


@dataclass(frozen=True, slots=True)
class _Open:
    target: str
    method: str
    request: bytes
    metadata: tuple[tuple[str, str], ...]
    info: Mapping[str, Any]


class RotatingCaptureWriter(_ClosesOnExit):
    """A :class:`CaptureWriter` that starts a new segment at ``rotate_bytes`` or ``rotate_seconds``.

    Checked before each record, so none splits; the interface is the writer's. ``mode="a"``
    appends to an existing recording's last segment. Later segments already beside a new
    recording are refused up front (``OutputError`` ``Exists``), as the caller refuses the base.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rotate_bytes: int | None = None,
        rotate_seconds: float | None = None,
        mode: Literal["x", "a"] = "x",
        set_id: str | None = None,
        clock: Callable[[], tuple[int, int]] | None = None,
        **writer_options: Any,
    ) -> None:
        if rotate_bytes is not None and rotate_bytes < 1:
            raise _usage("rotate_bytes must be >= 1", "rotate_bytes")
        if rotate_seconds is not None and not rotate_seconds > 0:
            raise _usage("rotate_seconds must be > 0", "rotate_seconds")
        self.base = Path(path)
        self.rotate_bytes = rotate_bytes
        self.rotate_seconds = rotate_seconds
        self._clock = clock or (lambda: (time.time_ns(), time.monotonic_ns()))
        self._options = writer_options
        self._opens: dict[int, _Open] = {}
        self.paths: list[Path] = []
        if mode == "a" and self.base.exists():
            info = read_segment_info(self.base)
            if info is None or info.segment != 0:
                raise _segments_error(
                    self.base, "not the first segment of a rotated recording: cannot rotate it"
                )
            self.set_id = info.set_id
            self.paths = _discover(self.base, info)
            last = read_segment_info(self.paths[-1])
            self.segment = len(self.paths) - 1
            self._writer = CaptureWriter(
                self.paths[-1],
                mode="a",
                clock=self._clock,
                next_stream=last.next_stream if last is not None else 1,
                **self._options,
            )
        elif mode in ("x", "a"):
            parent = self.base.parent
            taken = [
                self.base.with_name(n)
                for n in (sorted(os.listdir(parent)) if parent.is_dir() else [])
                if _segment_pattern(self.base).match(n)
            ]
            if taken:
                raise OutputError(
                    OutputVariant.Exists,
                    f"{taken[0]} exists: segments of an earlier recording lie beside "
                    f"{self.base.name} (remove them, or write elsewhere)",
                    field=str(taken[0]),
                )
            self.set_id = set_id or uuid.uuid4().hex
            self.segment = 0
            self._writer = self._new_segment(0, 1)
        else:
            raise _usage(f"mode must be 'x' or 'a', got {mode!r}", "mode")
        self._started = self._clock()[1]
        self._closed = False

    def _new_segment(self, number: int, next_stream: int) -> CaptureWriter:
        path = segment_path(self.base, number)
        writer = CaptureWriter(
            path, mode="x", clock=self._clock, next_stream=next_stream, **self._options
        )
        info = SegmentInfo(self.set_id, number, self.base.name, next_stream)
        writer.write(RecordType.MARK, info.mark())
        self.paths.append(path)
        return writer

    # -- rotation
    def _due(self) -> bool:
        w = self._writer
        if self.rotate_bytes is not None and w.size >= self.rotate_bytes:
            return True
        return (
            self.rotate_seconds is not None
            and self._clock()[1] - self._started >= self.rotate_seconds * 1e9
        )

    def rotate(self) -> Path:
        """Close the current segment and start the next one, re-opening every open stream in
        it under its own id; the new segment's path."""
        old = self._writer
        opens = old.open_streams
        old.close()
        self.segment += 1
        new = self._new_segment(self.segment, old.next_stream)
        for sid, count in opens.items():
            o = self._opens[sid]
            new.open_stream(
                o.target,
                o.method,
                o.request,
                metadata=o.metadata,
                info={**o.info, CONTINUED: True},
                stream_id=sid,
                messages=count,
            )
        self._writer = new
        self._started = self._clock()[1]
        return self.paths[-1]

    def _writer_now(self) -> CaptureWriter:
        if not self._closed and self._due():
            self.rotate()
        return self._writer

    # -- the writer's interface
    @property
    def path(self) -> Path:
        """The segment being written."""
        return self.paths[-1]

    @property
    def record_count(self) -> int:
        """Records in the current segment so far."""
        return self._writer.record_count

    @property
    def size(self) -> int:
        """Bytes in the current segment so far."""
        return self._writer.size

    def write(
        self, record_type: RecordType, body: bytes | bytearray | memoryview, **kw: Any
    ) -> int:
        """Append one record to the current segment (rotating first when due); its index."""
        return self._writer_now().write(record_type, body, **kw)

    def open_stream(
        self,
        target: str,
        method: str,
        request: bytes,
        *,
        metadata: Sequence[tuple[str, str]] = (),
        info: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> int:
        """Start a stream (:meth:`CaptureWriter.open_stream`), kept so rotation re-opens it."""
        sid = self._writer_now().open_stream(
            target, method, request, metadata=metadata, info=info, **kw
        )
        self._opens[sid] = _Open(target, method, bytes(request), tuple(metadata), dict(info or {}))
        return sid

    def message(self, stream_id: int, data: bytes | bytearray | memoryview, **kw: Any) -> int:
        """Record one response message's bytes (:meth:`CaptureWriter.message`)."""
        return self._writer_now().message(stream_id, data, **kw)

    def close_stream(self, stream_id: int, **kw: Any) -> int:
        """End a stream with its gRPC status (:meth:`CaptureWriter.close_stream`)."""
        index = self._writer_now().close_stream(stream_id, **kw)
        self._opens.pop(stream_id, None)
        return index

    @property
    def recovered(self) -> CaptureError | None:
        """What appending cut off the last segment's torn tail (``CaptureWriter.recovered``)."""
        return self._writer.recovered

    def mark(self, text: str) -> int:
        """A free-form annotation in the current segment."""
        return self._writer_now().mark(text)

    def flush(self) -> None:
        """Flush the current segment (:meth:`CaptureWriter.flush`)."""
        self._writer.flush()

    def close(self) -> None:
        """Close the current segment (final INDEX and TRAILER); safe to call twice."""
        if not self._closed:
            self._closed = True
            self._writer.close()

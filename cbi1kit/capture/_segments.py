"""Rotated recordings: one capture written as a set of segment files, read back as one.

A long recording rotates (``cbi1kit record --rotate-size`` / ``--rotate-time``): ``OUT.kvrcap``
is segment 0, then ``OUT.0001.kvrcap``, ``OUT.0002.kvrcap``, ... Each segment is a whole,
closed capture (file header, schema, INDEX and TRAILER) that reads alone: it starts with a
segment ``MARK`` (``kvrcap.segment {json}``: the recording's set id, the segment's number) and
re-opens every stream still open at the rotation under its own stream id, its open record's
``info`` saying ``segment_continued``, and its close counting the stream's messages across
segments. Read as a set (the base path, a :class:`CaptureSet`, or a list of segment paths),
the continued opens are not new streams and frame numbers run on across segments, so the set
reads as the unrotated capture would (``docs/capture-format.md``, Segments).
"""

from __future__ import annotations

import json
import os
import re
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal

from cbi1kit.capture._file import (
    _RECORD_HEADER,
    FILE_HEADER_LEN,
    FILE_MAGIC,
    RECORD_HEADER_LEN,
    RECORD_MAGIC,
    CaptureWriter,
    RecordType,
    _check,
)
from cbi1kit.errors import CaptureError, CaptureVariant, OutputError, OutputVariant

__all__ = [
    "CONTINUED",
    "SEGMENT_MARK",
    "CaptureSet",
    "RotatingCaptureWriter",
    "SegmentInfo",
    "capture_segments",
    "read_segment_info",
    "segment_path",
]

#: the body prefix of a segment's MARK record; JSON follows
SEGMENT_MARK: Final = "kvrcap.segment "
#: the STREAM_OPEN ``info`` key of a stream re-opened at a rotation
CONTINUED: Final = "segment_continued"
_MARK_MAX: Final = 1 << 16  # a segment MARK is a few hundred bytes
_PEEK_RECORDS: Final = 4  # the MARK follows the schema record


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What a segment's MARK says: the recording (``set_id``), the segment's number, the base
    file's name and the first stream id not given out before the segment began."""

    set_id: str
    segment: int
    base: str
    next_stream: int = 1

    def mark(self) -> bytes:
        body = {
            "base": self.base,
            "next_stream": self.next_stream,
            "segment": self.segment,
            "set": self.set_id,
        }
        return (SEGMENT_MARK + json.dumps(body, sort_keys=True, separators=(",", ":"))).encode()


def segment_path(base: str | os.PathLike[str], number: int) -> Path:
    """Segment ``number`` of the recording whose first segment is ``base``: ``base`` itself for
    0, else ``STEM.NNNN.SUFFIX`` (four digits or more)."""
    path = Path(base)
    if number == 0:
        return path
    return path.with_name(f"{path.stem}.{number:04d}{path.suffix}")


def _segment_pattern(base: Path) -> re.Pattern[str]:
    return re.compile(re.escape(base.stem) + r"\.(\d{4,})" + re.escape(base.suffix) + r"\Z")


def read_segment_info(path: str | os.PathLike[str]) -> SegmentInfo | None:
    """The segment MARK of a capture (None: not a segment of a rotated recording, or not a
    capture). Reads the first few records' headers only, each checked."""
    try:
        with open(path, "rb") as f:
            if f.read(FILE_HEADER_LEN)[: len(FILE_MAGIC)] != FILE_MAGIC:
                return None
            for _ in range(_PEEK_RECORDS):
                head = f.read(RECORD_HEADER_LEN)
                if len(head) < RECORD_HEADER_LEN:
                    return None
                magic, rtype, _, _, body_len, _, _, _, _, body_check, head_check = (
                    _RECORD_HEADER.unpack(head)
                )
                if magic != RECORD_MAGIC or _check(head[:-4]) != head_check:
                    return None
                if rtype == RecordType.SCHEMA:
                    f.seek(body_len, os.SEEK_CUR)
                    continue
                if rtype != RecordType.MARK or body_len > _MARK_MAX:
                    return None
                body = f.read(body_len)
                if len(body) < body_len or _check(body) != body_check:
                    return None
                if not body.startswith(SEGMENT_MARK.encode()):
                    continue  # another note (a simulation's configuration)
                meta = json.loads(body[len(SEGMENT_MARK) :])
                return SegmentInfo(
                    str(meta["set"]),
                    int(meta["segment"]),
                    str(meta.get("base", "")),
                    int(meta.get("next_stream", 1)),
                )
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    return None


def _segments_error(path: Path, detail: str) -> CaptureError:
    return CaptureError(
        CaptureVariant.Segments, detail, source=str(path), offset=0, record_index=-1
    )


def _discover(base: Path, info: SegmentInfo) -> list[Path]:
    """Segment 0 and every later segment of its recording beside it, in order."""
    pattern = _segment_pattern(base)
    found: dict[int, Path] = {}
    try:
        names = sorted(os.listdir(base.parent or Path(".")))
    except OSError:
        names = []
    for name in names:
        m = pattern.match(name)
        if m is None:
            continue
        other = base.with_name(name)
        got = read_segment_info(other)
        if got is not None and got.set_id == info.set_id and got.segment == int(m.group(1)):
            found[got.segment] = other
    paths = [base]
    while len(paths) in found:
        paths.append(found.pop(len(paths)))
    if found:
        missing = segment_path(base, len(paths)).name
        later = ", ".join(p.name for _, p in sorted(found.items())[:3])
        raise _segments_error(
            base,
            f"segment {len(paths)} of this rotated recording ({missing}) is missing; "
            f"later segments exist ({later})",
        )
    return paths


def capture_segments(source: Any) -> list[Path]:
    """The files of one capture, in order: a :class:`CaptureSet`'s; a base path finds its
    later segments (when it is segment 0 of a rotated recording; any other capture is itself);
    a list or tuple of paths must be consecutive segments of one recording (any order)."""
    if isinstance(source, CaptureSet):
        return list(source.paths)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        info = read_segment_info(path)
        if info is None or info.segment != 0:
            return [path]
        return _discover(path, info)
    paths = [Path(p) for p in source]
    if not paths:
        raise ValueError("no capture segments given")
    if len(paths) == 1:
        return capture_segments(paths[0])
    infos = [(read_segment_info(p), p) for p in paths]
    sets = {i.set_id for i, _ in infos if i is not None}
    if any(i is None for i, _ in infos) or len(sets) != 1:
        plain = next((p for i, p in infos if i is None), paths[0])
        raise _segments_error(
            plain,
            "these files are not segments of one rotated recording (each segment's MARK "
            "names its recording)",
        )
    ordered = sorted((i.segment, p) for i, p in infos if i is not None)
    numbers = [n for n, _ in ordered]
    if numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        raise _segments_error(
            ordered[0][1], f"segments {numbers} of this recording are not consecutive"
        )
    return [p for _, p in ordered]


class CaptureSet(os.PathLike[str]):
    """The segments of one rotated recording as one capture. It is a path (its first segment)
    to anything that takes one, and every capture reader, replay and the tables read all of
    its segments: ``cbi1kit.replay(CaptureSet.of([...]))``."""

    __slots__ = ("paths",)

    def __init__(self, paths: Iterable[str | os.PathLike[str]]) -> None:
        self.paths: tuple[Path, ...] = tuple(Path(p) for p in paths)
        if not self.paths:
            raise ValueError("a capture set needs at least one segment")

    @classmethod
    def of(cls, source: Any) -> CaptureSet:
        """The set ``source`` names (see :func:`capture_segments`)."""
        return cls(capture_segments(source))

    def __fspath__(self) -> str:
        return str(self.paths[0])

    def __iter__(self) -> Iterator[Path]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __str__(self) -> str:
        more = len(self.paths) - 1
        return str(self.paths[0]) + (f" (+{more} segments)" if more else "")

    def __repr__(self) -> str:
        return f"CaptureSet({[str(p) for p in self.paths]!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CaptureSet) and other.paths == self.paths

    def __hash__(self) -> int:
        return hash(self.paths)


@dataclass(frozen=True, slots=True)
class _Open:
    target: str
    method: str
    request: bytes
    metadata: tuple[tuple[str, str], ...]
    info: Mapping[str, Any]


class RotatingCaptureWriter:
    """A :class:`CaptureWriter` that starts a new segment once the current one holds
    ``rotate_bytes`` or has been open ``rotate_seconds`` (checked before each record, so a
    record never splits). The interface is the writer's: ``open_stream``, ``message``,
    ``close_stream``, ``mark``, ``write``, ``flush``, ``close``.

    ``mode="a"`` goes on with an existing rotated recording: its last segment is appended to
    and later segments follow it. Later segments that already exist beside a new recording are
    refused up front (``OutputError`` ``Exists``), as the base file is by the caller.
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
            raise ValueError("rotate_bytes must be >= 1")
        if rotate_seconds is not None and not rotate_seconds > 0:
            raise ValueError("rotate_seconds must be > 0")
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
            self.paths = capture_segments(self.base)
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
            raise ValueError(f"mode must be 'x' or 'a', got {mode!r}")
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
    def __enter__(self) -> RotatingCaptureWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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

"""Rotated recordings: one capture written as a set of segment files, read back as one.

``OUT.kvrcap`` is segment 0, then ``OUT.0001.kvrcap``, ...; each is a whole closed capture that
reads alone, starting with a segment ``MARK`` (``kvrcap.segment {json}``) and re-opening every
stream still open (``info``: ``segment_continued``). Read as a set (base path,
:class:`CaptureSet` or segment paths), the set reads as the unrotated capture would
(``docs/capture-format.md``, Segments).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cbi1kit.capture._file import (
    FILE_HEADER_LEN,
    RECORD_FIELD,
    RECORD_HEADER_LEN,
    body_verifies,
    record_header,
)
from cbi1kit.capture._layout import FILE_MAGIC, RecordType
from cbi1kit.errors import CaptureError, CaptureVariant

#: the body prefix of a segment's MARK record; JSON follows
SEGMENT_MARK: Final = "kvrcap.segment "
#: the STREAM_OPEN ``info`` key of a stream re-opened at a rotation
CONTINUED: Final = "segment_continued"
_MARK_MAX: Final = 1 << 16  # a segment MARK is a few hundred bytes
_PEEK_RECORDS: Final = 4  # the MARK follows the schema record
_TYPE, _BODY_LEN = RECORD_FIELD["record_type"], RECORD_FIELD["body_len"]


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
                fields = record_header(f.read(RECORD_HEADER_LEN))
                if fields is None:
                    return None
                rtype, body_len = fields[_TYPE], fields[_BODY_LEN]
                if rtype == RecordType.SCHEMA:
                    f.seek(body_len, os.SEEK_CUR)
                    continue
                if rtype != RecordType.MARK or body_len > _MARK_MAX:
                    return None
                body = f.read(body_len)
                if not body_verifies(fields, body):
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
        raise CaptureError(CaptureVariant.Usage, "no capture segments given", field="source")
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
            why = "a capture set needs at least one segment"
            raise CaptureError(CaptureVariant.Usage, why, field="paths")

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

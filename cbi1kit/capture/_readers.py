"""One frame stream from whatever a user recorded: a kvrcap capture, a grpcurl JSON dump, or
bare CBI1 frame files.

Every source yields :class:`FrameRecord` values in order. Damage is never silent and never
loses what came before it: the reader yields every good record, then raises a
:class:`CaptureError` naming the source, byte offset, record index and (where known) the
field that is bad.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import io
import json
import os
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Final, Literal

import numpy as np
from google.protobuf import json_format

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._file import CAPTURE_SIGNATURE
from cbi1kit.capture._items import FrameDamage, FrameRecord, FrameSpan, ReadCursor, SourceError
from cbi1kit.capture._scan import CaptureScan, CaptureSource
from cbi1kit.capture._segments import CaptureSet
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD
from cbi1kit.errors import CaptureError, CaptureVariant, Cbi1kitError, one_line
from cbi1kit.wire._format import (
    DELTA_BODY_PREFIX,
    FRAME_HEAD_BYTES,
    HEADER_LEN,
    IMAGE_BYTES,
    IMAGES_MAX_FRAME_BYTES,
    LEGACY_MAGIC,
    MAGIC,
    SNAPSHOT_BODY_PREFIX,
    SNAPSHOT_CHUNK_BUCKETS,
    WORD_BYTES,
    FrameKind,
)

_CBI1_HEAD: Final = struct.Struct("<4sHH2BH QQQQI")
_U32: Final = struct.Struct("<I")
_B64: Final = re.compile(r"[A-Za-z0-9+/\-_]*={0,2}")


def _items(
    path: CaptureSource,
    methods: Iterable[str],
    damage: Literal["raise", "report"],
    *,
    frames: bool = True,
    catalog: bool = False,
    streams: bool = False,
    cursor: ReadCursor | None = None,
) -> Iterator[Any]:
    """One pass over a capture (the one scanner, :class:`~cbi1kit.capture._scan.CaptureScan`):
    the frames of ``methods`` streams one by one, and with ``catalog`` the catalog updates,
    with ``streams`` every stream's open and close, in file order; damage raised or reported."""
    scan = CaptureScan(
        path, methods=methods, frames=frames, catalog=catalog, streams=streams, cursor=cursor
    )
    with scan:
        for item in scan.items():
            if isinstance(item, FrameSpan):
                for i in range(len(item)):
                    rec = item.record(i)
                    if isinstance(rec, FrameDamage) and damage == "raise":
                        raise rec.error from None
                    yield rec
            elif isinstance(item, FrameDamage) and damage == "raise":
                raise item.error
            else:
                yield item


def read_capture(
    path: CaptureSource,
    *,
    methods: Iterable[str] = (SUBSCRIBE_KV_POOL_METHOD,),
    damage: Literal["raise", "report"] = "raise",
) -> Iterator[Any]:
    """``FilterUpdate`` messages of the capture's ``SubscribeKvPool`` streams, in file order.

    Other streams are skipped (see :func:`read_catalog`). ``damage="raise"`` raises at the first
    damage, after the frames before it; ``"report"`` yields a :class:`FrameDamage` and goes on. A
    rotated set (first segment, :class:`~cbi1kit.capture.CaptureSet`, paths) reads as one.
    """
    return _items(path, methods, damage)


def read_catalog(
    path: CaptureSource, *, damage: Literal["raise", "report"] = "raise"
) -> Iterator[Any]:
    """The ``KvPoolCatalogUpdate`` messages of the capture's ``WatchKvPoolCatalog`` streams, as
    :class:`CatalogRecord` values in file order (damage as in :func:`read_capture`; a message
    that is no catalog update is ``CaptureError`` ``Unreadable``)."""
    return _items(path, (SUBSCRIBE_KV_POOL_METHOD,), damage, frames=False, catalog=True)


def read_capture_items(
    path: CaptureSource,
    *,
    damage: Literal["raise", "report"] = "raise",
    cursor: ReadCursor | None = None,
) -> Iterator[Any]:
    """Everything a multi-stream analysis needs in one pass, in file order: the frames
    (:class:`FrameRecord`, numbered as :func:`read_capture` numbers them), the catalog updates
    (:class:`CatalogRecord`), every stream's open and close (:class:`StreamEvent`) and, with
    ``damage="report"``, the damage (:class:`FrameDamage`). With ``cursor``, ``path`` is one
    segment of a rotated recording read on from where the cursor stands (it moves on)."""
    return _items(
        path, (SUBSCRIBE_KV_POOL_METHOD,), damage, catalog=True, streams=True, cursor=cursor
    )


# ------------------------------------------------------------------------------ grpcurl JSON


def _base64_fault(text: Any) -> str | None:
    """Why ``text`` is no proto3 JSON bytes value (standard or URL-safe base64, padding
    optional; nothing else), or None.

    ``json_format`` itself silently drops invalid characters, which would turn a damaged dump
    into wrong payload bytes, so the reader checks first.
    """
    if not isinstance(text, str) or not _B64.fullmatch(text) or len(text.rstrip("=")) % 4 == 1:
        return "not valid base64"
    body = text.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except binascii.Error as exc:
        return f"not valid base64: {exc}"
    return None


_JSON_BLOCK: Final = 1 << 20
#: No FilterUpdate's JSON is longer: its payload (at most ``IMAGES_MAX_FRAME_BYTES``) is 4/3 as
#: long in base64, and the rest leaves room for the envelope and any pretty-printing. A value
#: still open after this many characters is refused rather than read into memory to its end.
_JSON_OBJECT_MAX: Final = 2 * IMAGES_MAX_FRAME_BYTES
_JSON_SPACE: Final = re.compile(r"[ \t\r\n]*")


def _json_failure(
    exc: json.JSONDecodeError, text: str, pos: int, at: int, eof: bool, bad: tuple[int, str] | None
) -> tuple[CaptureVariant, str, int] | None:
    """What the parse error of the value at ``text[pos]`` (byte offset ``at``) means: damage,
    as (variant, detail, offset), or None where the value only runs past what is read so far
    (read more). ``bad``: invalid UTF-8 further on."""
    if bad is not None:  # the value runs into bytes that are no text
        return CaptureVariant.Unreadable, f"not UTF-8 text: {bad[1]}", bad[0]
    where = at + len(text[pos : exc.pos].encode())
    invalid = f"invalid JSON ({exc.msg} at offset {where})"
    unterminated = exc.msg.startswith("Unterminated")
    if eof:  # running off the end (or an unterminated string): the dump was cut short
        torn = exc.pos >= len(text.rstrip()) or unterminated
        return CaptureVariant.Truncated if torn else CaptureVariant.Unreadable, invalid, at
    if len(text) - pos < _JSON_OBJECT_MAX:
        return None
    if exc.pos < len(text) - 64 and not unterminated:
        return CaptureVariant.Unreadable, invalid, at
    too_long = f"a JSON value still open after {_JSON_OBJECT_MAX} characters: no FilterUpdate "
    return CaptureVariant.Unreadable, too_long + "is that long", at


class _JsonValues:
    """(byte offset, object) for concatenated JSON values (pretty-printed or JSONL).

    Read a block at a time, so memory holds a block and the value being parsed; a value cut at
    the end is parsed again with more (reads double: linear time). Non-UTF-8 bytes end the text
    there and are the error once the parser reaches them.
    """

    def __init__(self, stream: IO[bytes], source: str) -> None:
        self.stream, self.source, self.index = stream, source, 0  # index: the value parsed
        self.text, self.pos, self.read, self.eof, self.ascii_text = "", 0, 0, False, True
        self.mark, self.mark_bytes = 0, 0  # text[mark] is at byte mark_bytes: both only grow
        self.bad: tuple[int, str] | None = None  # invalid UTF-8 further on: (offset, reason)
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._decoder = json.JSONDecoder()

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        while True:
            match = _JSON_SPACE.match(self.text, self.pos)
            self.pos = match.end() if match else self.pos
            if self.pos < len(self.text):
                got = self._parse()
                if got is not None:
                    yield got
                    del got  # the caller has it: a payload's base64 is not held twice
                    self.index += 1
                    continue
            elif self.eof:
                if self.bad is None:
                    return
                at, why = self.bad
                raise self._fail(CaptureVariant.Unreadable, f"not UTF-8 text: {why}", at)
            self._read_more()

    def _byte_at(self, p: int) -> int:
        self.mark_bytes += (
            p - self.mark if self.ascii_text else len(self.text[self.mark : p].encode())
        )
        self.mark = p
        return self.mark_bytes

    def _fail(self, variant: CaptureVariant, detail: str, offset: int) -> CaptureError:
        return CaptureError(
            variant, detail, source=self.source, offset=offset, record_index=self.index
        )

    def _parse(self) -> tuple[int, dict[str, Any]] | None:
        """The object at ``pos`` and its byte offset (``pos`` moves past it), or None where it
        runs past what is read so far."""
        try:
            obj, end = self._decoder.raw_decode(self.text, self.pos)
        except json.JSONDecodeError as exc:
            at = self._byte_at(self.pos)
            failure = _json_failure(exc, self.text, self.pos, at, self.eof, self.bad)
            if failure is not None:
                raise self._fail(*failure) from None
            return None
        except (ValueError, RecursionError) as exc:  # a huge integer, nesting past the parser
            why = f"JSON value the parser refuses ({type(exc).__name__}: {str(exc)[:80]})"
            raise self._fail(CaptureVariant.Unreadable, why, self._byte_at(self.pos)) from None
        at = self._byte_at(self.pos)
        if not isinstance(obj, dict):
            why = f"expected a JSON object, got {type(obj).__name__}"
            raise self._fail(CaptureVariant.Unreadable, why, at)
        self.pos = end
        return at, obj

    def _read_more(self) -> None:
        """Keep what is not parsed yet, and read at least as much again."""
        start = self._byte_at(self.pos)
        self.text, self.pos, self.mark, self.mark_bytes = self.text[self.pos :], 0, 0, start
        self.ascii_text = self.ascii_text or self.text.isascii()
        chunk = self.stream.read(max(_JSON_BLOCK, len(self.text)))
        self.eof = not chunk
        try:
            more = self._utf8.decode(chunk, final=self.eof)
        except UnicodeDecodeError as exc:
            held = len(exc.object) - len(chunk)  # bytes the decoder kept from the last block
            self.bad = (self.read - held + exc.start, exc.reason)
            more, self.eof = exc.object[: exc.start].decode("utf-8"), True
        self.read += len(chunk)
        self.ascii_text = self.ascii_text and more.isascii()
        self.text += more


def write_grpcurl_json(records: Iterable[FrameRecord], path: str | os.PathLike[str]) -> int:
    """Write ``FilterUpdate`` records as ``grpcurl`` prints them (pretty proto3 JSON objects).

    Useful to hand a stream to tools that speak JSON, and to show what ``read_grpcurl_json``
    accepts. Bare CBI1 records (no envelope) cannot be written. Returns the records written.
    """
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for record in records:
            if record.update is None:
                raise CaptureError(
                    CaptureVariant.Unreadable,
                    "a bare CBI1 frame has no FilterUpdate envelope to write as JSON",
                    source=record.source,
                    offset=record.source_offset,
                    record_index=record.index,
                )
            out.write(json_format.MessageToJson(record.update, indent=2))
            out.write("\n")
            count += 1
    return count


#: Dynamo 1.7 names a pool's third part ClusterId (``pool_relay --cluster-id``): the same
#: fixed64 field 3 of ``KvPoolId`` that ``dc_id`` names here, so a dump may use either name
_DC_ID_ALIASES: Final = {"clusterId": "dcId", "cluster_id": "dc_id"}


def _dc_id_named(obj: Any) -> Any:
    """``obj`` with each ``KvPoolId``'s ``clusterId`` / ``cluster_id`` read as its ``dc_id``
    (a ``ParseError`` when both are given)."""
    if isinstance(obj, list):
        return [_dc_id_named(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _dc_id_named(v) for k, v in obj.items()}
    for alias, name in _DC_ID_ALIASES.items():
        if alias in out:
            if {name, "dcId", "dc_id"} & set(out):
                raise json_format.ParseError(f"both {alias} and dc_id given for one pool")
            out[name] = out.pop(alias)
    return out


def read_grpcurl_json(
    path_or_text: str | os.PathLike[str] | bytes, *, source: str | None = None
) -> Iterator[FrameRecord]:
    """``FilterUpdate`` objects as ``grpcurl ... SubscribeKvPool`` prints them.

    Accepts a path, or the dump itself as ``bytes``. The objects are proto3 JSON (camelCase or
    original field names, u64 as strings, ``payload`` base64), concatenated with any whitespace;
    a pool's ``dc_id`` may be named ``cluster_id`` (``clusterId``), as Dynamo 1.7 calls it.
    """
    stream: IO[bytes]
    if isinstance(path_or_text, bytes):
        stream, name = io.BytesIO(path_or_text), source or "<grpcurl json>"
    else:
        stream, name = open(path_or_text, "rb"), source or str(path_or_text)  # noqa: SIM115
    with stream:
        for index, (offset, obj) in enumerate(_JsonValues(stream, name)):
            if "payload" in obj and (why := _base64_fault(obj["payload"])) is not None:
                raise CaptureError(
                    CaptureVariant.Unreadable,
                    why,
                    source=name,
                    offset=offset,
                    record_index=index,
                    field="FilterUpdate.payload",
                )
            update = pb.FilterUpdate()
            try:
                json_format.ParseDict(_dc_id_named(obj), update)
            except json_format.ParseError as exc:
                raise CaptureError(
                    CaptureVariant.Unreadable,
                    f"not a FilterUpdate: {one_line(str(exc))}",
                    source=name,
                    offset=offset,
                    record_index=index,
                ) from None
            del obj
            raw = update.SerializeToString()
            yield FrameRecord(index, offset, None, None, update, raw, 0, name)


# --------------------------------------------------------------------------- bare CBI1 frames


def _cbi1_frame_length(head: bytes, offset: int, index: int, source: str) -> int:
    """Length of the CBI1 frame at ``offset``, from its header and body prefix alone.

    ``head`` holds the first ``FRAME_HEAD_BYTES`` (fewer only at end of file). A delta is
    ``48 + 12 + 12 * image_count`` bytes; a chunk holds ``min(524288, bucket_count - offset)``
    words. So frames sit back to back, and an oversized one is refused before its body is read.
    """
    left = len(head)

    def fail(reason: str, field: str | None = None, *, torn: bool = False) -> CaptureError:
        return CaptureError(
            CaptureVariant.Truncated if torn else CaptureVariant.Unreadable,
            reason,
            source=source,
            offset=offset,
            record_index=index,
            field=field,
        )

    magic = head[:4]
    if magic == LEGACY_MAGIC:
        raise fail(
            "legacy CKF1 prototype frame, not CBI1 (a different, retired generation)",
            "header.magic",
        )
    if left < 4 and MAGIC.startswith(magic):
        raise fail(f"file ends {left} bytes into a CBI1 header", torn=True)
    if magic != MAGIC:
        raise fail(f"not a CBI1 frame (magic {magic!r})", "header.magic")
    if left < HEADER_LEN:
        raise fail(f"file ends {left} bytes into a {HEADER_LEN}-byte CBI1 header", torn=True)
    (_m, _wv, flags, _fp, _slots, _fv, _seed, bucket_count, _dc, _epoch, _sum) = (
        _CBI1_HEAD.unpack_from(head)
    )
    if flags == FrameKind.DELTA:
        if left < HEADER_LEN + DELTA_BODY_PREFIX:
            raise fail("file ends inside the delta body prefix", torn=True)
        (count,) = _U32.unpack_from(head, HEADER_LEN + 8)
        length = HEADER_LEN + DELTA_BODY_PREFIX + IMAGE_BYTES * count
    elif flags == FrameKind.SNAPSHOT_CHUNK:
        if left < HEADER_LEN + SNAPSHOT_BODY_PREFIX:
            raise fail("file ends inside the snapshot-chunk body prefix", torn=True)
        _idx, _cnt, bucket_offset = struct.unpack_from("<IIQ", head, HEADER_LEN)
        if bucket_offset >= bucket_count:
            raise fail(
                f"bucket_offset {bucket_offset} >= bucket_count {bucket_count}",
                "chunk.bucket_offset",
            )
        words = min(SNAPSHOT_CHUNK_BUCKETS, bucket_count - bucket_offset)
        length = HEADER_LEN + SNAPSHOT_BODY_PREFIX + WORD_BYTES * words
    else:
        raise fail(f"unknown CBI1 flags {flags}", "header.flags")
    if length > IMAGES_MAX_FRAME_BYTES:
        raise fail(f"frame would be {length} bytes, above the CBI1 maximum", "header")
    return int(length)


def read_cbi1_files(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
) -> Iterator[FrameRecord]:
    """Bare CBI1 frames: each file holds one frame or several back to back.

    Frames are split, not decoded: checksum and format checks stay with ``wire.decode``
    so that replay can report them per frame. Indexes run across all files in order. A file is
    read a frame at a time: memory holds one frame (at most ``IMAGES_MAX_FRAME_BYTES``).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    index = 0
    for path in paths:
        source = str(path)
        with open(path, "rb") as f:
            offset = 0
            while head := f.read(FRAME_HEAD_BYTES):
                length = _cbi1_frame_length(head, offset, index, source)
                f.seek(offset)  # within the read buffer: the frame is read in one piece
                frame = f.read(length)
                if len(frame) < length:
                    raise CaptureError(
                        CaptureVariant.Truncated,
                        f"file ends {len(frame)} bytes into a {length}-byte CBI1 frame",
                        source=source,
                        offset=offset,
                        record_index=index,
                    )
                yield FrameRecord(index, offset, None, None, None, frame, 0, source)
                offset += length
                index += 1


# --------------------------------------------------------------------------------- dispatcher


SourceFormat = Literal["capture", "cbi1", "json"]


def source_format(path: str | os.PathLike[str]) -> SourceFormat:
    """Which reader a file takes, from its first bytes: kvrcap magic, CBI1/CKF1 magic, or JSON;
    ``CaptureError`` ``Unreadable`` for an empty (or all whitespace) or unrecognised file."""
    with open(path, "rb") as f:
        head = f.read(16)
        blank = not head.strip()
        while blank and (more := f.read(1 << 16)):  # whitespace so far: is that all there is?
            blank = not more.strip()
    if blank:
        raise CaptureError(
            CaptureVariant.Unreadable,
            "empty input (no bytes, or only whitespace): not a kvrcap capture, CBI1 frames or "
            "grpcurl JSON",
            source=str(path),
            offset=0,
            record_index=0,
        )
    if head.startswith(CAPTURE_SIGNATURE):
        return "capture"
    if head[:4] in (MAGIC, LEGACY_MAGIC):
        return "cbi1"
    if head.lstrip()[:1] in (b"{", b""):  # JSON, or whitespace before it
        return "json"
    raise CaptureError(
        CaptureVariant.Unreadable,
        f"unrecognised input (starts with {head[:8]!r}): not a kvrcap capture, CBI1 frames or "
        "grpcurl JSON",
        source=str(path),
        offset=0,
        record_index=0,
    )


SourceKind = Literal["capture", "cbi1", "json", "records", "unreadable"]


@dataclass(frozen=True, slots=True)
class ResolvedSource:
    """A source's ``kind``, ``source`` as named, a capture's ``segments`` (found once: a scan
    takes them) and an unreadable path's ``error`` (``resolve_source``)."""

    kind: SourceKind
    source: Any
    segments: CaptureSet | None = None
    error: Exception | None = None


def resolve_source(source: object, *, one_file: bool = False) -> ResolvedSource:
    """What ``source`` is, decided once for every reader: a capture (a kvrcap file, whose later
    segments are found here unless ``one_file``; a ``CaptureSet``; a list of segment paths), a
    bare CBI1 frame file or a grpcurl JSON dump (a path's first bytes say which:
    :func:`source_format`), or messages (any other iterable). A path that cannot be opened, or
    is empty or foreign, is ``unreadable`` with the error opening it raised. Files of no one
    recording are ``CaptureError`` ``Segments``; a resolved source is itself."""
    if isinstance(source, ResolvedSource):
        return source
    paths = isinstance(source, (list, tuple)) and source
    if paths and all(isinstance(p, (str, os.PathLike)) for p in paths):
        return ResolvedSource("capture", source, CaptureSet.of(source))
    if not isinstance(source, (str, os.PathLike)):
        return ResolvedSource("records", source)
    try:
        kind = source_format(source)
    except (OSError, CaptureError) as exc:
        return ResolvedSource("unreadable", source, error=exc)
    if kind != "capture":
        return ResolvedSource(kind, source)
    if isinstance(source, CaptureSet):
        return ResolvedSource(kind, source, source)
    segments = CaptureSet([source]) if one_file else CaptureSet.of(source)
    return ResolvedSource(kind, source, segments)


def read_frames(
    path: CaptureSource | ResolvedSource, *, damage: Literal["raise", "report"] = "raise"
) -> Iterator[Any]:
    """The reader ``resolve_source`` picks (a path's first bytes say which).

    ``damage="report"`` makes a capture's damage :class:`FrameDamage` items inline (other
    sources still raise at their first damage). A list of paths is a rotated recording's
    segments (:func:`read_capture`).
    """
    resolved = resolve_source(path)
    if resolved.error is not None:
        raise resolved.error
    if resolved.kind == "cbi1":
        return read_cbi1_files(resolved.source)
    if resolved.kind == "json":
        return read_grpcurl_json(resolved.source)
    capture = resolved.source if resolved.segments is None else resolved.segments
    return read_capture(capture, damage=damage)  # anything else, read_capture refuses


# ------------------------------------------------------------------------ every source, as spans


def record_spans(
    records: Iterable[FrameRecord | pb.FilterUpdate], *, batch_rows: int = 65536
) -> Iterator[FrameSpan | SourceError]:
    """Frames from any record iterator (grpcurl JSON, bare CBI1 frames, messages) as spans of
    at most ``batch_rows`` rows or ``_SPAN_BYTES`` of them (a file of large frames is not held
    whole); where the iterator fails, its error, as the last item."""
    it = iter(records)
    pending: list[FrameRecord] = []
    size = count = 0
    while True:
        try:
            rec = next(it)
        except StopIteration:
            break
        except (Cbi1kitError, OSError, ValueError) as exc:
            yield from _pending_span(pending)
            yield SourceError(count, exc)
            return
        if isinstance(rec, pb.FilterUpdate):
            rec = FrameRecord(count, 0, None, None, rec, rec.SerializeToString())
        if pending and (
            rec.index != pending[-1].index + 1 or len(pending) >= batch_rows or size >= _SPAN_BYTES
        ):
            yield from _pending_span(pending)
            size = 0
        pending.append(rec)
        count += 1
        size += len(rec.raw)
    yield from _pending_span(pending)


_SPAN_BYTES: Final = 32 << 20


def _pending_span(pending: list[FrameRecord]) -> Iterator[FrameSpan]:
    """The records gathered so far as one span (emptying the list)."""
    if not pending:
        return
    raws = [r.raw for r in pending]
    lengths = np.array([len(r) for r in raws], dtype=np.int64)
    buf = np.frombuffer(b"".join(raws), dtype=np.uint8)
    del raws
    starts = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    span = FrameSpan(
        buf,
        starts,
        lengths,
        np.array([r.source_offset for r in pending], dtype=np.int64),
        np.array([r.stream_id for r in pending], dtype=np.int64),
        np.array([r.recv_unix_ns or 0 for r in pending], dtype=np.uint64).view(np.int64),
        np.array([r.recv_mono_ns or 0 for r in pending], dtype=np.uint64),
        None,
        pending[0].index,
        pending[0].source,
        np.array([r.update is not None for r in pending], dtype=bool),
        np.array([r.recv_unix_ns is not None for r in pending], dtype=bool),
    )
    pending.clear()  # the records go before the span is taken: it alone holds their bytes
    yield span


def frame_items(source: object) -> Iterator[FrameSpan | SourceError]:
    """A source that is no capture (a grpcurl JSON or bare CBI1 file, or an iterable of
    ``FrameRecord`` or ``FilterUpdate`` values), resolved or not, as spans; an unreadable one
    as its error."""
    try:
        resolved = resolve_source(source)
        records = resolved.source if resolved.kind == "records" else read_frames(resolved)
    except (Cbi1kitError, OSError) as exc:
        yield SourceError(0, exc)
        return
    yield from record_spans(records)

"""The one scanner of the kvrcap format: a file's records as columns, its damage where it is.

A file is read a window at a time with ``pread`` (a map would kill the process with SIGBUS
when another process cuts the file; a short read is damage at the offset where the file
ended). The compiled walk (:mod:`cbi1kit.capture._walk_kernel`) takes every clean record of a
window; where it stops, the slow path below says why: the damage, where reading resumes, and
what it skipped (``docs/capture-format.md``, Damage). The scan stands where it stopped, so a
later call reads only what was appended since (a capture ``record`` is still writing).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

from cbi1kit._lazy import worth_compiling
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._file import (
    FILE_HEADER_LEN,
    RECORD_HEADER_LEN,
    CaptureDamage,
    CaptureRecord,
    StreamClose,
    StreamOpen,
    _check,
    _ClosesOnExit,
    _index_offsets,
    check_file_header,
    record_header,
)
from cbi1kit.capture._items import (
    CATALOG_UPDATE,
    READINESS_UPDATE,
    Bool,
    CatalogRecord,
    FrameDamage,
    FrameSpan,
    ReadCursor,
    ReadinessRecord,
    StreamEvent,
    unreadable_message,
)
from cbi1kit.capture._layout import RECORD_MAGIC, RecordType
from cbi1kit.capture._segments import CONTINUED, CaptureSet, capture_segments
from cbi1kit.capture._streams import (
    SUBSCRIBE_KV_POOL_METHOD,
    SUBSCRIBE_SERVING_READINESS_METHOD,
    WATCH_KV_POOL_CATALOG_METHOD,
    FrameStreams,
)
from cbi1kit.capture._walk import (
    AT_LENGTH,
    STOP_BODY,
    STOP_END,
    STOP_FULL,
    WALK_KERNELS,
    Walk,
    Walked,
    load_walk,
    walk_python,
    walked_arrays,
)
from cbi1kit.errors import CaptureError, CaptureVariant

CaptureSource = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]

_PART: Final = 4 << 20  # bytes read at a time: what the walk and the engines after it find in cache
_ROWS: Final = _PART // RECORD_HEADER_LEN + 1  # at most this many records in a window
_SEARCH: Final = 4 << 20  # bytes searched at a time for the next intact header
_CHAIN: Final = 8192  # the chain's first size (an INDEX lists 4,096 records by default)
_K, _R, _E, _C = RECORD_MAGIC


@dataclass(slots=True, eq=False)
class Stretch:
    """Clean records, back to back in one window: ``buf`` holds the file's bytes from ``base``,
    ``cols`` the records (:data:`cbi1kit.capture._walk.Walked`)."""

    buf: npt.NDArray[np.uint8]
    base: int
    cols: Walked

    def __len__(self) -> int:
        return len(self.cols[0])

    def body(self, i: int) -> bytes:
        at = int(self.cols[0][i]) - self.base + RECORD_HEADER_LEN
        return bytes(self.buf[at : at + int(self.cols[3][i])])


def _kind(rtype: int) -> RecordType | None:
    """A record header's type, None for a number no record type has."""
    return RecordType(rtype) if rtype in RecordType._value2member_map_ else None


class FileScan:
    """One capture file, read on from where the scan stands: ``scan()`` yields every clean
    record as part of a :class:`Stretch` and every damaged stretch as a :class:`CaptureDamage`,
    in file order, up to the file's end as it is now. With ``final`` a torn record at the end
    is damage (``Truncated``); without, it is bytes not written yet, and the next ``scan()``
    reads it again."""

    def __init__(self, path: str | os.PathLike[str], *, verify: bool = True) -> None:
        self.source = os.fspath(path)
        self.verify = verify
        self._fd = os.open(self.source, os.O_RDONLY)
        self.created_unix_ns = 0
        self.pos, self.number = FILE_HEADER_LEN, 0
        self.ended = False  # a fatal header, a truncation or the end of a corrupt file
        self._seen = 0  # the largest size the scan has found the file at (a capture only grows)
        self._header_done = False
        self._chain = np.empty(_CHAIN, np.int64)
        self._state = np.zeros(1, np.int64)  # the chain's length; -1: unknown
        self._walk: Walk | None = None  # the compiled walk, once the file is worth it
        self._buffers = [np.empty(0, np.uint8), np.empty(0, np.uint8)]
        self._turn = 0
        #: what the scan has read so far: records by type (``RecordType`` values), the damage
        self.types = np.zeros(int(max(RecordType)) + 1, dtype=np.int64)
        self.damages: list[CaptureDamage] = []

    def _walk_of(self, size: int) -> Walk:
        """The Python walk for a read of ``size`` bytes that is small (its kernels would take
        longer to load than it to read: a followed file read on a little at a time); the
        compiled one from the first read that is not."""
        if self._walk is None:
            if not worth_compiling(WALK_KERNELS, size):
                return walk_python
            self._walk = load_walk()
        return self._walk

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def _window(
        self, offset: int, n: int, carry: npt.NDArray[np.uint8] | None, *, turn: bool
    ) -> npt.NDArray[np.uint8]:
        """``n`` bytes at ``offset`` (fewer where the file ends) in one of two buffers taken in
        turn (``turn``: the last window's buffer holds a yielded stretch): a window stays
        valid while the next one is read (``FrameSpan``'s contract). ``carry``: the window's
        first bytes, read already (the previous window's torn tail)."""
        if turn:
            self._turn ^= 1
        buf = self._buffers[self._turn]
        if len(buf) < n:
            buf = self._buffers[self._turn] = np.empty(max(n, _PART), np.uint8)
        k = 0
        if carry is not None:
            k = min(len(carry), n)  # n < len(carry): the file shrank under the scan
            buf[:k] = carry[:k]
        got = os.preadv(self._fd, [buf[k:n].data], offset + k) if n > k else 0
        return buf[: k + got]

    @staticmethod
    def _want(carry: npt.NDArray[np.uint8] | None) -> int:
        """A window's size: the record begun in ``carry`` whole, and at least ``_PART``."""
        if carry is None or len(carry) < RECORD_HEADER_LEN:
            return _PART
        body = int.from_bytes(carry[AT_LENGTH : AT_LENGTH + 4].tobytes(), "little")
        return max(_PART, RECORD_HEADER_LEN + body)

    def read(self, offset: int, n: int) -> bytes:
        """``n`` bytes at ``offset`` (fewer where the file ends)."""
        return os.pread(self._fd, max(0, n), offset)

    def _err(self, variant: CaptureVariant, reason: str, offset: int, index: int) -> CaptureError:
        return CaptureError(variant, reason, offset=offset, record_index=index, source=self.source)

    def _damage(
        self,
        variant: CaptureVariant,
        reason: str,
        offset: int,
        end_offset: int,
        skipped: range,
        record_type: RecordType | None = None,
        stream_id: int | None = None,
    ) -> CaptureDamage:
        err = self._err(variant, reason, offset, self.number)
        # a record number can claim any jump, but no more records can be lost than the file holds
        most = self.size() // RECORD_HEADER_LEN + 1
        if skipped.stop - skipped.start > most:
            skipped = range(skipped.start, skipped.start + most)
        return CaptureDamage(err, end_offset, skipped, record_type, stream_id)

    # -- the scan -------------------------------------------------------------------------------
    def scan(self, *, final: bool = True) -> Iterator[Stretch | CaptureDamage]:
        """What the file holds from where the scan stands (see the class)."""
        if self.ended:
            return
        for item in self._scan(final):
            if isinstance(item, CaptureDamage):
                self.damages.append(item)
            else:
                self.types += np.bincount(item.cols[1], minlength=len(self.types))[
                    : len(self.types)
                ]
            yield item

    def _scan(self, final: bool) -> Iterator[Stretch | CaptureDamage]:
        if not self._header_done:
            damage = self._file_header(final)
            if damage is not None:
                yield damage
            if not self._header_done:
                return
        carry: npt.NDArray[np.uint8] | None = None  # a record begun at the window's end
        held = True  # the current buffer holds a stretch a consumer may still read
        while not self.ended:
            size = self.size()
            if size < self._seen:  # another process cut the file: damage where it now ends
                yield self._shrank(size)
                return
            self._seen = size
            if size - self.pos <= 0:
                return
            base = self.pos
            buf = self._window(base, min(self._want(carry), size - base), carry, turn=held)
            cols = walked_arrays(min(_ROWS, len(buf) // RECORD_HEADER_LEN + 1))
            n, stop, why = self._walk_of(size - base)(
                buf,
                0,
                len(buf),
                base,
                np.uint64(self.number),
                self.verify,
                self._chain,
                self._state,
                cols,
                0,
            )
            held = n > 0
            if n:
                yield Stretch(buf, base, tuple(c[:n] for c in cols))  # type: ignore[arg-type]
                self.pos, self.number = base + stop, self.number + n
            carry = None
            if why == STOP_FULL:
                self._grow_chain()
            elif why in (STOP_END, STOP_BODY) and base + len(buf) < size:
                carry = buf[stop:]  # the next window begins with it, not reading it again
            elif why in (STOP_END, STOP_BODY) and not final:
                return  # a record still being written
            else:
                yield from self._stopped(why, size, final)

    def _shrank(self, size: int) -> CaptureDamage:
        """The file ends at ``size``, short of what the scan found it holding: every record
        past ``size`` is lost, and nothing after can be trusted."""
        self.ended = True
        reason = f"the file shrank to {size} bytes while being read (it held {self._seen})"
        return self._damage(
            CaptureVariant.Truncated, reason, size, self._seen, range(self.number, self.number)
        )

    def _grow_chain(self) -> None:
        if self._state[0] >= len(self._chain):
            self._chain = np.concatenate([self._chain, np.empty(len(self._chain), np.int64)])

    def _file_header(self, final: bool) -> CaptureDamage | None:
        head = self.read(0, FILE_HEADER_LEN)
        err, fatal, created = check_file_header(head, self.source)
        if err is not None and err.variant is CaptureVariant.Truncated and not final:
            return None  # the header is being written
        self._header_done = True
        self.created_unix_ns = created
        if err is None:
            return None
        if fatal:
            self.ended = True
        return CaptureDamage(err, self.size() if fatal else FILE_HEADER_LEN, range(0))

    def _stopped(self, why: int, end: int, final: bool) -> Iterator[CaptureDamage]:
        """The walk stopped at ``self.pos`` for ``why`` with the file ending at ``end``: the slow
        path reads the record there and says what is wrong (a torn tail waits unless
        ``final``)."""
        if why in (STOP_END, STOP_BODY) and end - self.pos <= 0:
            return
        damage = self._anomaly(end)
        if damage is None:
            return
        if damage.truncated and not final:
            self.ended = False
            return
        yield damage

    def _header_at(self, offset: int) -> tuple[int, ...] | None:
        """The record header at ``offset`` if its magic and checksum verify."""
        return record_header(self.read(offset, RECORD_HEADER_LEN))

    def _anomaly(self, end: int) -> CaptureDamage | None:
        """The record at ``self.pos``, which the walk did not take; moves the scan past it."""
        offset = self.pos
        fields = self._header_at(offset)
        if fields is None:
            return self._bad_header(offset, end)
        body_len, rindex = fields[4], fields[6]
        body_start = offset + RECORD_HEADER_LEN
        body_end = body_start + body_len
        if rindex != self.number:
            return self._misnumbered(offset, rindex, body_end, end)
        if body_end > end:  # the header verified: the torn record's type and stream are known
            self.ended = True
            left = end - body_start
            return self._damage(
                CaptureVariant.Truncated,
                f"file ends {left} bytes into a {body_len}-byte record body",
                offset,
                end,
                range(self.number, self.number + 1),
                _kind(fields[1]),
                fields[5],
            )
        return self._bad_body(offset, fields, body_end)

    def _bad_body(
        self, offset: int, fields: tuple[int, ...], body_end: int
    ) -> CaptureDamage | None:
        rtype, stream_id, bcheck = fields[1], fields[5], fields[9]
        body = self.read(offset + RECORD_HEADER_LEN, body_end - offset - RECORD_HEADER_LEN)
        kind = _kind(rtype)
        if self._state[0] >= 0 and kind is not RecordType.INDEX:
            self._append_chain(offset)
        number = self.number
        self.pos, self.number = body_end, number + 1
        if self.verify and bcheck != _check(body):
            if kind is RecordType.INDEX:
                self._state[0] = 0
            return self._skipped("record body checksum mismatch", offset, body_end, kind, stream_id)
        if kind is None:
            return self._skipped(f"unknown record type {rtype}", offset, body_end, None, stream_id)
        if kind is not RecordType.INDEX:  # pragma: no cover - the walk takes any other record
            raise AssertionError(f"the walk stopped at a clean {kind.name} record")
        listed, known = _index_offsets(body), int(self._state[0])
        self._state[0] = 0
        if known >= 0 and listed != self._chain[:known].tolist():
            return self._skipped(
                "INDEX record disagrees with the record chain", offset, body_end, kind, stream_id, 0
            )
        return None  # a malformed INDEX where the chain was unknown: nothing to compare

    def _skipped(
        self,
        reason: str,
        offset: int,
        body_end: int,
        kind: RecordType | None,
        stream_id: int,
        lost: int = 1,
    ) -> CaptureDamage:
        err = self._err(CaptureVariant.Corrupt, reason, offset, self.number - 1)
        skipped = range(self.number - 1, self.number - 1 + lost)
        return CaptureDamage(err, body_end, skipped, kind, stream_id)

    def _append_chain(self, offset: int) -> None:
        self._grow_chain()
        self._chain[self._state[0]] = offset
        self._state[0] += 1

    def _misnumbered(self, offset: int, rindex: int, body_end: int, end: int) -> CaptureDamage:
        reason = (
            f"record says it is number {rindex}, expected {self.number} "
            "(a record is missing or repeated)"
        )
        self._state[0] = -1
        if rindex > self.number:
            damage = self._damage(
                CaptureVariant.Corrupt, reason, offset, offset, range(self.number, rindex)
            )
            self.number = rindex
            return damage
        damage = self._damage(CaptureVariant.Corrupt, reason, offset, min(body_end, end), range(0))
        if body_end > end:
            self.ended = True
        else:
            self.pos = body_end
        return damage

    def _bad_header(self, offset: int, end: int) -> CaptureDamage:
        left = end - offset
        head = self.read(offset, min(4, left))
        if left < RECORD_HEADER_LEN and RECORD_MAGIC.startswith(head):
            self.ended = True
            return self._damage(
                CaptureVariant.Truncated,
                f"file ends {left} bytes into a {RECORD_HEADER_LEN}-byte record header",
                offset,
                end,
                range(self.number, self.number + 1),
            )
        reason = "bad record magic" if head != RECORD_MAGIC else "record header checksum mismatch"
        self._state[0] = -1
        nxt = self._find_header(offset + 1, self.number, end)
        if nxt is None:
            self.ended = True
            return self._damage(
                CaptureVariant.Corrupt,
                f"{reason}; no intact record follows ({end - offset} bytes lost)",
                offset,
                end,
                range(self.number, self.number + 1),
            )
        found = self._header_at(nxt)
        nidx = max(self.number, found[6]) if found is not None else self.number
        lost = f", records {self.number}..{nidx - 1} lost" if nidx > self.number else ""
        damage = self._damage(
            CaptureVariant.Corrupt,
            f"{reason}; {nxt - offset} bytes skipped to the next record header at byte offset "
            f"{nxt}{lost}",
            offset,
            nxt,
            range(self.number, nidx),
        )
        self.pos, self.number = nxt, nidx
        return damage

    def _find_header(self, start: int, min_index: int, end: int) -> int | None:
        """Offset of the next record header at or after ``start`` whose checksum verifies (and
        whose ``record_index`` is not below ``min_index``), or of a ``KRec`` too close to the
        end to hold a header (a torn record); None if there is neither. Candidates are found a
        window at a time with numpy; only those are checked one by one."""
        pos = start
        while end - pos >= len(RECORD_MAGIC):
            w = np.frombuffer(self.read(pos, min(end - pos, _SEARCH + 3)), np.uint8)
            cand = np.flatnonzero(w[:-3] == _K)
            ok = (w[cand + 1] == _R) & (w[cand + 2] == _E) & (w[cand + 3] == _C)
            for c in (cand[ok] + pos).tolist():
                if end - c < RECORD_HEADER_LEN:
                    return int(c)
                fields = self._header_at(c)
                if fields is not None and fields[6] >= min_index:
                    return int(c)
            if len(w) < _SEARCH + 3:
                return None
            pos += len(w) - 3
        return None


# ------------------------------------------------------------------------ a capture's items


# plain ints: numpy compares an array with an IntEnum member five times slower
_OPEN, _CLOSE, _MESSAGE = (
    int(RecordType.STREAM_OPEN),
    int(RecordType.STREAM_CLOSE),
    int(RecordType.MESSAGE),
)


_ONES: Final = np.ones(_PART // RECORD_HEADER_LEN + 1, dtype=np.bool_)
_ONES.flags.writeable = False


def _ones(n: int) -> npt.NDArray[np.bool_]:
    """``n`` Trues (a read-only view where it can be: spans of a capture hold only frames)."""
    return _ONES[:n] if n <= len(_ONES) else np.ones(n, dtype=np.bool_)


class _FileItems:
    """One file of a capture as items: frames as spans, the rest one by one, numbered on from
    the recording's cursor (``read_capture_items``' rule; its reference is
    ``tests/test_scan.py``'s record-by-record reading)."""

    def __init__(self, path: Path, wanted: _Wanted, cursor: ReadCursor, verify: bool) -> None:
        self.source = str(path)
        self.scan = FileScan(path, verify=verify)
        self.streams = FrameStreams(wanted.methods, self.source)
        self.wanted = wanted
        self.planes = wanted.planes
        self.cursor = cursor
        self.messages: dict[int, int] = {}  # MESSAGE records per stream, read so far

    def items(self, final: bool) -> Iterator[ScanItem]:
        for got in self.scan.scan(final=final):
            if isinstance(got, CaptureDamage):
                yield self._damage(got)
            else:
                yield from self._stretch(got)

    def _damage(self, damage: CaptureDamage) -> FrameDamage:
        known = self.streams
        if damage.record_type is not None:
            lost = int(damage.record_type is RecordType.MESSAGE and damage.stream_id in known.open)
        else:
            lost = len(damage.skipped) if known.open and not damage.truncated else 0
        item = FrameDamage(self.cursor.frames, lost, damage.error, damage)
        self.cursor.frames += lost
        return item

    def _stretch(self, s: Stretch) -> Iterator[ScanItem]:
        types = s.cols[1]
        at = 0
        control = (types == _OPEN) | (types == _CLOSE)
        for k in [*np.flatnonzero(control).tolist(), len(types)]:
            if k > at:
                yield from self._messages(s, at, k)
            if k < len(types):
                yield from self._control(s, k)
            at = k + 1

    def _record(self, s: Stretch, k: int) -> CaptureRecord:
        offset, t, sid, _n, number, wall, mono = (int(c[k]) for c in s.cols)
        body = offset + RECORD_HEADER_LEN
        return CaptureRecord(number, offset, RecordType(t), sid, wall, mono, body, s.body(k))

    def _control(self, s: Stretch, k: int) -> Iterator[ScanItem]:
        """A stream open or close (an open that does not decode is damage at its record; a
        stream re-opened at a rotation goes on: no new stream)."""
        rec = self._record(s, k)
        decoded, err = self.streams.read_control(
            rec.type, rec.stream_id, rec.index, rec.offset, rec.body
        )
        if err is not None:
            gone = CaptureDamage(err, rec.end_offset, range(0), rec.type, rec.stream_id)
            yield FrameDamage(self.cursor.frames, 0, err, gone)
            return
        going_on = False
        open_streams = self.cursor.open_streams
        if isinstance(decoded, StreamClose):
            open_streams.discard(rec.stream_id)
        elif isinstance(decoded, StreamOpen):
            going_on = bool((decoded.info or {}).get(CONTINUED)) and rec.stream_id in open_streams
            open_streams.add(rec.stream_id)
        if self.wanted.streams and not going_on:
            yield StreamEvent(
                rec.stream_id,
                rec.index,
                rec.offset,
                rec.recv_unix_ns,
                rec.recv_mono_ns,
                decoded if isinstance(decoded, StreamOpen) else None,
                decoded if isinstance(decoded, StreamClose) else None,
            )

    def _roles(self, s: Stretch, msg: npt.NDArray[np.intp]) -> tuple[Bool, Bool]:
        """Which of the messages ``msg`` of a stretch are frames, and which plane updates (the
        catalog's, the readiness stream's: those wanted) (``FrameStreams``' rule: a stream whose
        open was lost is decided by its first message)."""
        _offset, _t, stream, _n, numbers, _w, _m = s.cols
        sids = stream[msg]
        streams = self.streams
        one = int(sids[0])
        single = bool((sids == one).all())
        if single:
            self.messages[one] = self.messages.get(one, 0) + len(sids)
        else:
            ids, counts = np.unique(sids, return_counts=True)
            for x, c in zip(ids.tolist(), counts.tolist(), strict=True):
                self.messages[x] = self.messages.get(x, 0) + c
        planes = self.planes
        if single and not streams.undecided(one):  # the usual: one stream
            frame = numbers[msg] >= np.uint64(streams.first.get(one, _NEVER))
            plane = streams.method.get(one) in planes
            return frame, (~frame if plane else np.zeros(len(msg), dtype=np.bool_))
        u, first_at, inv = np.unique(sids, return_index=True, return_inverse=True)
        for x, k in zip(u.tolist(), first_at.tolist(), strict=True):
            if streams.undecided(x):
                m = int(msg[k])
                streams.is_frame(x, int(numbers[m]), s.body(m))
        starts = np.array([streams.first.get(x, _NEVER) for x in u.tolist()], dtype=np.uint64)
        frame = starts[inv.reshape(-1)] <= numbers[msg]
        if not planes:
            return frame, np.zeros(len(msg), dtype=np.bool_)
        plane_streams = [x for x in u.tolist() if streams.method.get(x) in planes]
        return frame, ~frame & np.isin(sids, plane_streams)

    def _messages(self, s: Stretch, lo: int, hi: int) -> Iterator[ScanItem]:
        """Records ``lo`` to ``hi`` of a stretch, none a stream open or close: frames as spans,
        plane updates one by one, the rest skipped."""
        is_msg = s.cols[1][lo:hi] == _MESSAGE
        msg = np.arange(lo, hi) if is_msg.all() else lo + np.flatnonzero(is_msg)
        if not msg.size:
            return
        frame, catalog = self._roles(s, msg)
        if not catalog.any():  # no catalog update among them: one span
            rows = msg if frame.all() else msg[frame]
            if rows.size:
                span = self._span(s, rows)
                if self.wanted.frames:
                    yield span
            return
        done = 0
        for c in [*np.flatnonzero(catalog).tolist(), len(msg)]:
            rows = msg[done:c][frame[done:c]]
            if rows.size:
                span = self._span(s, rows)
                if self.wanted.frames:
                    yield span
            if c < len(msg):
                yield self._plane(s, int(msg[c]))
            done = c + 1

    def _span(self, s: Stretch, rows: npt.NDArray[np.intp]) -> FrameSpan:
        offset, _t, stream, length, numbers, wall, mono = s.cols
        n = len(rows)
        first = int(rows[0])
        at: slice | npt.NDArray[np.intp] = rows
        if int(rows[-1]) - first + 1 == n:  # the usual: back to back, views not copies
            at = slice(first, first + n)
        start = offset[at]
        span = FrameSpan(
            s.buf,
            start - s.base + RECORD_HEADER_LEN,
            length[at].astype(np.int64),
            start,
            stream[at].astype(np.int64),
            wall[at].view(np.int64),
            mono[at],
            numbers[at],
            self.cursor.frames,
            self.source,
            _ones(n),
            _ones(n),
        )
        self.cursor.frames += n
        return span

    def _plane(self, s: Stretch, k: int) -> CatalogRecord | ReadinessRecord | FrameDamage:
        """A catalog or readiness update (its stream's method says which), decoded."""
        rec = self._record(s, k)
        catalog = self.streams.method.get(rec.stream_id) == _WATCH
        kind = pb.KvPoolCatalogUpdate if catalog else pb.ServingReadinessUpdate
        try:
            update = kind.FromString(rec.body)
        except DecodeError as exc:
            what = CATALOG_UPDATE if catalog else READINESS_UPDATE
            err = unreadable_message(self.source, rec, what, exc)
            gone = CaptureDamage(err, rec.end_offset, range(0), rec.type, rec.stream_id)
            return FrameDamage(self.cursor.frames, 0, err, gone)
        where = (rec.index, rec.offset, rec.recv_unix_ns, rec.recv_mono_ns, rec.stream_id)
        if isinstance(update, pb.KvPoolCatalogUpdate):
            self.cursor.catalog += 1
            return CatalogRecord(self.cursor.catalog - 1, *where, update, rec.body, self.source)
        self.cursor.readiness += 1
        return ReadinessRecord(self.cursor.readiness - 1, *where, update, rec.body, self.source)


_NEVER: Final = 2**64 - 1  # a stream that never carries frames: no record number reaches it
_WATCH: Final = WATCH_KV_POOL_CATALOG_METHOD
ScanItem = FrameSpan | CatalogRecord | ReadinessRecord | StreamEvent | FrameDamage


@dataclass(frozen=True, slots=True)
class _Wanted:
    methods: tuple[str, ...] = (SUBSCRIBE_KV_POOL_METHOD,)
    frames: bool = True
    catalog: bool = True
    streams: bool = True
    readiness: bool = False

    @property
    def planes(self) -> frozenset[str]:
        """The methods whose messages come as plane records."""
        return frozenset(
            [_WATCH] * self.catalog + [SUBSCRIBE_SERVING_READINESS_METHOD] * self.readiness
        )


class CaptureScan(_ClosesOnExit):
    """A capture, one file or a rotated recording's segments in order, as the items replay
    and the tables read (frames as :class:`~cbi1kit.capture._scan.FrameSpan` columns), read on from
    where the scan stands: ``items()`` again reads only what was appended (and the segments
    begun) since. ``segments``: ``source``'s files, found already
    (:func:`~cbi1kit.capture._readers.resolve_source`). ``cursor``: ``source`` is one segment,
    numbered on from it."""

    def __init__(
        self,
        source: CaptureSource,
        *,
        methods: Iterable[str] = (SUBSCRIBE_KV_POOL_METHOD,),
        frames: bool = True,
        catalog: bool = True,
        streams: bool = True,
        readiness: bool = False,
        cursor: ReadCursor | None = None,
        verify: bool = True,
        segments: CaptureSet | None = None,
    ) -> None:
        self.single = cursor is not None
        self.cursor = ReadCursor() if cursor is None else cursor
        found = source if segments is None else segments
        self.paths = [Path(source)] if self.single else capture_segments(found)  # type: ignore[arg-type]
        self._source = source
        self._wanted = _Wanted(tuple(methods), frames, catalog, streams, readiness)
        self._verify = verify
        self._files: list[_FileItems] = []

    @property
    def files(self) -> list[FileScan]:
        """The file scans begun so far, in order."""
        return [f.scan for f in self._files]

    @property
    def records(self) -> int:
        """Intact records read so far (every file)."""
        return sum(int(f.types.sum()) for f in self.files)

    @property
    def messages(self) -> dict[int, int]:
        """MESSAGE records per stream id, read so far (every file)."""
        out: dict[int, int] = {}
        for f in self._files:
            for sid, n in f.messages.items():
                out[sid] = out.get(sid, 0) + n
        return out

    def close(self) -> None:
        for f in self._files:
            f.scan.close()

    def items(self, *, final: bool = True) -> Iterator[ScanItem]:
        """The items from where the scan stands to the capture's end as it is now (``final``:
        a torn record at the end is damage; else bytes not written yet)."""
        if not self.single and self._files and not final:
            self.paths = capture_segments(self._source)  # a recording may have rotated
        while True:
            k = len(self._files) - 1
            if k >= 0:
                last = k == len(self.paths) - 1
                yield from self._files[k].items(final or not last)
                if last:
                    return
            if k + 1 >= len(self.paths):
                return
            path = self.paths[k + 1]
            self._files.append(_FileItems(path, self._wanted, self.cursor, self._verify))

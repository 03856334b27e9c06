"""The compiled replay engine: one kernel (:func:`cbi1kit.analysis._replay_kernels.replay_rows`)
takes every message of a span it can show is a clean step of its lane (on a busy pool almost
all are deltas); the rest (a stream's first message, snapshot chunks, violations, damage) go to
the per-message engine, as that engine alone would take them, on the same lane state and to the
same report (``tests/test_replay_fast.py``). Events go into the log as columns, the history as
references to the messages (``docs/replay.md``).
"""

from __future__ import annotations

from typing import Any, Final

import numba
import numpy as np
import numpy.typing as npt

from cbi1kit._lazy import kernels_for
from cbi1kit.analysis import _replay_kernels as k
from cbi1kit.analysis._events import KIND_CODES, EventKind, EventLog
from cbi1kit.analysis._history import DELTA_REF
from cbi1kit.analysis._replayer import LaneReplayer, ReferenceFeeder, Replayer, span_ref
from cbi1kit.capture._items import FrameRecord, FrameSpan

_EMPTY_LANE: Final = np.zeros(1, dtype=np.uint64)
_OUTCOME: Final = {
    k.APPLIED: EventKind.DELTA_APPLIED,
    k.HEARTBEAT: EventKind.HEARTBEAT,
    k.SKIPPED: EventKind.SKIPPED,
}
_CODE_OF: Final = np.zeros(max(_OUTCOME) + 1, dtype=np.uint8)
for _o, _kind in _OUTCOME.items():
    _CODE_OF[_o] = KIND_CODES[_kind]
_HAS_ALL: Final = 7  # sequence, base and offset


def _state(lane: LaneReplayer, stream_id: int) -> tuple[Any, ...] | None:
    """What the kernel needs of ``lane`` for messages of ``stream_id``: mode, installed
    sequence, seed, bucket count, DC, deltas allowed, producer bytes, relay bytes (None: the
    per-message engine's, e.g. the stream does not feed the lane, or no session is ready)."""
    if lane._stream != stream_id:
        return None
    if lane._recovering:
        env = lane._valid_envelope
        if lane._checker is not None or env is None:
            return None
        return (k.MODE_RECOVERING, 0, 0, 0, 0, 0, env[0], env[1])
    c = lane._checker
    if c is None or c.ended or c.format is None or c.dc_id is None or c._producer is None:
        return None
    words = c.lane
    if (
        c._relay is None
        or words is None
        or not words.ready
        or words is not lane._lane
        or words.bucket_count != c.format.bucket_count
        or not lane._segments
    ):
        return None
    delta_ok = c._assembly is None or not c._assembly.in_progress
    state = (k.MODE_READY, words.installed_sequence, c.format.seed, c.format.bucket_count)
    return (*state, c.dc_id, int(delta_ok), c._producer, c._relay)


class CompiledFeeder:
    """The compiled engine: runs of clean steps taken by the kernel, the rest one by one."""

    def __init__(self, player: Replayer) -> None:
        self.player = player
        self.slots = np.zeros((2, k.SLOTS), dtype=np.uint32)  # the duplicate-bucket check's
        self.stamp = np.zeros(1, dtype=np.uint32)
        self._hooked = player._lane_args["on_delta"] is not None or (
            player._lane_args["on_deltas"] is not None
        )
        self._lanes_key: tuple[int, ...] = ()
        self._lanes: Any = None
        self._lanes_keep: list[npt.NDArray[np.uint64]] = []
        self._room: tuple[npt.NDArray[Any], ...] | None = None

    def feed(self, item: object) -> int:
        if not isinstance(item, FrameSpan):
            self.player.feed_item(item)
            return 1
        run = _Run(self, item)
        n, i = len(item), 0
        while i < n:
            j = run.take(i)
            if j < n:  # the kernel stopped here: this one is the per-message engine's
                self.one(item, j)
                j += 1
            i = j
        return n

    def lanes(self, words: list[npt.NDArray[np.uint64]]) -> Any:
        """The lanes' words as the kernel takes them (a numba list, made again only when a
        lane's array is another one: making one costs more than a run of deltas)."""
        key = tuple(id(w) for w in words)
        if key != self._lanes_key:
            self._lanes_key, self._lanes = key, numba.typed.List(words)
            self._lanes_keep = words  # the arrays the ids name stay alive
        return self._lanes

    def image_room(self, most: int) -> tuple[npt.NDArray[Any], ...]:
        """Room for ``most`` images (buckets, new and previous words, a count): one set kept
        from take to take where the only hook copies what it is handed (``on_deltas``, the
        tables' collector); fresh arrays for each take cost a page fault per 4 KiB, which
        was most of the images table's time."""
        room = self._room
        keeps = self.player._lane_args["on_delta"] is not None  # it may keep its slices
        if keeps or room is None or len(room[0]) < most:
            size = most if keeps or room is None else max(most, 2 * len(room[0]))
            room = (
                np.empty(size, np.uint32),
                np.empty(size, np.uint64),
                np.empty(size, np.uint64),
                np.zeros(1, np.int64),
            )
            self._room = None if keeps else room
        room[3][0] = 0
        return room

    def slots_for(self, rows: int) -> npt.NDArray[np.uint32]:
        """The duplicate check's table for ``rows`` more deltas (cleared before its stamp
        wraps; stamp 0 is never a delta's: a fresh table holds none)."""
        if int(self.stamp[0]) + rows >= 0xFFFFFFFF:
            self.slots[:] = 0
            self.stamp[0] = 0
        return self.slots

    def one(self, span: FrameSpan, r: int) -> None:
        """Row ``r`` to the per-message engine. A message it takes without a violation vouches
        for its producer and relay (they parse and validate): a lane waiting for a snapshot
        then skips messages carrying them."""
        player = self.player
        rec = span.record(r)
        event = player.feed_item(rec, span_ref(player.history, span, r))
        if not isinstance(rec, FrameRecord) or event is None or event.kind is EventKind.VIOLATION:
            return
        update = rec.update
        lane = player._lane_player(rec.stream_id)
        if (
            lane is not None
            and update is not None
            and update.HasField("producer")
            and update.HasField("relay")
        ):
            lane._valid_envelope = (
                update.producer.SerializeToString(),
                update.relay.SerializeToString(),
            )


class _Run:
    """The kernel over one span: its rows, and the lanes its streams feed."""

    def __init__(self, feeder: CompiledFeeder, span: FrameSpan) -> None:
        self.feeder = feeder
        self.player = feeder.player
        self.span = span
        first = int(span.stream[0])
        if (span.stream == first).all():  # the usual span: one stream
            self.streams: list[int] = [first]
            self.slot = np.zeros(len(span), dtype=np.int64)
        else:
            streams, slot = np.unique(span.stream, return_inverse=True)
            self.streams = streams.tolist()
            self.slot = slot.reshape(-1).astype(np.int64, copy=False)
        n = len(span)
        self.out = (
            np.zeros(n, np.uint8),
            np.zeros(n, np.uint64),
            np.zeros(n, np.uint64),
            np.zeros(n, np.int64),
        )

    def _kernel_state(self, lanes: list[LaneReplayer | None]) -> tuple[Any, ...] | None:
        """The state, expected bytes and words of every lane in play (None: none is ready)."""
        states = [
            None if lane is None else _state(lane, s)
            for lane, s in zip(lanes, self.streams, strict=True)
        ]
        if all(st is None for st in states):
            return None
        n = len(states)
        state = np.zeros((6, n), dtype=np.uint64)
        at = np.zeros((4, n), dtype=np.int64)  # producer offset and length, relay's
        pool: list[bytes] = []
        size = 0
        words: list[npt.NDArray[np.uint64]] = []
        for s, st in enumerate(states):
            lane = lanes[s]
            if st is None or lane is None:
                words.append(_EMPTY_LANE)
                continue
            state[:, s] = st[:6]
            producer, relay = st[6], st[7]
            at[:, s] = size, len(producer), size + len(producer), len(relay)
            pool += (producer, relay)
            size += len(producer) + len(relay)
            c = lane._checker
            live = c.lane.words if c is not None and c.lane is not None else _EMPTY_LANE
            words.append(live if st[0] == k.MODE_READY else _EMPTY_LANE)
        expect = (np.frombuffer(b"".join(pool) or b"\0", dtype=np.uint8), at)
        return state, expect, self.feeder.lanes(words)

    def take(self, lo: int) -> int:
        """Take every row from ``lo`` on that the kernel can; the first one it cannot."""
        lanes = [self.player._lane_player(s) for s in self.streams]
        got = self._kernel_state(lanes)
        if got is None:
            return lo
        state, expect, words = got
        span = self.span
        n = len(span)
        images = self._images(lo)
        slots = self.feeder.slots_for(n - lo)
        end = int(
            k.replay_rows(
                span.buf,
                span.start,
                span.length,
                span.is_pb,
                lo,
                n,
                self.slot,
                state,
                expect,
                words,
                slots,
                self.feeder.stamp,
                self.out,
                images,
            )
        )
        if end > lo:
            _Taken(self, lanes, lo, end, images).book()
        return end

    def _images(self, lo: int) -> tuple[npt.NDArray[Any], ...]:
        """Room for the images of every delta from ``lo`` on, where a hook wants them."""
        if not self.feeder._hooked:
            return (
                np.zeros(0, np.uint32),
                np.zeros(0, np.uint64),
                np.zeros(0, np.uint64),
                np.zeros(1, np.int64),
            )
        most = int(self.span.length[lo:].sum()) // k.IMAGE_SIZE + 1
        return self.feeder.image_room(most)


class _Taken:
    """Rows ``lo`` to ``hi`` of a run were taken: each lane's share, then the replay's."""

    def __init__(
        self, run: _Run, lanes: list[LaneReplayer | None], lo: int, hi: int, images: Any
    ) -> None:
        self.run, self.lanes, self.lo, self.hi, self.images = run, lanes, lo, hi, images
        self.kinds = run.out[0][lo:hi]

    def book(self) -> None:
        run, lo, hi = self.run, self.lo, self.hi
        shared: tuple[list[tuple[str, int]], npt.NDArray[np.void] | None] | None = None
        if len(self.lanes) == 1:  # the usual span: one lane, whose rows are lo:hi
            if self.lanes[0] is not None:
                shared = self._lane(self.lanes[0], slice(lo, hi))
        else:
            slots = run.slot[lo:hi]
            for s, lane in enumerate(self.lanes):
                rows = lo + np.flatnonzero(slots == s)
                if lane is not None and rows.size:
                    self._lane(lane, rows)
        self._hooks()
        player, span = run.player, run.span
        player.frames += hi - lo
        player._last_stream = int(span.stream[hi - 1])
        timed = span.has_time[lo:hi]
        if timed.any():
            walls = span.wall[lo:hi][timed].view(np.uint64)
            player._seen(int(walls.min()), int(walls.max()))
        _add(player._counts, _tally(self.kinds) if shared is None else shared[0])
        if player.keep_events:
            ev = None if shared is None else shared[1]
            player.events.extend(self._events(player.events, slice(lo, hi)) if ev is None else ev)

    def _lane(
        self, lane: LaneReplayer, rows: Rows
    ) -> tuple[list[tuple[str, int]], npt.NDArray[np.void] | None]:
        """Book the lane's rows; its tally and event rows (None where the events name the
        lane's own reasons), which the replay's own equal where the lane has every row."""
        kinds = self.run.out[0][rows]
        applied = kinds == k.APPLIED
        if applied.all():
            self._applied(lane, rows)
        elif applied.any():
            self._applied(lane, _positions(rows)[applied])
        beats = kinds == k.HEARTBEAT
        if beats.any():
            self._beats(lane, _positions(rows)[beats])
        tally = _tally(kinds)
        _add(lane._counts, tally)
        lane.frames += len(kinds)
        ev = None
        if lane.keep_events:
            ev = self._events(lane.events, rows)
            lane.events.extend(ev)
        return tally, None if (ev is None or (kinds == k.SKIPPED).any()) else ev

    def _applied(self, lane: LaneReplayer, rows: Rows) -> None:
        """The lane's applied deltas, as the per-message engine keeps them: the installed
        sequence, the session's last sequence and receive times, the history's references."""
        span = self.run.span
        checker = lane._checker
        assert checker is not None and checker.lane is not None
        sequences = self.run.out[1][rows]
        last = int(sequences[-1])
        checker.lane.installed_sequence = last
        seg = lane._segments[-1]
        seg.last_sequence = last
        n = len(sequences)
        if seg.timed:
            timed = span.has_time[rows]
            upto = n if timed.all() else int(np.argmin(timed))
            seg.delta_unix_ns.frombytes(span.wall[rows][:upto].view(np.uint64).tobytes())
            if upto < n:
                seg.timed = False
        history = self.run.player.history
        if seg.history is not None and history is not None:
            refs = np.empty(n, dtype=DELTA_REF)
            if span.number is not None:
                refs["store"] = history.file(span.source)
                refs["at"], refs["number"] = span.offset[rows], span.number[rows]
            else:
                refs["store"] = history.buffer(span.buf)
                refs["at"], refs["number"] = span.start[rows], 0
            refs["length"], refs["sequence"] = span.length[rows], sequences
            seg.history.deltas.extend(refs)

    def _beats(self, lane: LaneReplayer, rows: npt.NDArray[np.int64]) -> None:
        """The lane's accepted heartbeats' receive times, as the per-message engine keeps them
        (what keeps a lane fresh for upstream's scorer)."""
        seg = lane._current
        if seg is None or not seg.timed:
            return
        span = self.run.span
        timed = span.has_time[rows]
        upto = len(rows) if timed.all() else int(np.argmin(timed))
        seg.heartbeat_unix_ns.frombytes(span.wall[rows][:upto].view(np.uint64).tobytes())
        if upto < len(rows):
            seg.timed = False

    def _hooks(self) -> None:
        """The delta hooks, as the per-message engine calls them: in record order."""
        args = self.run.player._lane_args
        on_delta, on_deltas = args["on_delta"], args["on_deltas"]
        if on_delta is None and on_deltas is None:
            return
        run, lo = self.run, self.lo
        rows = lo + np.flatnonzero(self.kinds == k.APPLIED)
        if not rows.size:
            return
        buckets, new, prev, count = self.images
        n = int(count[0])
        buckets, new, prev = buckets[:n], new[:n], prev[:n]
        sequences, counts = run.out[1][rows], run.out[3][rows]
        index = (run.span.index + rows).astype(np.int64)
        if on_deltas is not None:
            on_deltas(index, sequences, counts, buckets, new, prev)
        if on_delta is not None:
            ends = np.cumsum(counts)
            for i, seq, a, b in zip(
                index.tolist(),
                sequences.tolist(),
                (ends - counts).tolist(),
                ends.tolist(),
                strict=True,
            ):
                on_delta(i, seq, buckets[a:b], new[a:b], prev[a:b])
        count[0] = 0

    def _events(self, log: EventLog, rows: Rows) -> npt.NDArray[np.void]:
        """The event rows of ``rows`` for ``log`` (whose reasons a skipped row names)."""
        run = self.run
        span = run.span
        outcome = run.out[0][rows]
        ev = log.rows(len(outcome))
        ev["index"] = span.index + _positions(rows)
        ev["kind"] = _CODE_OF[outcome]
        ev["sequence"], ev["base"] = run.out[1][rows], run.out[2][rows]
        ev["stream"], ev["offset"] = span.stream[rows], span.offset[rows]
        ev["has"] = _HAS_ALL
        skipped = outcome == k.SKIPPED
        if skipped.any():
            slot = run.slot[rows]
            for s in np.unique(slot[skipped]).tolist():
                lane = self.lanes[s]
                assert lane is not None
                why = f"awaiting a new snapshot after the violation at frame {lane._recover_from}"
                ev["reason"][skipped & (slot == s)] = log.reason(why)
        return ev


#: rows of a span: ``lo:hi`` where one lane has them all, else their positions
Rows = slice | npt.NDArray[np.int64]


def _positions(rows: Rows) -> npt.NDArray[np.int64]:
    if isinstance(rows, slice):
        return np.arange(rows.start, rows.stop, dtype=np.int64)
    return rows


def _tally(kinds: npt.NDArray[np.uint8]) -> list[tuple[str, int]]:
    """The taken rows' events by kind, kinds in the order they first appear (as the
    per-message engine adds them)."""
    n = np.bincount(kinds, minlength=len(_CODE_OF))
    present = [o for o in _OUTCOME if n[o]]
    if len(present) > 1:  # the order they first appear in
        present.sort(key=lambda o: int(np.argmax(kinds == o)))
    return [(_OUTCOME[o].value, int(n[o])) for o in present]


def _add(counts: dict[str, int], tally: list[tuple[str, int]]) -> None:
    for name, n in tally:
        counts[name] = counts.get(name, 0) + n


_KERNELS = "cbi1kit.analysis._replay_kernels"


def feeder_of(
    engine: str, player: Replayer, size: int | None = None
) -> CompiledFeeder | ReferenceFeeder:
    """The engine's feeder: the compiled one where the kernels load (``auto``: and ``size``
    bytes of input pay for them), else the reference."""
    if kernels_for(_KERNELS, engine, size) is not None:
        return CompiledFeeder(player)
    return ReferenceFeeder(player)

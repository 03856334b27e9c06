"""One capture, opened once: ``cbi1kit.open(source)`` scans a source once and keeps the scan, and
every table, replay and view of it is computed from that scan once (``docs/data-path.md``).

The scan's items (spans of frames, catalog updates, stream opens and closes, damage) are kept
without their bytes: an engine that comes later reads each span's window of the file again (a
read, not a scan). The first engine to ask takes the items as the scanner makes them, while
they are in cache. ``refresh()`` scans what was appended since, and every table and replay
computed so far goes on from where it stood.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from cbi1kit.analysis._replay import ReplayReport
from cbi1kit.analysis._replayer import Replayer, check_engine
from cbi1kit.analysis._source import Source
from cbi1kit.capture._file import RECORD_HEADER_LEN
from cbi1kit.capture._items import FrameDamage, FrameSpan, ReadCursor, SourceError
from cbi1kit.capture._readers import ResolvedSource, frame_items, resolve_source
from cbi1kit.capture._scan import CaptureScan, FileScan, ScanItem
from cbi1kit.errors import CaptureError, CaptureVariant, LaneError, LaneVariant

if TYPE_CHECKING:
    from datetime import timedelta

    import polars as pl

    from cbi1kit.analysis._diff import LaneDiff, LaneSource
    from cbi1kit.analysis._explain import Explanation
    from cbi1kit.analysis._frames import FramesEngine
    from cbi1kit.analysis._global import GlobalView, Moment
    from cbi1kit.analysis._overview import CaptureOverview
    from cbi1kit.analysis._tables import Collector
    from cbi1kit.ckf._stats import CkfStats
    from cbi1kit.hashing._pools import DcId, PoolId
    from cbi1kit.wire._format import FilterFormat

Words = npt.NDArray[np.uint64]

Item = ScanItem | SourceError


@dataclass(frozen=True, slots=True)
class _Away:
    """A span kept without its bytes: the window of file ``scan`` they are read back from."""

    span: FrameSpan
    scan: FileScan
    base: int
    size: int


@dataclass(eq=False)
class _Run:
    """One replay of the capture, kept: its replayer, its engine, and how far it has read."""

    player: Replayer
    feeder: Any
    at: int = 0
    report: ReplayReport | None = None
    tables: Collector | None = None
    reached: int = 0  # the source's bytes read so far, as replay's progress counts them


@dataclass(eq=False)
class _Frames:
    """The frames table so far: its batches, and the engine that makes the next ones."""

    engine: FramesEngine
    batches: list[pl.DataFrame] = field(default_factory=list)
    at: int = 0


class Capture:
    """A source, scanned once: ``frames``, ``images`` and ``snapshots`` are its tables (polars
    LazyFrames), ``replay()`` the consumer's rules over it, and ``lane``, ``view``, ``explain``,
    ``diff``, ``stats`` and ``export`` read that replay; the scan and each result are kept.
    ``follow=True``: the source is still being written, so a torn tail is bytes to come (read by
    ``refresh()``), not damage. ``keep_tables=False`` keeps nothing (memory stays at a window of the
    file): each pass scans again. See docs/data-path.md."""

    def __init__(
        self,
        source: Source,
        *,
        keep_tables: bool = True,
        follow: bool = False,
        cursor: ReadCursor | None = None,
    ) -> None:
        self.source = source
        self.keep_tables = keep_tables
        self._cursor = cursor  # one segment of a recording, read on from where it stands
        self._cursor_at = (
            None if cursor is None else replace(cursor, open_streams=set(cursor.open_streams))
        )
        self._log: list[Item | _Away] = []
        self._scan: CaptureScan | None = None
        self._resolved: ResolvedSource  # what the source is, as this pass found it
        self._live: Iterator[Item] | None = None
        self._following = follow
        self._files: dict[str, FileScan] = {}
        self._frames: _Frames | None = None
        self._runs: dict[tuple[Any, ...], _Run] = {}
        self.scans = 0  # how many times the source has been scanned from its start
        self._start()

    def _start(self) -> None:
        self.scans += 1
        self._log.clear()
        if self._cursor is not None and self._cursor_at is not None:  # each pass from there
            at = self._cursor_at
            self._cursor.frames, self._cursor.catalog = at.frames, at.catalog
            self._cursor.open_streams = set(at.open_streams)
        # its kind and a capture's segments, found once: a cursor reads one segment on alone
        resolved = resolve_source(self.source, one_file=self._cursor is not None)
        self._resolved = resolved
        if resolved.kind == "capture":
            self._scan = CaptureScan(
                resolved.source, segments=resolved.segments, readiness=True, cursor=self._cursor
            )
            self._live = self._scan.items(final=not self._following)
        else:
            self._live = frame_items(resolved)  # an unreadable path: its error, as an item

    def __repr__(self) -> str:
        name = _name(self.source)
        if self._scan is not None:  # records, not the scan's items (a span holds many frames)
            return f"<cbi1kit.Capture capture {name}: {self._scan.records:,} records scanned>"
        return f"<cbi1kit.Capture frames {name}: {len(self._log):,} items read>"

    # -- the scan -------------------------------------------------------------------------------
    def items(self, start: int = 0) -> Iterator[Item]:
        """Every item of the source in order from item ``start``: those scanned so far, then
        what the scan finds."""
        if not self.keep_tables:
            yield from self._one_pass()
            return
        k = start
        last: tuple[int, int, Any] | None = None
        while True:
            while k < len(self._log):
                got = self._log[k]
                if isinstance(got, _Away):
                    key = (id(got.scan), got.base)
                    if last is None or last[:2] != key:
                        last = (*key, np.frombuffer(got.scan.read(got.base, got.size), np.uint8))
                    got = replace(got.span, buf=last[2])
                yield got
                k += 1
            item = self._next()
            if item is None:
                return
            yield item
            k += 1

    def _next(self) -> Item | None:
        """The next item the scan finds (kept in the log without its bytes), None at the end."""
        if self._live is None:
            return None
        item = next(self._live, None)
        if item is None:
            self._live = None
            return None
        if self.keep_tables:
            self._log.append(self._away(item))
        return item

    def _one_pass(self) -> Iterator[Item]:
        """A capture that keeps nothing: each pass scans the source again."""
        if self._live is None:
            if self._scan is not None:
                self._scan.close()
            self._scan, self._files = None, {}
            self._start()
        while (item := self._next()) is not None:
            yield item
            item = None  # not held while the next is read: a span may be most of a window

    def _away(self, item: Item) -> Item | _Away:
        if not isinstance(item, FrameSpan) or item.number is None or self._scan is None:
            return item  # bytes held in memory: nothing to read back
        scan = self._file(item.source)
        base = int(item.offset[0]) + RECORD_HEADER_LEN - int(item.start[0])
        away = replace(item, buf=np.zeros(0, np.uint8))
        return _Away(away, scan, base, len(item.buf))

    def _file(self, source: str) -> FileScan:
        scan = self._files.get(source)
        if scan is None:
            assert self._scan is not None
            for f in self._scan.files:
                self._files[f.source] = f
            scan = self._files[source]
        return scan

    def refresh(self) -> int:
        """Scan what was appended since the last scan and carry every kept table and replay on;
        returns how many items came. A torn tail is then bytes not written yet (a tail the first
        scan reported as damage makes it read again from the start, unless opened with
        ``follow=True``). ``keep_tables=False``: ``CaptureError`` ``Usage``."""
        if not self.keep_tables:
            message = "refresh() carries kept tables on: open with keep_tables=True"
            raise CaptureError(CaptureVariant.Usage, message, field="keep_tables")
        first, self._following = not self._following, True
        # a tail first read as damage, or a file the recorder had not made yet: read afresh
        if (first and self._ends_torn()) or self._not_there():
            self._restart()
        if self._live is None and self._scan is not None:
            self._live = self._scan.items(final=False)
        before = len(self._log)
        while self._next() is not None:
            pass
        self._carry_on()
        return len(self._log) - before

    def _not_there(self) -> bool:
        only = self._log[0] if len(self._log) == 1 else None
        return isinstance(only, SourceError) and isinstance(only.error, FileNotFoundError)

    def _ends_torn(self) -> bool:
        last = self._log[-1] if self._log else None
        return isinstance(last, FrameDamage) and last.damage.truncated

    def _restart(self) -> None:
        if self._scan is not None:
            self._scan.close()
        self._scan, self._files = None, {}
        self._frames = None
        self._runs.clear()
        self._start()

    def _carry_on(self) -> None:
        if self._frames is not None:
            for _ in self._frame_batches(cached=False):
                pass
        for run in self._runs.values():
            self._advance(run, None)

    def overview(self, *, rows: int = 20, frame: int | None = None) -> CaptureOverview:
        """What ``cbi1kit inspect`` shows: the file, records by type, damage, streams, the
        first ``rows`` frames and one frame's payload (frame ``frame``, else the first delta)."""
        from cbi1kit.analysis._overview import overview

        def scanned() -> tuple[list[FileScan], dict[int, int]]:
            scan = self._scan
            return ([], {}) if scan is None else (scan.files, scan.messages)

        return overview(self.items(), scanned, rows, frame)

    # -- the frames table -----------------------------------------------------------------------
    def frame_batches(
        self, *, batch_rows: int | None = None, engine: str = "auto"
    ) -> Iterator[pl.DataFrame]:
        """The frames table as DataFrames of at most ``batch_rows`` rows, made afresh (none
        kept): what a writer streams, and the reference engine's table (``engine``)."""
        frames = _frames_module()
        rows = frames.FRAME_BATCH_ROWS if batch_rows is None else batch_rows
        engine_ = frames.FramesEngine(batch_rows=rows, engine=engine, size=self._size_known())
        items = self.items()
        while (item := next(items, None)) is not None:
            yield from engine_.feed(item)
            del item
        yield from engine_.finish()

    def frames_table(self, *, batch_rows: int | None = None, engine: str = "auto") -> pl.LazyFrame:
        """:attr:`frames`, or the same table made by ``engine`` in batches of ``batch_rows``
        (not kept)."""
        if engine != "reference" and batch_rows is None:
            return self.frames
        return _lazy(lambda: self.frame_batches(batch_rows=batch_rows, engine=engine), "frames")

    def _frame_batches(self, *, cached: bool = True) -> Iterator[pl.DataFrame]:
        if not self.keep_tables:
            yield from self.frame_batches()
            return
        if self._frames is None:
            self._frames = _Frames(_frames_module().FramesEngine(size=self._size_known()))
        state = self._frames
        if cached:
            yield from list(state.batches)
        for item in self.items(state.at):  # on from what the kept batches hold
            state.at += 1
            for df in state.engine.feed(item):
                state.batches.append(df)
                yield df
        for df in state.engine.finish():
            state.batches.append(df)
            yield df

    @property
    def frames(self) -> pl.LazyFrame:
        """One row per message (``FRAMES_SCHEMA``; ``docs/tables.md``)."""
        return _lazy(self._frame_batches, "frames")

    # -- replay ----------------------------------------------------------------------------------
    def replay(
        self,
        *,
        expected_format: FilterFormat | None = None,
        keep_history: bool = True,
        keep_events: bool = True,
        engine: str = "auto",
        progress: Callable[[int], None] | None = None,
    ) -> ReplayReport:
        """The consumer's rules over the whole source, one lane per pool and a session per
        stream (``docs/replay.md``): every event and violation, each lane's words and history.
        ``engine``: ``compiled`` (the kernel takes every clean step), ``reference`` (every
        message one by one: the same report), or ``auto``: compiled unless the source is small
        (``docs/kernels.md``). Kept: a second call costs nothing. ``progress``
        is called with the source's bytes read since its last call (``size()`` in all)."""
        key = (check_engine(engine), _format_key(expected_format), keep_history, keep_events)
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = self._new_run(key, expected_format, None)
        return self._advance(run, progress)

    def _new_run(
        self, key: tuple[Any, ...], expected_format: FilterFormat | None, tables: Collector | None
    ) -> _Run:
        engine, _fmt, keep_history, keep_events = key
        hooks = {} if tables is None else tables.hooks()
        player = Replayer(
            expected_format=expected_format,
            keep_history=keep_history,
            keep_events=keep_events,
            **hooks,
        )
        from cbi1kit.analysis._fast import feeder_of  # numba loads with the first replay

        return _Run(player, feeder_of(engine, player, self._size_known()), tables=tables)

    def _size_known(self) -> int | None:
        """The source's bytes for choosing an engine; None for a followed capture (it grows)."""
        return None if self._following else self.size()

    def size(self) -> int | None:
        """The bytes of the source's files (a capture's segments summed; None for messages):
        what ``replay(progress=...)`` counts to."""
        paths = self._paths()
        return None if paths is None else sum(_file_size(p) for p in paths)

    def _paths(self) -> list[Path] | None:
        resolved = self._resolved
        if resolved.segments is not None:
            return list(resolved.segments)
        if isinstance(resolved.source, str | os.PathLike):
            return [Path(resolved.source)]
        return None

    def _advance(self, run: _Run, progress: Callable[[int], None] | None) -> ReplayReport:
        if not self.keep_tables and run.report is not None:
            return run.report  # the one pass is behind it
        grew = False
        items = self.items(run.at)
        if progress is not None:  # counted on from where this run's last call stopped

            def tell(n: int) -> None:
                run.reached += n
                progress(n)

            items = _counted(items, _bases(self._paths() or []), tell, run.reached)
        for item in items:
            run.feeder.feed(item)
            run.at += 1
            grew = True
        if run.report is None or grew:
            run.report = run.player.report()
        return run.report

    # -- the tables replay makes ------------------------------------------------------------------
    def tables(
        self, *, expected_format: FilterFormat | None = None, engine: str = "auto"
    ) -> Collector:
        """The images and snapshots tables, made by a replay that keeps them: the default
        replay itself where it has not run yet (one pass serves both), else a lean one."""
        from cbi1kit.analysis._tables import Collector

        default = (check_engine(engine), _format_key(expected_format), True, True)
        run = self._runs.get(default)
        if run is None:
            run = self._runs[default] = self._new_run(default, expected_format, Collector())
        elif run.tables is None:
            lean = ("tables", engine, default[1])
            run = self._runs.get(lean) or self._new_run(
                (engine, default[1], False, False), expected_format, Collector()
            )
            self._runs[lean] = run
        self._advance(run, None)
        assert run.tables is not None
        return run.tables

    @property
    def images(self) -> pl.LazyFrame:
        """One row per image of every applied delta, with the word it replaced."""
        return _lazy(lambda: iter([self.tables().images_df()]), "images")

    @property
    def snapshots(self) -> pl.LazyFrame:
        """One row per installed snapshot."""
        return _lazy(lambda: iter([self.tables().snapshots_df()]), "snapshots")

    # -- what replay answers -------------------------------------------------------------------
    def lane(
        self, at: Moment = None, *, dc: int | str | DcId | None = None, pool: PoolId | None = None
    ) -> Words | None:
        """The words of the lane of ``dc`` (or ``pool``; the only one without either) at ``at``
        (a sequence, an ISO time or ``+90s``: what ``global_view`` takes; None: its final
        words); None when it was not ready then."""
        from cbi1kit.analysis._global import lane_at_moment

        report = self.replay()
        return lane_at_moment(report, report.lane(dc, pool=pool), at)[1]

    # the views load polars and the consumer tables on first use, not with the scan
    def view(
        self,
        *,
        model: str | None = None,
        at: Moment = None,
        max_age: float | timedelta | None = None,
    ) -> GlobalView:
        """What a global router consults for ``model`` at ``at``, stale lanes marked past
        ``max_age`` seconds (``cbi1kit.global_view``)."""
        from cbi1kit.analysis._global import build_global_view

        return build_global_view(self.replay(), model=model, at=at, max_age=max_age)

    def timeline(self, *, model: str | None = None, points: int = 24) -> pl.DataFrame:
        """The global view at ``points`` moments (``cbi1kit.analysis.global_timeline``)."""
        from cbi1kit.analysis._global import build_timeline

        return build_timeline(self.replay(), model=model, points=points)

    def explain(self, *, model: str, **options: Any) -> Explanation:
        """One request against the view at a moment, step by step (``cbi1kit.explain``)."""
        from cbi1kit.analysis._explain import build_explanation

        return build_explanation(self.replay(), model=model, **options)

    def diff(self, other: LaneSource | Capture | None = None, **options: Any) -> LaneDiff:
        """A lane of this capture against ``other`` (another capture, moment or DC; words)
        bucket by bucket (``cbi1kit.diff``)."""
        from cbi1kit.analysis._diff import build_diff

        labels = options.pop("labels", (_name(self.source), _side_name(other)))
        return build_diff(self.replay(), diff_side(other), labels=labels, **options)

    def stats(self, at: Moment = None, *, dc: int | str | DcId | None = None) -> CkfStats:
        """``CF.INFO``-style figures of a lane at a moment (``cbi1kit.ckf.lane_stats``)."""
        from cbi1kit.ckf._stats import lane_stats

        words = self.lane(at, dc=dc)
        if words is None:
            raise LaneError(LaneVariant.NotReady, message=f"the lane held nothing at {at}")
        return lane_stats(words)

    def export(
        self,
        out_dir: str | os.PathLike[str],
        *,
        expected_format: FilterFormat | None = None,
        overwrite: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Path]:
        """The frames, images and snapshots tables as Parquet files, from one more pass
        (``cbi1kit.export_parquet``); ``progress`` as ``replay``'s, in bytes read."""
        from cbi1kit.analysis._export import export_parquet  # pyarrow's writer: on first use

        items = self.items()
        if progress is not None:
            items = _counted(items, _bases(self._paths() or []), progress)
        return export_parquet(items, out_dir, expected_format=expected_format, overwrite=overwrite)


def _bases(paths: list[Path]) -> dict[str, int]:
    """Each file of a source by name: the bytes of the files before it."""
    bases, at = {}, 0
    for path in paths:
        bases[str(path)] = at
        at += _file_size(path)
    return bases


def _counted(
    items: Iterator[Item],
    bases: Mapping[str, int],
    progress: Callable[[int], None],
    reached: int = 0,
) -> Iterator[Item]:
    """``items``, telling ``progress`` the bytes each one reads on past ``reached``
    (``_reached``): replay's and export's progress."""
    for item in items:
        yield item
        if (at := _reached(item, bases)) > reached:
            progress(at - reached)
            reached = at


def _file_size(path: Path) -> int:
    """A file's bytes; 0 where it is not there (yet: a followed capture before it is made)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _reached(item: Item, bases: Mapping[str, int]) -> int:
    """How far into the source ``item`` ends, in bytes (the start of its last record): what
    a progress bar of the source's size shows."""
    if isinstance(item, FrameSpan):
        offset = int(item.offset[-1]) if len(item) else 0
    else:
        offset = getattr(item, "source_offset", 0)
    return bases.get(str(getattr(item, "source", "")), 0) + offset


def _format_key(fmt: FilterFormat | None) -> tuple[int, int] | None:
    return None if fmt is None else (int(fmt.seed), int(fmt.bucket_count))


def _name(source: object) -> str:
    if isinstance(source, (str, os.PathLike)):
        return Path(source).name
    return type(source).__name__


def _frames_module() -> Any:
    """The frames table's module, imported when a table is first asked for: a replay alone
    never loads polars or pyarrow."""
    from cbi1kit.analysis import _frames

    return _frames


def _lazy(batches: Callable[[], Iterator[pl.DataFrame]], table: str) -> pl.LazyFrame:
    """A LazyFrame of the table named ``table`` (its schema from ``TABLE_SCHEMAS``) whose
    rows are ``batches()``, produced as polars pulls them."""
    from polars.io.plugins import register_io_source

    from cbi1kit.analysis._schema import TABLE_SCHEMAS

    schema = TABLE_SCHEMAS[table]

    def produce(
        with_columns: list[str] | None,
        predicate: pl.Expr | None,
        n_rows: int | None,
        batch_size: int | None,
    ) -> Iterator[pl.DataFrame]:
        left = n_rows
        for batch in batches():
            df = batch if left is None else batch.head(left)
            if left is not None:
                left -= df.height
            if predicate is not None:
                df = df.filter(predicate)
            if with_columns is not None:
                df = df.select(with_columns)
            yield df
            if left is not None and left <= 0:
                return

    return register_io_source(produce, schema=schema)


def open_capture(
    source: Source | Capture, *, keep_tables: bool = True, follow: bool = False
) -> Capture:
    """``source`` scanned once (a ``Capture`` is returned as it is): see :class:`Capture`.

    A path that is no readable source raises here, as any reader's open does:
    ``FileNotFoundError``, ``IsADirectoryError``, or ``CaptureError`` ``Unreadable`` for an
    empty or foreign file. Only ``follow=True`` waits for a file that is not there yet.
    """
    if isinstance(source, Capture):
        return source
    capture = Capture(source, keep_tables=keep_tables, follow=follow)
    if not follow and (error := capture._resolved.error) is not None:
        raise error  # missing, a folder, empty or foreign
    return capture


def diff_side(side: Any, expected_format: FilterFormat | None = None) -> Any:
    """A diff side as ``build_diff`` takes it: a capture (a path that is no ``.npy`` lane, or a
    ``Capture``) replayed, anything else as it is."""
    from cbi1kit.analysis._diff import capture_side

    if isinstance(side, Capture):
        return side.replay(expected_format=expected_format, keep_events=False)
    if capture_side(side):
        capture = open_capture(side, keep_tables=False)
        return capture.replay(expected_format=expected_format, keep_events=False)
    return side


def _side_name(side: object) -> str | None:
    """The label a side's source gives it (a file's name), None to let ``build_diff`` say."""
    if isinstance(side, Capture):
        return _name(side.source)
    return Path(side).name if isinstance(side, (str, os.PathLike)) else None

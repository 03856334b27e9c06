"""The one-call forms the front door names (``ck.replay(path)``, ``ck.explain(path, ...)``): each
opens its source once and asks the :class:`~cbi1kit.analysis.Capture` (``docs/data-path.md``).
They stand above ``Capture``, so that nothing below it has to open a source.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy.typing as npt

from cbi1kit.analysis._capture import Capture, diff_side, open_capture
from cbi1kit.analysis._replay import ReplayReport
from cbi1kit.analysis._source import Source
from cbi1kit.ckf._limits import DEFAULT_VERIFICATION_WINDOW

if TYPE_CHECKING:
    from collections.abc import Iterator

    import polars as pl

    from cbi1kit.analysis._diff import DcName, LaneDiff, LaneSource
    from cbi1kit.analysis._explain import BlockRequest, Explanation, HoldingsByDc
    from cbi1kit.analysis._global import At, GlobalView, Moment
    from cbi1kit.hashing._pools import DcId, IndexerDomainId
    from cbi1kit.wire._format import FilterFormat


def _report(source: Source | Capture | ReplayReport, fmt: FilterFormat | None) -> ReplayReport:
    """A report as it is, else the source's replay (history kept, no per-record events)."""
    if isinstance(source, ReplayReport):
        return source
    return open_capture(source, keep_tables=False).replay(expected_format=fmt, keep_events=False)


def replay(
    records: Source | Capture,
    *,
    expected_format: FilterFormat | None = None,
    keep_history: bool = True,
    keep_events: bool = True,
    engine: str = "auto",
    progress: Callable[[int], None] | None = None,
) -> ReplayReport:
    """Replay a whole source, one lane per pool: ``cbi1kit.open(records).replay(...)`` (see
    :meth:`cbi1kit.analysis.Capture.replay`)."""
    return open_capture(records, keep_tables=False).replay(
        expected_format=expected_format,
        keep_history=keep_history,
        keep_events=keep_events,
        engine=engine,
        progress=progress,
    )


def frames_batches(
    source: Source | Capture, *, batch_records: int | None = None, engine: str = "auto"
) -> Iterator[pl.DataFrame]:
    """The ``frames`` table of a source as DataFrames of at most ``batch_records`` rows (None:
    65,536): ``cbi1kit.open(source).frame_batches(...)``, nothing kept."""
    capture = open_capture(source, keep_tables=False)
    yield from capture.frame_batches(batch_rows=batch_records, engine=engine)


def frames_table(
    source: Source | Capture, *, batch_records: int | None = None, engine: str = "auto"
) -> pl.LazyFrame:
    """One row per message (``FRAMES_SCHEMA``), made as polars pulls it, batches of at most
    ``batch_records`` rows (None: 65,536): ``cbi1kit.open(source, keep_tables=False).frames``."""
    capture = open_capture(source, keep_tables=False)
    return capture.frames_table(batch_rows=batch_records, engine=engine)


def images_table(
    source: Source | Capture, *, expected_format: FilterFormat | None = None, engine: str = "auto"
) -> pl.DataFrame:
    """One row per image of every applied delta, with the word it replaced (``IMAGES_SCHEMA``):
    ``cbi1kit.open(source).tables(...).images_df()``."""
    capture = open_capture(source, keep_tables=False)
    return capture.tables(expected_format=expected_format, engine=engine).images_df()


def snapshots_table(
    source: Source | Capture, *, expected_format: FilterFormat | None = None, engine: str = "auto"
) -> pl.DataFrame:
    """One row per installed snapshot (``SNAPSHOTS_SCHEMA``)."""
    capture = open_capture(source, keep_tables=False)
    return capture.tables(expected_format=expected_format, engine=engine).snapshots_df()


def export_parquet(
    source: Source | Capture,
    out_dir: str | os.PathLike[str],
    *,
    expected_format: FilterFormat | None = None,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Write ``frames.parquet``, ``images.parquet`` and ``snapshots.parquet`` of ``source``
    (:meth:`cbi1kit.analysis.Capture.export`: unsigned columns stay unsigned; an existing file
    is ``OutputError`` ``Exists`` unless ``overwrite``; all three or none)."""
    capture = open_capture(source, keep_tables=False)
    return capture.export(out_dir, expected_format=expected_format, overwrite=overwrite)


def global_view(
    capture: Source | Capture | ReplayReport,
    *,
    model: str | None = None,
    at: At | int | str | datetime | timedelta | None = None,
    max_age: float | timedelta | None = None,
    expected_format: FilterFormat | None = None,
) -> GlobalView:
    """What a global router consults for ``model`` at ``at``: upstream's consumer table per
    indexer domain, each lane with where its words came from, stale lanes marked past
    ``max_age`` seconds (``analysis._global.build_global_view``, over the capture's replay);
    ``ck.global_view("fleet.kvrcap", model="m", at="+90s").table``."""
    from cbi1kit.analysis._global import build_global_view

    report = _report(capture, expected_format)
    return build_global_view(report, model=model, at=at, max_age=max_age)


def global_timeline(
    capture: Source | Capture | ReplayReport, *, model: str | None = None, points: int = 24
) -> pl.DataFrame:
    """The global view at ``points`` evenly spaced receive times as one table
    (``analysis._global.build_timeline``, over the capture's replay)."""
    from cbi1kit.analysis._global import build_timeline

    return build_timeline(_report(capture, None), model=model, points=points)


def explain(
    capture: Source | Capture | ReplayReport,
    *,
    model: str,
    tokens: npt.ArrayLike | Sequence[int] | None = None,
    request: BlockRequest | None = None,
    at: At | int | str | datetime | timedelta | None = None,
    max_age: float | timedelta | None = None,
    lora: str | None = None,
    truth: HoldingsByDc | None = None,
    local_dc: int | str | DcId | None = None,
    tie_key: int | None = None,
    domain: IndexerDomainId | str | None = None,
    verification_window: int = DEFAULT_VERIFICATION_WINDOW,
    expected_format: FilterFormat | None = None,
) -> Explanation:
    """Explain how the router sees ``tokens`` (or a trace ``request``) for ``model`` at ``at``,
    step by step (``analysis._explain.build_explanation``, over the capture's replay)."""
    from cbi1kit.analysis._explain import build_explanation, check_verification_window

    check_verification_window(verification_window)  # a bad window is refused before a replay
    return build_explanation(
        _report(capture, expected_format),
        model=model,
        tokens=tokens,
        request=request,
        at=at,
        max_age=max_age,
        lora=lora,
        truth=truth,
        local_dc=local_dc,
        tie_key=tie_key,
        domain=domain,
        verification_window=verification_window,
    )


def diff(
    a: LaneSource | Capture,
    b: LaneSource | Capture | None = None,
    *,
    dc: DcName | None = None,
    dc_a: DcName | None = None,
    dc_b: DcName | None = None,
    model: str | None = None,
    at: Moment = None,
    at_a: Moment = None,
    at_b: Moment = None,
    expected_format: FilterFormat | None = None,
    labels: tuple[str | None, str | None] = (None, None),
) -> LaneDiff:
    """Lane ``a`` against lane ``b`` bucket by bucket (``analysis._diff.build_diff``); a
    side that is a capture (a path that is no ``.npy`` lane) is replayed first, once."""
    from cbi1kit.analysis._diff import build_diff

    side_a = diff_side(a, expected_format)
    same = b is a or (_file_name(a) is not None and _file_name(b) is not None and _same(a, b))
    side_b = side_a if b is None or same else diff_side(b, expected_format)
    names = tuple(
        label or _file_name(side)
        for label, side in zip(labels, (a, a if b is None else b), strict=True)
    )
    return build_diff(
        side_a,
        None if b is None else side_b,
        dc=dc,
        dc_a=dc_a,
        dc_b=dc_b,
        model=model,
        at=at,
        at_a=at_a,
        at_b=at_b,
        labels=(names[0], names[1]),
    )


def _same(a: object, b: object) -> bool:
    """Two paths of one capture (replayed once)."""
    paths = (str, os.PathLike)
    return isinstance(a, paths) and isinstance(b, paths) and os.fspath(a) == os.fspath(b)


def _file_name(side: object) -> str | None:
    return Path(side).name if isinstance(side, (str, os.PathLike)) else None

"""Parquet export: the frames, images and snapshots tables as files, unsigned types kept, in one
pass over the capture (its frames and its replay take each item in turn) while a writer thread
writes what the last step made (pyarrow writes without the GIL)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Final

import polars as pl

from cbi1kit._files import claim_outputs, written_whole
from cbi1kit.analysis._fast import feeder_of
from cbi1kit.analysis._frames import FramesEngine
from cbi1kit.analysis._replayer import Replayer
from cbi1kit.analysis._schema import TABLE_SCHEMAS, arrow_schema, parquet_writer
from cbi1kit.analysis._tables import Collector

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from cbi1kit.wire._format import FilterFormat


_IMAGE_ROWS: Final = 1 << 20  # images written at a time (a row group)


class _Writers:
    """One Parquet writer per table, written on a thread, one write in flight at a time."""

    def __init__(self, paths: dict[str, Path], stack: ExitStack) -> None:
        self.writers: dict[str, pq.ParquetWriter] = {
            name: stack.enter_context(parquet_writer(paths[name], arrow_schema(schema)))
            for name, schema in TABLE_SCHEMAS.items()
        }
        self.pool = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="cbi1kit-write"))
        self.pending: Future[None] | None = None

    def write(self, name: str, df: pl.DataFrame) -> None:
        if not df.height:
            return
        writer = self.writers[name]
        table = df.to_arrow().cast(writer.schema)
        self.wait()
        self.pending = self.pool.submit(writer.write_table, table)

    def wait(self) -> None:
        if self.pending is not None:
            self.pending.result()  # a write's error is raised here
            self.pending = None


def _rows(
    items: Iterable[object], expected_format: FilterFormat | None
) -> Iterator[tuple[str, pl.DataFrame]]:
    """(table, rows) from one pass: each item to the frames engine, then to the replay."""
    frames = FramesEngine()
    tables = Collector()
    player = Replayer(
        expected_format=expected_format, keep_history=False, keep_events=False, **tables.hooks()
    )
    feeder = feeder_of("compiled", player)
    for item in items:
        for df in frames.feed(item):
            yield "frames", df
        feeder.feed(item)
        if tables.image_rows >= _IMAGE_ROWS:
            yield "images", tables.take_images()[0]
    for df in frames.finish():
        yield "frames", df
    images, snapshots = tables.take()
    yield "images", images
    yield "snapshots", snapshots


def export_parquet(
    items: Iterable[object],
    out_dir: str | os.PathLike[str],
    *,
    expected_format: FilterFormat | None = None,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Write ``frames.parquet``, ``images.parquet`` and ``snapshots.parquet`` of a source's scan
    ``items``, unsigned columns kept unsigned (``pl.read_parquet`` gives ``pl.UInt64`` back).
    Existing files are ``OutputError`` ``Exists`` unless ``overwrite``, before any is written; the
    three appear together, and a failed write (a full disk) leaves none (``Unwritable``)."""
    out = Path(out_dir)
    paths = {name: out / f"{name}.parquet" for name in TABLE_SCHEMAS}
    claim_outputs(paths.values(), overwrite=overwrite)
    out.mkdir(parents=True, exist_ok=True)
    # the three written aside and put in place together: a failed export leaves none
    with written_whole(list(paths.values()), overwrite=overwrite) as partials, ExitStack() as stack:
        writers = _Writers(dict(zip(paths, partials, strict=True)), stack)
        for name, df in _rows(items, expected_format):
            writers.write(name, df)
        writers.wait()
    return paths

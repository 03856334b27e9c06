"""The tables that need the lane: delta images (with the words they overwrote) and installed
snapshots come from replay (only applied deltas and installed snapshots appear); occupancy
bins any lane.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from cbi1kit.analysis._frames import _is_segment_list
from cbi1kit.analysis._replay import Replayer, _fast_engine
from cbi1kit.analysis._schema import IMAGES_SCHEMA, OCCUPANCY_SCHEMA, SNAPSHOTS_SCHEMA
from cbi1kit.capture._readers import FrameDamage, read_frames
from cbi1kit.ckf._bucket import bucket_occupancy
from cbi1kit.errors import Cbi1kitError
from cbi1kit.wire._assembly import AssembledSnapshot

__all__ = [
    "images_table",
    "occupancy_table",
    "snapshots_table",
]

# ---------------------------------------------------------------------- images and snapshots


#: at most this many snapshot rows wait for their flush (a row a snapshot, kept as a dict)
_SNAPSHOT_ROWS: Final = 1 << 14


class _Collector:
    """The images and snapshots tables' rows as replay reports them, handed out as DataFrames
    when due: ``flush_rows`` images, or as many snapshots (at most ``_SNAPSHOT_ROWS``). Not a
    flush per snapshot: each write of a DataFrame is a Parquet row group, and a row group a row
    bloated the files and their readers."""

    def __init__(self, flush_rows: int) -> None:
        self.flush_rows = flush_rows
        self.images: list[tuple[Any, ...]] = []
        self.image_rows = 0
        self.snapshots: list[dict[str, Any]] = []

    def on_deltas(
        self,
        index: npt.NDArray[np.int64],
        sequence: npt.NDArray[np.uint64],
        counts: npt.NDArray[np.int64],
        buckets: npt.NDArray[np.uint32],
        new: npt.NDArray[np.uint64],
        prev: npt.NDArray[np.uint64],
    ) -> None:
        """Applied deltas, many at a time (``Replayer``'s ``on_deltas``)."""
        self.images.append(
            (np.repeat(index, counts), np.repeat(sequence, counts), buckets, new, prev)
        )
        self.image_rows += len(buckets)

    def on_snapshot(self, index: int, sequence: int, snap: AssembledSnapshot, stream: int) -> None:
        occupied = sum(int(bucket_occupancy(w).sum(dtype=np.int64)) for _, w in snap.parts)
        self.snapshots.append(
            {
                "record_index": index,
                "stream_id": stream,
                "sequence": sequence,
                "bucket_count": snap.bucket_count,
                "chunk_count": len(snap.parts),
                "nonzero_buckets": snap.image_count,
                "occupied_slots": occupied,
                "load_factor": occupied / (4 * snap.bucket_count),
            }
        )

    def due(self) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
        """The images and the snapshots whose flush is due, each None until it is."""
        images = self.images_df() if self.image_rows >= self.flush_rows else None
        due = len(self.snapshots) >= min(self.flush_rows, _SNAPSHOT_ROWS)
        return images, self.snapshots_df() if due else None

    def images_df(self) -> pl.DataFrame:
        if not self.images:
            return pl.DataFrame(schema=IMAGES_SCHEMA)
        new = np.concatenate([x[3] for x in self.images]).astype(np.uint64)
        prev = np.concatenate([x[4] for x in self.images]).astype(np.uint64)
        df = pl.DataFrame(
            {
                "record_index": np.concatenate([x[0] for x in self.images]).astype(np.uint64),
                "sequence": np.concatenate([x[1] for x in self.images]).astype(np.uint64),
                "bucket": np.concatenate([x[2] for x in self.images]).astype(np.uint32),
                "new_word": new,
                "previous_word": prev,
                "occupied_before": bucket_occupancy(prev),
                "occupied_after": bucket_occupancy(new),
            },
            schema=IMAGES_SCHEMA,
        )
        self.images.clear()
        self.image_rows = 0
        return df

    def snapshots_df(self) -> pl.DataFrame:
        df = pl.DataFrame(self.snapshots, schema=SNAPSHOTS_SCHEMA)
        self.snapshots.clear()
        return df


def _replay_batches(
    source: Any, *, expected_format: Any, flush_rows: int, engine: str = "auto"
) -> Iterator[tuple[pl.DataFrame | None, pl.DataFrame | None]]:
    """(images batch, snapshots batch) pairs from one replay pass (``engine``: ``replay``'s;
    a capture goes through the fast engine, a batch of messages at a time)."""
    c = _Collector(flush_rows)
    player = Replayer(
        expected_format=expected_format,
        keep_history=False,
        keep_events=False,
        on_snapshot=c.on_snapshot,
        on_deltas=c.on_deltas,
    )
    fast = _fast_engine(source, engine)
    if fast is not None:
        for _ in fast.feed_capture(player, source):
            images, snapshots = c.due()
            if images is not None or snapshots is not None:
                yield images, snapshots
        yield c.images_df(), c.snapshots_df()
        return
    try:
        it: Iterator[Any] = iter(
            read_frames(source, damage="report")
            if isinstance(source, (str, os.PathLike)) or _is_segment_list(source)
            else source
        )
        for rec in it:
            if isinstance(rec, FrameDamage):
                player.feed_damage(rec)
                continue
            player.feed(rec)
            images, snapshots = c.due()
            if images is not None or snapshots is not None:
                yield images, snapshots
    except (Cbi1kitError, OSError, ValueError):
        pass  # damage ends the replayable part; replay() reports it
    yield c.images_df(), c.snapshots_df()


def images_table(
    source: Any, *, expected_format: Any = None, flush_rows: int = 1 << 20, engine: str = "auto"
) -> pl.DataFrame:
    """One row per image of every applied delta, with the word it replaced (``IMAGES_SCHEMA``;
    ``engine``: ``replay``'s)."""
    parts = [
        d
        for d, _ in _replay_batches(
            source, expected_format=expected_format, flush_rows=flush_rows, engine=engine
        )
        if d is not None
    ]
    return pl.concat(parts) if parts else pl.DataFrame(schema=IMAGES_SCHEMA)


def snapshots_table(
    source: Any, *, expected_format: Any = None, engine: str = "auto"
) -> pl.DataFrame:
    """One row per installed snapshot (``SNAPSHOTS_SCHEMA``; ``engine``: ``replay``'s)."""
    parts = [
        s
        for _, s in _replay_batches(
            source, expected_format=expected_format, flush_rows=1 << 20, engine=engine
        )
        if s is not None
    ]
    return pl.concat(parts) if parts else pl.DataFrame(schema=SNAPSHOTS_SCHEMA)


def occupancy_table(lane: npt.ArrayLike, *, bins: int = 64) -> pl.DataFrame:
    """Per-bucket-range occupancy of one lane (``OCCUPANCY_SCHEMA``): ``bins`` equal ranges."""
    words = np.asarray(lane)
    if words.dtype != np.uint64 or words.ndim != 1:
        raise TypeError("lane must be a 1-D uint64 array")
    n = words.shape[0]
    bins = max(1, min(bins, n)) if n else 1
    edges = np.linspace(0, n, bins + 1).astype(np.int64)
    occ = bucket_occupancy(words).astype(np.int64)
    starts = edges[:-1]
    if n:
        slots = np.add.reduceat(occ, starts)
        nonzero = np.add.reduceat((occ > 0).astype(np.int64), starts)
        full_b = np.add.reduceat((occ == 4).astype(np.int64), starts)
    else:
        slots = nonzero = full_b = np.zeros(bins, np.int64)
    sizes = np.diff(edges)
    return pl.DataFrame(
        {
            "bin": np.arange(bins, dtype=np.uint32),
            "bucket_start": starts.astype(np.uint64),
            "bucket_end": edges[1:].astype(np.uint64),
            "buckets": sizes.astype(np.uint64),
            "nonzero_buckets": nonzero.astype(np.uint64),
            "full_buckets": full_b.astype(np.uint64),
            "occupied_slots": slots.astype(np.uint64),
            "load_factor": np.where(sizes > 0, slots / np.maximum(4 * sizes, 1), 0.0),
        },
        schema=OCCUPANCY_SCHEMA,
    )

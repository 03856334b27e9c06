"""The tables that need the lane: delta images (with the words they overwrote) and installed
snapshots come from replay (only applied deltas and installed snapshots appear); occupancy
bins any lane.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from cbi1kit.analysis._schema import IMAGES_SCHEMA, OCCUPANCY_SCHEMA, SNAPSHOTS_SCHEMA
from cbi1kit.ckf._bucket import bucket_occupancy
from cbi1kit.wire._assembly import AssembledSnapshot
from cbi1kit.wire._format import FilterFormat

FormatLike = FilterFormat

# ---------------------------------------------------------------------- images and snapshots


_CHUNK_ROWS = 1 << 20  # rows of one block of the images table's columns


class _Images:
    """The images table's columns, filled in blocks of ``_CHUNK_ROWS`` rows: each value is
    written once, into its final place, and a full block's DataFrame is made once (the table is
    the blocks side by side: no concatenation copies a row)."""

    def __init__(self) -> None:
        self.rows = 0
        self._full: list[pl.DataFrame] = []
        self._block: tuple[npt.NDArray[Any], ...] = ()
        self._at = 0  # rows of the open block

    def add(self, columns: tuple[npt.NDArray[Any], ...]) -> None:
        """Append ``(frame_index, sequence, bucket, new_word, previous_word)`` rows."""
        n, lo = len(columns[0]), 0
        while lo < n:
            if not self._block or self._at == _CHUNK_ROWS:
                self._close()
                self._block = tuple(np.empty(_CHUNK_ROWS, t) for t in _IMAGE_DTYPES)
            take = min(n - lo, _CHUNK_ROWS - self._at)
            for dst, src in zip(self._block, columns, strict=True):
                dst[self._at : self._at + take] = src[lo : lo + take]
            self._at += take
            lo += take
        self.rows += n

    def _close(self) -> None:
        if self._at == _CHUNK_ROWS:
            self._full.append(_images_df(self._block, self._at))
            self._block, self._at = (), 0

    def frame(self) -> pl.DataFrame:
        """Every row so far."""
        self._close()
        parts = [*self._full, _images_df(self._block, self._at)] if self._at else self._full
        if not parts:
            return pl.DataFrame(schema=IMAGES_SCHEMA)
        return pl.concat(parts, rechunk=False) if len(parts) > 1 else parts[0]


_IMAGE_DTYPES = tuple(np.dtype(t) for t in ("u8", "u8", "u4", "u8", "u8"))


def _images_df(block: tuple[npt.NDArray[Any], ...], n: int) -> pl.DataFrame:
    """The first ``n`` rows of a block, over its buffers."""
    index, sequence, bucket, new, prev = (c[:n] for c in block)
    return pl.DataFrame(
        {
            "frame_index": index,
            "sequence": sequence,
            "bucket": bucket,
            "new_word": new,
            "previous_word": prev,
            "occupied_before": bucket_occupancy(prev),
            "occupied_after": bucket_occupancy(new),
        },
        schema=IMAGES_SCHEMA,
    )


class Collector:
    """The images and snapshots tables' rows as a replay reports them (its ``hooks``), kept as
    columns: ``images_df`` and ``snapshots_df`` are every row so far; ``take`` hands out the
    rows gathered since the last call where a writer streams them."""

    def __init__(self) -> None:
        self._images = _Images()
        self._snapshots: list[dict[str, Any]] = []
        self._kept: tuple[int, int, pl.DataFrame, pl.DataFrame] | None = None

    @property
    def image_rows(self) -> int:
        """Images gathered since the last ``take``."""
        return self._images.rows

    def hooks(self) -> dict[str, Any]:
        """The ``Replayer`` arguments that feed this collector."""
        return {"on_snapshot": self.on_snapshot, "on_deltas": self.on_deltas}

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
        rows = np.repeat(index, counts).view(np.uint64), np.repeat(sequence, counts)
        self._images.add((*rows, buckets, new, prev))

    def on_snapshot(self, index: int, sequence: int, snap: AssembledSnapshot, stream: int) -> None:
        """Note an installed snapshot as a row of the snapshots table."""
        occupied = sum(int(bucket_occupancy(w).sum(dtype=np.int64)) for _, w in snap.parts)
        self._snapshots.append(
            {
                "frame_index": index,
                "stream_id": stream,
                "sequence": sequence,
                "bucket_count": snap.bucket_count,
                "chunk_count": len(snap.parts),
                "nonzero_buckets": snap.image_count,
                "occupied_slots": occupied,
                "load_factor": occupied / (4 * snap.bucket_count),
            }
        )

    def images_df(self) -> pl.DataFrame:
        """Every image so far."""
        return self._keep()[2]

    def snapshots_df(self) -> pl.DataFrame:
        """Every installed snapshot so far."""
        return self._keep()[3]

    def _keep(self) -> tuple[int, int, pl.DataFrame, pl.DataFrame]:
        if self._kept is None or self._kept[:2] != (self._images.rows, len(self._snapshots)):
            self._kept = (
                self._images.rows,
                len(self._snapshots),
                self._images.frame(),
                pl.DataFrame(self._snapshots, schema=SNAPSHOTS_SCHEMA),
            )
        return self._kept

    def take_images(self) -> tuple[pl.DataFrame, int]:
        """The images gathered since the last take (a streaming writer's), and how many."""
        images = self._images.frame()
        self._images, self._kept = _Images(), None
        return images, images.height

    def take(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The images and snapshots gathered since the last ``take`` (a streaming writer's)."""
        images = self._images.frame()
        snapshots = pl.DataFrame(self._snapshots, schema=SNAPSHOTS_SCHEMA)
        self._images, self._snapshots, self._kept = _Images(), [], None
        return images, snapshots


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

"""The producer's encoders: a delta, one snapshot chunk, a whole lane as chunk frames, each with
upstream's checks in upstream's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from cbi1kit.errors import Cbi1Error, Cbi1Variant
from cbi1kit.wire._format import SNAPSHOT_CHUNK_BUCKETS, FilterFormat, max_delta_images
from cbi1kit.wire._frames import (
    ImagesLike,
    _as_images,
    _as_words,
    _encode_chunk,
    _encode_delta_bytes,
    _position,
)


def encode_delta(
    fmt: FilterFormat, dc_id: int, base_epoch: int, epoch: int, images: ImagesLike
) -> bytes:
    """A delta frame carrying ``images`` (absolute words) for ``base_epoch -> epoch``.

    Upstream's checks, in its order: more than ``max_delta_images()`` images is
    ``DeltaImageCount``; then the first image whose bucket is ``>= bucket_count`` is
    ``BucketIndex``. Images keep the caller's order (the producer's first-touch order).
    """
    if not isinstance(images, np.ndarray):
        images = list(images)
    maximum = max_delta_images()
    if len(images) > maximum:
        raise Cbi1Error(
            Cbi1Variant.DeltaImageCount,
            f"delta has {len(images)} images, exceeding the CBI1 maximum {maximum}",
            field="delta.image_count",
            expected=maximum,
            actual=len(images),
        )
    packed = _as_images(images)
    buckets = packed["bucket"]
    bad = np.flatnonzero(buckets >= fmt.bucket_count)
    if bad.size:
        i = int(bad[0])
        bucket = int(buckets[i])
        raise Cbi1Error(
            Cbi1Variant.BucketIndex,
            f"bucket {bucket} is outside the declared {fmt.bucket_count}-bucket lane",
            field=f"delta.images[{i}].bucket",
            expected=fmt.bucket_count,
            actual=bucket,
        )
    return _encode_delta_bytes(fmt, dc_id, base_epoch, epoch, packed)


def encode_snapshot_chunk(
    fmt: FilterFormat,
    dc_id: int,
    epoch: int,
    chunk_index: int,
    chunk_count: int,
    words: npt.ArrayLike,
) -> bytes:
    """One chunk frame; ``bucket_offset`` is ``chunk_index * 524,288`` as upstream writes it."""
    return _encode_chunk(
        fmt,
        dc_id,
        epoch,
        chunk_index,
        chunk_count,
        chunk_index * SNAPSHOT_CHUNK_BUCKETS,
        _as_words(words),
    )


class SnapshotChunks(Sequence[bytes]):
    """A whole lane as chunk frames, each encoded only when asked for (4 MiB at a time)."""

    __slots__ = ("_dc_id", "_epoch", "_format", "_words")

    def __init__(
        self, fmt: FilterFormat, dc_id: int, epoch: int, words: npt.NDArray[np.uint64]
    ) -> None:
        self._format = fmt
        self._dc_id = dc_id
        self._epoch = epoch
        self._words = words

    def __len__(self) -> int:
        return (int(self._words.shape[0]) + SNAPSHOT_CHUNK_BUCKETS - 1) // SNAPSHOT_CHUNK_BUCKETS

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        index = _position(index, n, "chunk")
        start = index * SNAPSHOT_CHUNK_BUCKETS
        chunk = self._words[start : start + SNAPSHOT_CHUNK_BUCKETS]
        return _encode_chunk(self._format, self._dc_id, self._epoch, index, n, start, chunk)


def encode_snapshot_chunks(
    fmt: FilterFormat, dc_id: int, epoch: int, words: npt.ArrayLike
) -> SnapshotChunks:
    """The full lane ``words`` as ordered chunk frames (lazy, sized).

    ``len(words) != bucket_count`` is ``SnapshotBucketCount``, raised here, before any
    frame is produced.
    """
    lane = _as_words(words)
    if lane.shape[0] != fmt.bucket_count:
        raise Cbi1Error(
            Cbi1Variant.SnapshotBucketCount,
            f"snapshot has {lane.shape[0]} buckets, format declares {fmt.bucket_count}",
            field="words",
            expected=fmt.bucket_count,
            actual=int(lane.shape[0]),
        )
    return SnapshotChunks(fmt, dc_id, epoch, lane)

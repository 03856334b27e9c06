"""SnapshotAssembly beyond the golden cases: any lane survives chunking, any disorder is caught."""

from __future__ import annotations

import numpy as np
import pytest
from errorcheck import raises_variant
from hypothesis import given, settings
from hypothesis import strategies as st

from cbi1kit.errors import Cbi1Error
from cbi1kit.wire._assembly import SnapshotAssembly
from cbi1kit.wire._codec import Delta, SnapshotChunk, decode, encode_delta, encode_snapshot_chunks
from cbi1kit.wire._format import SNAPSHOT_CHUNK_BUCKETS, FilterFormat

FMT = FilterFormat(0xC0FFEE, 1 << 21)  # four chunks


def _lane(seed: int, fmt: FilterFormat = FMT) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lane = rng.integers(0, 1 << 64, fmt.bucket_count, dtype=np.uint64, endpoint=False)
    lane[rng.random(fmt.bucket_count) < 0.7] = 0
    return lane


@pytest.fixture(scope="module")
def chunks() -> tuple[np.ndarray, list[SnapshotChunk]]:
    lane = _lane(7)
    frames = [decode(FMT, c) for c in encode_snapshot_chunks(FMT, 1, 99, lane)]
    assert all(isinstance(f, SnapshotChunk) for f in frames)
    return lane, frames  # type: ignore[return-value]


def test_in_order_chunks_rebuild_the_exact_lane(chunks) -> None:  # type: ignore[no-untyped-def]
    lane, frames = chunks
    asm = SnapshotAssembly(FMT)
    results = [asm.absorb(f) for f in frames]
    assert results[:-1] == [None, None, None]
    done = results[-1]
    assert done is not None and done.epoch == 99
    assert np.array_equal(done.words, lane)
    nz = np.flatnonzero(lane)
    assert np.array_equal(done.images["bucket"], nz)
    assert np.array_equal(done.images["word"], lane[nz])
    assert done.image_count == nz.size
    assert not asm.in_progress  # reset after completion


@settings(max_examples=60, deadline=None)
@given(order=st.permutations(range(4)))
def test_any_disorder_fails_with_chunk_sequence(chunks, order: list[int]) -> None:  # type: ignore[no-untyped-def]
    _, frames = chunks
    asm = SnapshotAssembly(FMT)
    completed = None
    expected_next = 0
    for i in order:
        if i == expected_next:
            completed = asm.absorb(frames[i])
            expected_next += 1
        else:
            with raises_variant(Cbi1Error, "ChunkSequence"):
                asm.absorb(frames[i])
            expected_next = 0  # the failure reset the assembly
    assert (completed is not None) == (list(order) == [0, 1, 2, 3])


def test_delta_mid_snapshot_fails_without_reset(chunks) -> None:  # type: ignore[no-untyped-def]
    lane, frames = chunks
    delta = decode(FMT, encode_delta(FMT, 1, 99, 100, [(5, 1)]))
    assert isinstance(delta, Delta)
    asm = SnapshotAssembly(FMT)
    asm.absorb(frames[0])
    with raises_variant(Cbi1Error, "ChunkSequence"):
        asm.absorb(delta)
    assert asm.in_progress
    for f in frames[1:-1]:
        asm.absorb(f)
    done = asm.absorb(frames[-1])
    assert done is not None and np.array_equal(done.words, lane)


def test_new_epoch_chunk0_restarts_silently(chunks) -> None:  # type: ignore[no-untyped-def]
    _, frames = chunks
    other = [decode(FMT, c) for c in encode_snapshot_chunks(FMT, 1, 100, _lane(8))]
    asm = SnapshotAssembly(FMT)
    asm.absorb(frames[0])
    asm.absorb(frames[1])
    assert asm.absorb(other[0]) is None  # epoch 100 restarts
    with raises_variant(Cbi1Error, "ChunkSequence"):
        asm.absorb(frames[1])  # epoch 99's chunk 1 no longer fits


def test_short_last_chunk_is_incomplete_coverage() -> None:
    fmt = FilterFormat(1, 1 << 20)
    header = decode(
        fmt, encode_snapshot_chunks(fmt, 0, 5, np.zeros(fmt.bucket_count, np.uint64))[0]
    ).header
    asm = SnapshotAssembly(fmt)
    asm.absorb(SnapshotChunk(header, 0, 2, 0, np.ones(SNAPSHOT_CHUNK_BUCKETS, np.uint64)))
    with raises_variant(Cbi1Error, "IncompleteCoverage") as info:
        asm.absorb(SnapshotChunk(header, 1, 2, SNAPSHOT_CHUNK_BUCKETS, np.ones(10, np.uint64)))
    assert info.value.actual == SNAPSHOT_CHUNK_BUCKETS + 10
    assert not asm.in_progress


def test_overlong_constructed_chunk_cannot_complete() -> None:
    fmt = FilterFormat(1, 16)
    header = decode(fmt, encode_snapshot_chunks(fmt, 0, 5, np.zeros(16, np.uint64))[0]).header
    asm = SnapshotAssembly(fmt)
    with raises_variant(Cbi1Error, "IncompleteCoverage"):
        asm.absorb(SnapshotChunk(header, 0, 1, 0, np.ones(20, np.uint64)))

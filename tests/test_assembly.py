"""SnapshotAssembly beyond the golden cases: any lane survives chunking, any disorder is caught."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash
from errorcheck import raises_variant
from hypothesis import given, settings, strategies as st

from cbi1kit.errors import Cbi1Error
from cbi1kit.wire._assembly import AssembledSnapshot, SnapshotAssembly
from cbi1kit.wire._codec import decode
from cbi1kit.wire._encode import encode_delta, encode_snapshot_chunks
from cbi1kit.wire._format import SNAPSHOT_CHUNK_BUCKETS, FilterFormat
from cbi1kit.wire._frames import Delta, FrameHeader, SnapshotChunk

FMT = FilterFormat(seed=0xC0FFEE, bucket_count=1 << 21)  # four chunks


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
    fmt = FilterFormat(seed=1, bucket_count=1 << 20)
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
    fmt = FilterFormat(seed=1, bucket_count=16)
    header = decode(fmt, encode_snapshot_chunks(fmt, 0, 5, np.zeros(16, np.uint64))[0]).header
    asm = SnapshotAssembly(fmt)
    with raises_variant(Cbi1Error, "IncompleteCoverage"):
        asm.absorb(SnapshotChunk(header, 0, 1, 0, np.ones(20, np.uint64)))


# ---------------------------------------------------------------------------------------------
# The one-pass path (a frame's bytes: checksum verified as the words are copied into the lane)
# against the two-step path (decode, then absorb the decoded chunk) and against the lane as the
# decoded chunks' words laid end to end (what the assembly returned before it wrote one lane).

VECTORS = Path(__file__).parent / "vectors" / "cbi1"
CASES = json.loads((VECTORS / "manifest.json").read_text())["cases"]


def _vector(rel: str) -> bytes:
    data = (VECTORS / rel).read_bytes()
    return gzip.decompress(data) if rel.endswith(".gz") else data


def _case_format(spec: dict[str, Any]) -> FilterFormat:
    seed, buckets = int(spec["seed"]), int(spec["bucket_count"])
    if spec.get("constructed_via", "FilterFormat::new") == "FilterFormat::new":
        return FilterFormat(seed=seed, bucket_count=buckets)
    return FilterFormat.unchecked(seed=seed, bucket_count=buckets)


def _outcome(asm: SnapshotAssembly, step: Any) -> tuple[Any, ...]:
    """What one absorb did: its result or error, and the assembly's state after it."""
    try:
        got = step()
    except Cbi1Error as exc:
        result: tuple[Any, ...] = (
            "error",
            exc.variant,
            exc.subvariant,
            exc.field,
            exc.offset,
            str(exc),
        )
    else:
        if got is None:
            result = ("none",)
        else:
            assert isinstance(got, AssembledSnapshot)
            assert got.words.flags.c_contiguous and got.words.shape == (got.bucket_count,)
            result = (
                "done",
                got.epoch,
                got.words.tobytes(),
                [(o, w.tobytes()) for o, w in got.parts],
                got.image_count,
                got.images.tobytes(),
            )
    state = (asm.in_progress, asm.epoch, asm.chunk_count, asm.next_chunk, asm.next_bucket)
    return (*result, state)


def _both(fmt: FilterFormat, frames: list[bytes | SnapshotChunk | Delta]) -> None:
    """Feed the same frames to the two paths; every step's outcome and state must agree."""
    two, one = SnapshotAssembly(fmt), SnapshotAssembly(fmt)
    for f in frames:
        if isinstance(f, (SnapshotChunk, Delta)):
            a = _outcome(two, lambda f=f: two.absorb(f))
            b = _outcome(one, lambda f=f: one.absorb(f))
        else:
            try:
                decoded = decode(fmt, f)
            except Cbi1Error as exc:  # decode refused it: the assembly never saw it
                a = (
                    "error",
                    exc.variant,
                    exc.subvariant,
                    exc.field,
                    exc.offset,
                    str(exc),
                    (two.in_progress, two.epoch, two.chunk_count, two.next_chunk, two.next_bucket),
                )
            else:
                a = _outcome(two, lambda d=decoded: two.absorb(d))
            b = _outcome(one, lambda f=f: one.absorb(f))
        assert a == b


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c["id"]) for c in CASES if c["kind"] == "assembly"]
)
def test_bytes_path_matches_two_step_path_on_golden_assembly_cases(case: dict[str, Any]) -> None:
    fmt = _case_format(case["assembly_format"])
    if _case_format(case["decode_format"]) != fmt:
        pytest.skip("decoded against another format than the assembly's")
    frames: list[bytes | SnapshotChunk | Delta] = []
    for step in case["steps"]:
        if step["action"] == "reset":
            _both(fmt, frames)  # up to here, then a fresh pair: reset is the same call
            frames = []
        elif step["action"] == "absorb_constructed_frame":
            h, s = step["frame"]["header"], step["frame"]
            count, value = (int(x) for x in s["words"].split(" copies of "))
            header = FrameHeader(
                seed=int(h["seed"]),
                bucket_count=int(h["bucket_count"]),
                dc_id=0,
                epoch=int(h["epoch"]),
            )
            words = np.full(count, value, dtype=np.uint64)
            frames.append(
                SnapshotChunk(
                    header, s["chunk_index"], s["chunk_count"], int(s["bucket_offset"]), words
                )
            )
        else:
            frames.append(_vector(step["file"]))
    _both(fmt, frames)


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in CASES if "file" in c])
def test_bytes_path_matches_two_step_path_on_every_golden_frame(case: dict[str, Any]) -> None:
    """Every golden frame (valid or not) absorbed alone, and after chunk 0 of a snapshot in
    progress: the same result or error, in the same order, as decode then absorb."""
    spec = case.get("expected_format") or case.get("decode_format")
    if spec is None:
        pytest.skip("a bare body (upstream's private body decoder), not a frame")
    fmt = _case_format(spec)
    data = _vector(case["file"])
    _both(fmt, [data])
    if fmt.bucket_count <= 1 << 22:
        lane = np.arange(fmt.bucket_count, dtype=np.uint64)
        first = encode_snapshot_chunks(fmt, 0, 12345, lane)[0]
        _both(fmt, [first, data])


def _chunk_frames(fmt: FilterFormat, epoch: int, lane: np.ndarray, sizes: list[int]) -> list[bytes]:
    header = FrameHeader(seed=fmt.seed, bucket_count=fmt.bucket_count, dc_id=3, epoch=epoch)
    out, at = [], 0
    for i, n in enumerate(sizes):
        out.append(SnapshotChunk(header, i, len(sizes), at, lane[at : at + n]).serialize())
        at += n
    return out


SMALL = FilterFormat(seed=0xABCDEF, bucket_count=64)


@st.composite
def _streams(draw: st.DrawFn) -> list[bytes]:
    """Chunks of two snapshots (uneven sizes), deltas, corrupt and foreign frames, in any
    order: mostly in order, so that snapshots also complete."""
    lanes = [
        np.array(draw(st.lists(st.integers(0, 2**64 - 1), min_size=64, max_size=64)), np.uint64)
        for _ in range(2)
    ]
    pool: list[bytes] = []
    for epoch, lane in zip((7, 8), lanes, strict=True):
        cuts = sorted(draw(st.sets(st.integers(1, 63), max_size=4)))
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, 64], strict=True)]
        pool += _chunk_frames(SMALL, epoch, lane, sizes)
    pool.append(encode_delta(SMALL, 3, 8, 9, [(1, 2)]))
    pool.append(
        encode_snapshot_chunks(FilterFormat(seed=1, bucket_count=64), 3, 7, lanes[0])[0]
    )  # other seed
    pool.append(_chunk_frames(SMALL, 7, lanes[0], [64])[0])  # a whole lane in one chunk
    ops = draw(
        st.lists(
            st.tuples(st.integers(0, len(pool) - 1), st.integers(0, 4), st.integers(0, 10**6)),
            max_size=20,
        )
    )
    out: list[bytes] = []
    for i, mode, where in ops:
        frame = bytearray(pool[i])
        if mode == 1:  # one byte changed anywhere: header, prefix or words
            frame[where % len(frame)] ^= 1 + where % 255
        elif mode == 2:  # truncated
            del frame[where % len(frame) :]
        out.append(bytes(frame))
    return out


@settings(max_examples=300, deadline=None)
@given(_streams(), st.sampled_from([8, 20, 1 << 18]))
def test_bytes_path_matches_two_step_path_on_any_stream(frames: list[bytes], block: int) -> None:
    """``block``: the one-pass path's copy block, in bytes (small ones split every chunk)."""
    import cbi1kit.wire._assembly as assembly

    saved = assembly.COPY_BLOCK
    assembly.COPY_BLOCK = block
    try:
        _both(SMALL, list(frames))
    finally:
        assembly.COPY_BLOCK = saved


@settings(max_examples=100, deadline=None)
@given(
    lane=st.lists(st.integers(0, 2**64 - 1), min_size=64, max_size=64),
    cuts=st.sets(st.integers(1, 63), max_size=6),
)
def test_lane_is_the_chunks_words_end_to_end(lane: list[int], cuts: set[int]) -> None:
    """The assembled lane equals the decoded chunks' words concatenated (the chunk-view
    assembly's ``words``), whichever path, and ``parts`` are those chunks."""
    words = np.array(lane, dtype=np.uint64)
    bounds = sorted(cuts)
    sizes = [b - a for a, b in zip([0, *bounds], [*bounds, 64], strict=True)]
    frames = _chunk_frames(SMALL, 5, words, sizes)
    decoded = [decode(SMALL, f) for f in frames]
    expected = np.concatenate([d.words for d in decoded])  # type: ignore[union-attr]
    for feed in (frames, decoded):
        asm = SnapshotAssembly(SMALL)
        done = None
        for f in feed:
            done = asm.absorb(f)
        assert done is not None
        assert np.array_equal(done.words, expected)
        assert [(o, w.tolist()) for o, w in done.parts] == [
            (d.bucket_offset, d.words.tolist())  # type: ignore[union-attr]
            for d in decoded
        ]


def test_into_assembles_in_the_consumers_lane(chunks) -> None:  # type: ignore[no-untyped-def]
    lane, frames = chunks
    raw = list(encode_snapshot_chunks(FMT, 1, 99, lane))
    mine = np.zeros(FMT.bucket_count, dtype=np.uint64)
    asm = SnapshotAssembly(FMT, into=mine)
    for feed in (raw, frames, raw):  # bytes, decoded, bytes again: the same array each time
        mine[:] = 0
        done = None
        for f in feed:
            done = asm.absorb(f)
        assert done is not None and done.words is mine
        assert np.array_equal(mine, lane)
        done.copy_into(mine)  # already there: nothing to do
        assert np.array_equal(mine, lane)
    with pytest.raises(ValueError, match="uint64"):
        SnapshotAssembly(FMT, into=np.zeros(10, np.uint64))
    with pytest.raises(ValueError, match="uint64"):
        SnapshotAssembly(FMT, into=np.zeros(FMT.bucket_count, np.int64))


def test_each_snapshot_gets_its_own_lane(chunks) -> None:  # type: ignore[no-untyped-def]
    lane, _ = chunks
    raw = list(encode_snapshot_chunks(FMT, 1, 99, lane))
    asm = SnapshotAssembly(FMT)
    first = second = None
    for f in raw:
        first = asm.absorb(f)
    for f in raw:
        second = asm.absorb(f)
    assert first is not None and second is not None
    assert not np.shares_memory(first.words, second.words)
    assert np.array_equal(first.words, lane) and np.array_equal(second.words, lane)


def test_corrupt_chunk_keeps_the_snapshot_in_progress(chunks) -> None:  # type: ignore[no-untyped-def]
    """A chunk whose checksum fails in the one-pass path leaves what was assembled intact,
    including when it is a chunk 0 restarting a snapshot in progress."""
    lane, _ = chunks
    raw = list(encode_snapshot_chunks(FMT, 1, 99, lane))
    asm = SnapshotAssembly(FMT)
    asm.absorb(raw[0])
    asm.absorb(raw[1])
    for bad_index in (2, 0):
        bad = bytearray(raw[bad_index])
        bad[-1] ^= 0xFF
        with raises_variant(Cbi1Error, "Checksum"):
            asm.absorb(bytes(bad))
        assert asm.next_chunk == 2
    asm.absorb(raw[2])
    done = asm.absorb(raw[3])
    assert done is not None and np.array_equal(done.words, lane)


def test_memory_is_the_lane_and_one_chunk(chunks) -> None:  # type: ignore[no-untyped-def]
    """Assembling from bytes allocates the lane and nothing per chunk (chunks arrive one at a
    time in one reused buffer, as a stream delivers them)."""
    lane, _ = chunks
    raw = list(encode_snapshot_chunks(FMT, 1, 99, lane))
    buf = memoryview(bytearray(len(raw[0])))
    asm = SnapshotAssembly(FMT)
    for f in raw:  # once untraced: the kernel compiled or loaded (code, not the lane's memory)
        asm.absorb(f)
    tracemalloc.start()
    try:
        done = None
        for f in raw:
            buf[: len(f)] = f  # (a bytearray's own slice assignment would copy f first)
            done = asm.absorb(buf[: len(f)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert done is not None and np.array_equal(done.words, lane)
    assert peak <= lane.nbytes + (64 << 10), peak


def test_in_order_chunk_bytes_take_the_one_pass_path(chunks, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Chunks that pass every check never go through ``decode`` (which hashes the body in a
    pass of its own): the words are hashed as they are copied."""
    import cbi1kit.wire._assembly as assembly

    lane, _ = chunks
    raw = list(encode_snapshot_chunks(FMT, 1, 99, lane))

    def refuse(*_: object) -> None:
        raise AssertionError("decode called")

    monkeypatch.setattr(assembly, "decode", refuse)
    asm = SnapshotAssembly(FMT)
    done = None
    for f in raw:
        done = asm.absorb(f)
    assert done is not None and np.array_equal(done.words, lane)


# ---------------------------------------------------------------------------------------------
# The kernel (numba, stores past the cache, into lanes of STREAM_LANE_BYTES or more) against its
# Python reference, bit for bit: the digest and every byte of the destination and around it.


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(0, 3 * (1 << 13) + 40),
    shift=st.integers(0, 31),
    seed=st.integers(0, 2**32 - 1),
    form=st.sampled_from([bytes, bytearray]),
)
def test_kernel_matches_its_python_reference_bit_for_bit(
    size: int, shift: int, seed: int, form: type
) -> None:
    """Any length past the 64-byte head (several kernel steps, odd tails), any alignment of
    the destination (its unaligned ends are copied byte by byte)."""
    import cbi1kit.wire._assembly as assembly

    kernel = assembly._kernel()
    assert kernel is not None
    data = np.random.default_rng(seed).integers(0, 256, 64 + size, dtype=np.uint8).tobytes()
    view = memoryview(form(data))
    out = [np.zeros(size + 64, np.uint8) for _ in range(2)]
    frame = np.frombuffer(view, np.uint8)
    frame.flags.writeable = False
    state = np.empty(assembly._STATE_BYTES + 64, np.uint8)
    got = kernel(frame, 48, 64, out[0][shift : shift + size], state)
    want = assembly._hash_copy_reference(view, 64, out[1][shift : shift + size].data)
    assert got == want == xxhash.xxh3_64_intdigest(data[48:])
    assert out[0].tobytes() == out[1].tobytes() == bytes(shift) + data[64:] + bytes(64 - shift)


@settings(max_examples=150, deadline=None)
@given(_streams())
def test_kernel_path_matches_two_step_path_on_any_stream(frames: list[bytes]) -> None:
    """The streams above with every lane taken by the kernel, small ones included."""
    import cbi1kit.wire._assembly as assembly

    saved = assembly.STREAM_LANE_BYTES
    assembly.STREAM_LANE_BYTES = 0
    try:
        _both(SMALL, list(frames))
    finally:
        assembly.STREAM_LANE_BYTES = saved


def test_a_large_lane_is_filled_by_the_kernel(chunks, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """From ``STREAM_LANE_BYTES`` up the kernel fills the lane; below it, the Python path."""
    import cbi1kit.wire._assembly as assembly

    lane, _ = chunks
    raw = list(encode_snapshot_chunks(FMT, 1, 99, lane))
    calls: list[str] = []
    reference = assembly._hash_copy_reference
    monkeypatch.setattr(
        assembly, "_hash_copy_reference", lambda *a: calls.append("python") or reference(*a)
    )
    for limit, path in ((FMT.bucket_count * 8, None), (FMT.bucket_count * 8 + 1, "python")):
        monkeypatch.setattr(assembly, "STREAM_LANE_BYTES", limit)
        calls.clear()
        asm = SnapshotAssembly(FMT)
        done = None
        for f in raw:
            done = asm.absorb(f)
        assert done is not None and np.array_equal(done.words, lane)
        assert calls == ([] if path is None else ["python"] * len(raw))

"""Compiled kernels behind the fast replay engine: a span's clean steps taken in one pass.

:func:`replay_rows` walks each message of a span, checks it against its lane's state and takes each
clean step (a delta applied, its images kept where a table wants them; a heartbeat at the installed
sequence; a message skipped while waiting for a snapshot). It stops at anything else, for the
per-message engine (the reference) to take and name: every condition here is one a valid message
meets, and being stricter only sends more there. :func:`delta_images` reads deltas back for the lazy
history. Offsets come from :mod:`cbi1kit.wire._layout`. See docs/replay.md.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt

from cbi1kit._compile import le_u32, le_u64
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._kernels import (
    HAS_PRODUCER,
    HAS_RELAY,
    MALFORMED,
    REPEATED,
    UNKNOWN_FIELDS,
    W_BASE,
    W_FLAGS,
    W_HAS,
    W_KIND,
    W_MARKER,
    W_PAYLOAD_AT,
    W_PAYLOAD_LEN,
    W_PRODUCER_AT,
    W_PRODUCER_LEN,
    W_RELAY_AT,
    W_RELAY_LEN,
    W_SEQ,
    W_VERSION,
    _body_check,
    _inline,
    _kernel,
    _same_bytes,
    walk_update,
)
from cbi1kit.relay._messages import RELAY_CONTRACT_MARKER, RELAY_PROTOCOL_VERSION
from cbi1kit.wire._format import (
    FINGERPRINT_BITS,
    FORMAT_VERSION,
    IMAGES_MAX_FRAME_BYTES,
    MAGIC,
    SLOTS_PER_BUCKET,
    U64_MAX,
    WIRE_VERSION,
    FrameKind,
    max_delta_images,
)
from cbi1kit.wire._layout import DELTA_IMAGE, DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX
from cbi1kit.wire._rules import RULES

_KIND_CHUNK: Final = np.uint64(pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK)
_KIND_DELTA: Final = np.uint64(pb.FILTER_UPDATE_KIND_DELTA)
_KIND_HEARTBEAT: Final = np.uint64(pb.FILTER_UPDATE_KIND_HEARTBEAT)
# values as uint64: numba compares a uint64 with a signed integer as floats
_MARKER: Final = np.uint64(RELAY_CONTRACT_MARKER)
_PROTOCOL: Final = np.uint64(RELAY_PROTOCOL_VERSION)
_WIRE: Final = np.uint64(WIRE_VERSION)
_FORMAT_VERSION: Final = np.uint64(FORMAT_VERSION)
_FP: Final = np.uint64(FINGERPRINT_BITS)
_SLOTS_VALUE: Final = np.uint64(SLOTS_PER_BUCKET)
_DELTA_FLAGS: Final = np.uint64(FrameKind.DELTA)
_MAGIC_VALUE: Final = np.uint64(int.from_bytes(MAGIC, "little"))
_MAX_IMAGES: Final = np.uint64(max_delta_images())
_U64_MAX: Final = np.uint64(U64_MAX)
_UNCLEAN: Final = MALFORMED | REPEATED | UNKNOWN_FIELDS


def _at(layout: Any, name: str) -> tuple[np.int64, np.int64]:
    """A field's (offset, width) as numpy scalars: numba types them ``int64``, not as
    literals, so ``_le`` compiles once, not once a field (2 s of a first run); LLVM still
    folds the width's branch where it inlines ``_le`` into a caller."""
    spec = layout.field(name)
    return np.int64(spec.offset), np.int64(spec.size)


# (offset, width) of each field the checks read, from the layout
_WIRE_VERSION_AT: Final = _at(HEADER, "wire_version")
_FLAGS_AT: Final = _at(HEADER, "flags")
_FP_AT: Final = _at(HEADER, "fingerprint_bits")
_SLOTS_AT: Final = _at(HEADER, "slots_per_bucket")
_FORMAT_AT: Final = _at(HEADER, "format_version")
_MAGIC_AT: Final = _at(HEADER, "magic")
_SEED_AT: Final = _at(HEADER, "seed")
_BUCKETS_AT: Final = _at(HEADER, "bucket_count")
_DC_AT: Final = _at(HEADER, "dc_id")
_EPOCH_AT: Final = _at(HEADER, "epoch")
_CHECKSUM_AT: Final = _at(HEADER, "body_checksum")
_BASE_EPOCH_AT: Final = _at(DELTA_PREFIX, "base_epoch")
_COUNT_AT: Final = _at(DELTA_PREFIX, "image_count")
_CHUNK_INDEX_AT: Final = _at(SNAPSHOT_PREFIX, "chunk_index")
#: a delta's images start where its body prefix ends; each is bucket then word
IMAGES_AT: Final = DELTA_PREFIX.end
IMAGE_SIZE: Final = DELTA_IMAGE.size
_BUCKET_AT: Final = _at(DELTA_IMAGE, "bucket")
_WORD_AT: Final = _at(DELTA_IMAGE, "word")

#: How the kernel keeps each rule of the rulebook (each ``Rule.replay``): the condition every
#: message it takes meets; a message that might break the rule is the per-message engine's.
RULE_CHECKS: Final[dict[str, str]] = {rule.id: rule.replay for rule in RULES}

#: ``replay_rows`` outcomes, per row
APPLIED: Final = 1
HEARTBEAT: Final = 2
SKIPPED: Final = 3
#: lane modes: a ready session (deltas and heartbeats), or waiting for a snapshot (skips)
MODE_READY: Final = 1
MODE_RECOVERING: Final = 2


@_inline
def _le(b: Any, p: Any, at: Any) -> Any:
    """The little-endian field ``at = (offset, width)`` of the struct at ``b[p:]`` (one load:
    ``at`` is a constant, so the width's branch is chosen at compile time)."""
    j = p + at[0]
    if at[1] == 8:
        return le_u64(b, j)
    if at[1] == 4:
        return le_u32(b, j)
    if at[1] == 2:
        return np.uint64(b[j]) | np.uint64(b[j + 1]) << np.uint64(8)
    return np.uint64(b[j])


@_inline
def _clean_delta(b: Any, pp: Any, plen: Any, base: Any, seq: Any) -> Any:
    """Every per-message rule of a delta payload that needs no session: its image count."""
    if not (
        base != _U64_MAX
        and seq == base + np.uint64(1)
        and plen >= IMAGES_AT
        and plen <= IMAGES_MAX_FRAME_BYTES
        and _le(b, pp, _MAGIC_AT) == _MAGIC_VALUE
        and _le(b, pp, _WIRE_VERSION_AT) == _WIRE
        and _body_check(b, pp, plen) == _le(b, pp, _CHECKSUM_AT)
        and _le(b, pp, _FORMAT_AT) == _FORMAT_VERSION
        and _le(b, pp, _FP_AT) == _FP
        and _le(b, pp, _SLOTS_AT) == _SLOTS_VALUE
        and _le(b, pp, _FLAGS_AT) == _DELTA_FLAGS
        and _le(b, pp, _EPOCH_AT) == seq
        and _le(b, pp, _BASE_EPOCH_AT) == base
    ):
        return -1
    count = _le(b, pp, _COUNT_AT)
    if count < np.uint64(1) or count > _MAX_IMAGES:
        return -1
    if plen != IMAGES_AT + IMAGE_SIZE * np.int64(count):
        return -1
    return np.int64(count)


#: the duplicate check's table: open addressing, 2**20 slots (twice the most images a delta
#: may carry); a delta of n images uses the first few times n of them, which stay in cache
SLOTS: Final = 1 << 20
_GOLDEN: Final = np.uint64(0x9E3779B1)


@_inline
def _fits(b: Any, at: Any, count: Any, buckets: Any, slots: Any, stamp: Any) -> Any:
    """Whether the ``count`` images at ``b[at:]`` name ``count`` different buckets below
    ``buckets``: each goes into a small open-addressing table (``slots``: keys, then the
    stamp of the delta that set each slot; ``stamp`` is used for one delta only)."""
    size = np.uint64(16)
    while size < np.uint64(2 * count):
        size <<= np.uint64(1)
    mask = size - np.uint64(1)
    for k in range(count):
        bucket = _le(b, at + IMAGE_SIZE * k, _BUCKET_AT)
        if bucket >= buckets:
            return False
        h = (bucket * _GOLDEN) & mask
        while slots[1, h] == stamp:
            if slots[0, h] == bucket:
                return False
            h = (h + np.uint64(1)) & mask
        slots[0, h] = bucket
        slots[1, h] = stamp
    return True


@_inline
def _clean_envelope(b: Any, w: Any, s: Any, expect: Any) -> Any:
    """Whether the envelope the walk read (``w``) is clean (well formed, every field known and
    given once, producer and relay present, the contract's marker and version) and from lane
    ``s``'s session: its producer's and relay's bytes (``expect``)."""
    if w[W_FLAGS] & _UNCLEAN or (w[W_HAS] & (HAS_PRODUCER | HAS_RELAY)) != HAS_PRODUCER | HAS_RELAY:
        return False
    if w[W_MARKER] != _MARKER or w[W_VERSION] != _PROTOCOL:
        return False
    pool, at = expect
    return _same_bytes(
        b, w[W_PRODUCER_AT], w[W_PRODUCER_LEN], pool, at[0, s], at[1, s]
    ) and _same_bytes(b, w[W_RELAY_AT], w[W_RELAY_LEN], pool, at[2, s], at[3, s])


@_inline
def _step(b: Any, w: Any, m: Any, s: Any, st: Any, expect: Any) -> Any:
    """What lane state ``st[:, s]`` (mode ``m``) makes of the message the walk read (``w``):
    the image count of a delta it applies, or -(the outcome) of a heartbeat or skip, or 0: not
    a clean step (the per-message engine's)."""
    if not _clean_envelope(b, w, s, expect):
        return 0
    kind, base, seq = w[W_KIND], w[W_BASE], w[W_SEQ]
    pp, plen = w[W_PAYLOAD_AT], w[W_PAYLOAD_LEN]
    if kind == _KIND_HEARTBEAT:
        if base != seq or plen != 0:
            return 0
        if m == MODE_RECOVERING:
            return -SKIPPED
        return -HEARTBEAT if seq == st[1, s] else 0
    if kind == _KIND_CHUNK:
        ok = base == seq and plen >= _CHUNK_INDEX_AT[0] + _CHUNK_INDEX_AT[1]
        if m == MODE_RECOVERING and ok and _le(b, pp, _CHUNK_INDEX_AT) != 0:
            return -SKIPPED
        return 0
    if kind != _KIND_DELTA:
        return 0
    if m == MODE_RECOVERING:
        return -SKIPPED  # a lane waiting for a snapshot skips any delta
    count = _clean_delta(b, pp, plen, base, seq)
    if count < 0 or not st[5, s] or base != st[1, s]:
        return 0
    if (
        _le(b, pp, _SEED_AT) != st[2, s]
        or _le(b, pp, _BUCKETS_AT) != st[3, s]
        or _le(b, pp, _DC_AT) != st[4, s]
    ):
        return 0
    return count


@_kernel
def replay_rows(
    b: npt.NDArray[np.uint8],
    start: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    is_pb: npt.NDArray[np.bool_],
    lo: int,
    hi: int,
    row_slot: npt.NDArray[np.int64],
    state: npt.NDArray[np.uint64],
    expect: tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]],
    lanes: Any,
    slots: npt.NDArray[np.uint32],
    stamp: npt.NDArray[np.uint32],
    out: tuple[npt.NDArray[Any], ...],
    images: tuple[npt.NDArray[Any], ...],
) -> int:
    """Rows ``lo`` onwards of a span, in order, each against its lane (``row_slot``; ``state``:
    mode, installed sequence, seed, bucket count, DC, deltas allowed; ``expect``: its session's
    producer and relay bytes, ``(pool, (4, lanes) offsets and lengths)``; ``lanes[slot]``: words).
    Deltas go into the lane and, while ``images`` = (buckets, new, previous words, count) has room,
    there; ``slots`` (``(2, SLOTS)``) and ``stamp[0]`` find a bucket named twice in a delta. Returns
    the first row not taken; ``out`` = (outcome, sequence, base sequence, image count) per row."""
    kinds, seqs, bases, counts = out
    ib, inew, iprev, icount = images
    keep = len(ib) > 0
    for r in range(lo, hi):
        s = row_slot[r]
        m = state[0, s]
        if not is_pb[r] or (m != MODE_READY and m != MODE_RECOVERING):  # noqa: PLR1714
            return r
        w = walk_update(b, start[r], start[r] + length[r])
        got = _step(b, w, m, s, state, expect)
        if got == 0:
            return r
        if got < 0:
            kinds[r] = -got
        else:
            stamp[0] += np.uint32(1)
            at = w[W_PAYLOAD_AT] + IMAGES_AT
            if not _fits(b, at, got, state[3, s], slots, stamp[0]):
                return r
            if keep and icount[0] + got > len(ib):
                return r  # no room for its images: the caller makes some and goes on
            lane = lanes[s]
            for k in range(got):
                q = at + IMAGE_SIZE * k
                bucket = _le(b, q, _BUCKET_AT)
                word = _le(b, q, _WORD_AT)
                if keep:
                    j = icount[0]
                    ib[j], inew[j], iprev[j] = bucket, word, lane[bucket]
                    icount[0] = j + 1
                lane[bucket] = word
            state[1, s] = w[W_SEQ]
            kinds[r], counts[r] = APPLIED, got
        seqs[r], bases[r] = w[W_SEQ], w[W_BASE]
    return hi


@_kernel
def delta_images(
    b: npt.NDArray[np.uint8],
    start: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    buckets: npt.NDArray[np.uint32],
    words: npt.NDArray[np.uint64],
) -> npt.NDArray[np.int64]:
    """The images of the delta messages ``b[start : start + length]`` (replay took them, so
    each is whole) into ``buckets`` and ``words``, back to back; each message's image count."""
    counts = np.zeros(len(start), dtype=np.int64)
    j = 0
    for r in range(len(start)):
        w = walk_update(b, start[r], start[r] + length[r])
        at = w[W_PAYLOAD_AT] + IMAGES_AT
        count = np.int64(_le(b, w[W_PAYLOAD_AT], _COUNT_AT))
        for k in range(count):
            q = at + IMAGE_SIZE * k
            buckets[j] = _le(b, q, _BUCKET_AT)
            words[j] = _le(b, q, _WORD_AT)
            j += 1
        counts[r] = count
    return counts

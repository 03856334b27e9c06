"""Compiled kernels behind the fast replay engine: runs of deltas, heartbeats and skipped
messages checked and applied without a Python call per message.

The fast engine (:mod:`cbi1kit.analysis._fast`) hands these kernels the frames table's envelope
scan of a batch (:func:`cbi1kit.analysis._kernels.scan_filter_updates`: every ``FilterUpdate``
field, the CBI1 body checksum, the payload's first 64 bytes, a delta's largest bucket) and the
state of each lane in play. Three passes:

* :func:`replay_candidates`, once per batch: which messages could be applied, heartbeat or
  skipped by the per-message rules alone (those of the rulebook that need no stream state);
* :func:`advance_rows`, per run: from a row on, in order, each candidate checked against its
  lane's state (producer and relay bytes of the session, format, DC, the installed sequence, no
  bucket twice in a delta); it stops at the first row that is no clean step, which the
  per-message engine then takes (a violation, a snapshot, anything unusual);
* :func:`apply_deltas`, per lane: the accepted deltas' images written into the lane in order
  (the last write of a bucket wins), with the images and the words they replaced when asked.

Being stricter than the rules only sends more messages to the per-message engine, so every
condition here is a conjunction a valid message meets; the per-message engine is the reference
and names the violation. Every offset and constant is read from the one layout
(:mod:`cbi1kit.wire._layout`), the format constants (:mod:`cbi1kit.wire._format`), the relay
contract (:mod:`cbi1kit.relay._messages`) and the generated protobuf module; the disk cache is
keyed on each of those files (:data:`cbi1kit.analysis._cache.INLINED_SOURCES`).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._kernels import (
    FIELD_SLOTS,
    MALFORMED,
    REPEATED,
    UNKNOWN_FIELDS,
    _inline,
    _kernel,
    _u64,
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

__all__ = [
    "APPLIED",
    "COUNT_FIELD",
    "DELTA_OK",
    "HEARTBEAT",
    "HEARTBEAT_OK",
    "HISTORY_ROW",
    "IMAGES_AT",
    "IMAGE_SIZE",
    "MODE_READY",
    "MODE_RECOVERING",
    "RULE_CHECKS",
    "SKIPPED",
    "SKIP_OK",
    "SLOT_BASE",
    "SLOT_PAYLOAD",
    "SLOT_PRODUCER",
    "SLOT_RELAY",
    "SLOT_SEQUENCE",
    "advance_rows",
    "apply_deltas",
    "replay_candidates",
]

# ----------------------------------------------------------------------------- where things are

_F = pb.FilterUpdate
_SLOT_VERSION: Final = FIELD_SLOTS[_F.PROTOCOL_VERSION_FIELD_NUMBER]
SLOT_RELAY: Final = FIELD_SLOTS[_F.RELAY_FIELD_NUMBER]
SLOT_PRODUCER: Final = FIELD_SLOTS[_F.PRODUCER_FIELD_NUMBER]
SLOT_BASE: Final = FIELD_SLOTS[_F.BASE_SEQUENCE_FIELD_NUMBER]
SLOT_SEQUENCE: Final = FIELD_SLOTS[_F.SEQUENCE_FIELD_NUMBER]
_SLOT_KIND: Final = FIELD_SLOTS[_F.KIND_FIELD_NUMBER]
SLOT_PAYLOAD: Final = FIELD_SLOTS[_F.PAYLOAD_FIELD_NUMBER]
_SLOT_MARKER: Final = FIELD_SLOTS[_F.CONTRACT_MARKER_FIELD_NUMBER]

# values as uint64: numba compares a uint64 with a signed integer as floats
_KIND_CHUNK: Final = np.uint64(pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK)
_KIND_DELTA: Final = np.uint64(pb.FILTER_UPDATE_KIND_DELTA)
_KIND_HEARTBEAT: Final = np.uint64(pb.FILTER_UPDATE_KIND_HEARTBEAT)
_MARKER: Final = np.uint64(RELAY_CONTRACT_MARKER)
_PROTOCOL: Final = np.uint64(RELAY_PROTOCOL_VERSION)
_WIRE: Final = np.uint64(WIRE_VERSION)
_FORMAT_VERSION: Final = np.uint64(FORMAT_VERSION)
_FP: Final = np.uint64(FINGERPRINT_BITS)
_SLOTS_VALUE: Final = np.uint64(SLOTS_PER_BUCKET)
_DELTA_FLAGS: Final = np.uint64(FrameKind.DELTA)

# (offset, width) of each field the rules read, from the layout
_MAGIC: Final = (HEADER.field("magic").offset, HEADER.field("magic").size)
_WIRE_VERSION: Final = (HEADER.field("wire_version").offset, HEADER.field("wire_version").size)
_FLAGS: Final = (HEADER.field("flags").offset, HEADER.field("flags").size)
_FP_BITS: Final = (HEADER.field("fingerprint_bits").offset, HEADER.field("fingerprint_bits").size)
_SLOTS: Final = (HEADER.field("slots_per_bucket").offset, HEADER.field("slots_per_bucket").size)
_FORMAT: Final = (HEADER.field("format_version").offset, HEADER.field("format_version").size)
_SEED: Final = (HEADER.field("seed").offset, HEADER.field("seed").size)
_BUCKETS: Final = (HEADER.field("bucket_count").offset, HEADER.field("bucket_count").size)
_DC: Final = (HEADER.field("dc_id").offset, HEADER.field("dc_id").size)
_EPOCH: Final = (HEADER.field("epoch").offset, HEADER.field("epoch").size)
_CHECKSUM: Final = (HEADER.field("body_checksum").offset, HEADER.field("body_checksum").size)
_BASE_EPOCH: Final = (
    DELTA_PREFIX.field("base_epoch").offset,
    DELTA_PREFIX.field("base_epoch").size,
)
COUNT_FIELD: Final = (
    DELTA_PREFIX.field("image_count").offset,
    DELTA_PREFIX.field("image_count").size,
)
_CHUNK_INDEX: Final = (
    SNAPSHOT_PREFIX.field("chunk_index").offset,
    SNAPSHOT_PREFIX.field("chunk_index").size,
)
#: a delta's images start where its body prefix ends; each is bucket then word
IMAGES_AT: Final = DELTA_PREFIX.end
IMAGE_SIZE: Final = DELTA_IMAGE.size
_IMAGE_BUCKET: Final = (DELTA_IMAGE.field("bucket").offset, DELTA_IMAGE.field("bucket").size)
_IMAGE_WORD: Final = (DELTA_IMAGE.field("word").offset, DELTA_IMAGE.field("word").size)

_MAGIC_VALUE: Final = np.uint64(int.from_bytes(MAGIC, "little"))
_MAX_IMAGES: Final = np.uint64(max_delta_images())
_U64_MAX: Final = np.uint64(U64_MAX)
_UNCLEAN: Final = np.uint8(MALFORMED | REPEATED | UNKNOWN_FIELDS)

# ------------------------------------------------------------------------- the rules it keeps

#: How the kernels keep each rule of the rulebook (:data:`cbi1kit.wire.RULES`, by id): the
#: condition every message they take meets, so that none of them breaks the rule; a message
#: that might is the per-message engine's, which reports it. ``tests/test_replay_fast.py``
#: holds this table to the rulebook (a new rule fails it until it is stated here) and breaks
#: each rule in a stream that both engines replay.
RULE_CHECKS: Final[dict[str, str]] = {
    "relay-protobuf-decode": "no malformed, repeated or unknown field in the scan; relay and "
    "producer bytes equal to ones that parsed (advance_rows)",
    "relay-contract-marker": "contract_marker == RELAY_CONTRACT_MARKER",
    "relay-protocol-version": "protocol_version == RELAY_PROTOCOL_VERSION",
    "relay-producer-present": "producer present",
    "relay-producer-identity": "producer bytes equal to the session's, or to ones that "
    "validated (advance_rows)",
    "relay-identity-present": "relay present",
    "relay-update-kind": "kind is DELTA or HEARTBEAT (a skipped chunk: SNAPSHOT_CHUNK)",
    "relay-base-equals-sequence": "a heartbeat or skipped chunk: base_sequence == sequence",
    "relay-payload": "a heartbeat: no payload bytes",
    "cbi1-truncated": "a delta: payload >= the header and delta prefix",
    "cbi1-frame-too-large": "a delta: payload <= IMAGES_MAX_FRAME_BYTES",
    "cbi1-legacy-ckf1": "a delta: magic == MAGIC",
    "cbi1-magic": "a delta: magic == MAGIC",
    "cbi1-wire-version": "a delta: wire_version == WIRE_VERSION",
    "cbi1-checksum": "a delta: the scan's body checksum == body_checksum",
    "cbi1-format-shape": "a delta: format_version, fingerprint_bits, slots_per_bucket are "
    "FORMAT_VERSION, FINGERPRINT_BITS, SLOTS_PER_BUCKET",
    "cbi1-format-mismatch": "a delta: seed and bucket_count are the session's (advance_rows)",
    "cbi1-flags": "a delta: flags == FrameKind.DELTA",
    "cbi1-delta-length": "a delta: 1 <= image_count <= max_delta_images(), payload == "
    "prefix + image_count images",
    "cbi1-delta-bucket-range": "a delta: its largest bucket < the session's bucket_count "
    "(advance_rows)",
    "cbi1-chunk-layout": "no snapshot chunk is applied (a skipped one is not decoded)",
    "cbi1-kind-mismatch": "a delta: flags == FrameKind.DELTA",
    "cbi1-dc-id": "a delta: dc_id is the session's (advance_rows)",
    "cbi1-epoch": "a delta: epoch == sequence",
    "cbi1-delta-base-epoch": "a delta: base_epoch == base_sequence",
    "relay-delta-contiguous": "a delta: base_sequence < 2**64 - 1, sequence == base_sequence + 1",
}

# ------------------------------------------------------------------------------------ verdicts

#: ``replay_candidates`` bits: what a message may be, by the rules that need no stream state
DELTA_OK: Final = 1
HEARTBEAT_OK: Final = 2
SKIP_OK: Final = 4
#: ``advance_rows`` outcomes, per row
APPLIED: Final = 1
HEARTBEAT: Final = 2
SKIPPED: Final = 3
#: lane modes: a ready session (deltas and heartbeats), or waiting for a snapshot (skips)
MODE_READY: Final = 1
MODE_RECOVERING: Final = 2


@_inline
def _le_at(b: Any, p: Any, at: Any) -> Any:
    """The little-endian field ``at = (offset, width)`` of the struct at ``b[p:]`` (an unsigned
    index: LLVM merges the byte loads into one, as in ``_kernels._u64``)."""
    j = np.uint64(p) + np.uint64(at[0])
    v = np.uint64(0)
    for k in range(at[1]):
        v |= np.uint64(b[j + np.uint64(k)]) << np.uint64(8 * k)
    return v


@_inline
def _le(row: Any, at: Any) -> Any:
    """The little-endian field ``at`` of ``row`` (a payload's head, a uint8 array)."""
    return _le_at(row, 0, at)


@_kernel
def replay_candidates(
    value: npt.NDArray[np.uint64],
    present: npt.NDArray[np.bool_],
    flags: npt.NDArray[np.uint8],
    checksum: npt.NDArray[np.uint64],
    head: npt.NDArray[np.uint8],
) -> npt.NDArray[np.uint8]:
    """Per row of a scanned batch, the bits of what it may be by its own bytes:

    ``DELTA_OK``: a well-formed delta message whose every per-message rule holds, but for those
    against the session (seed, bucket count and DC of its producer, its bucket range, the
    installed sequence) and the ingestor's (no bucket twice); ``HEARTBEAT_OK``: a heartbeat
    (``base_sequence == sequence``, no payload); ``SKIP_OK``: what a lane waiting for a
    snapshot skips (a valid envelope, and no snapshot chunk 0). Clean protobuf only: a field
    given twice, an unknown field or damage is left to protobuf.
    """
    n = len(flags)
    out = np.zeros(n, dtype=np.uint8)
    for i in range(n):
        if flags[i] & _UNCLEAN:
            continue
        if not (present[i, SLOT_PRODUCER] and present[i, SLOT_RELAY]):
            continue
        if value[i, _SLOT_MARKER] != _MARKER:
            continue
        if value[i, _SLOT_VERSION] != _PROTOCOL:
            continue
        kind = value[i, _SLOT_KIND]
        base, seq = value[i, SLOT_BASE], value[i, SLOT_SEQUENCE]
        plen = np.int64(value[i, SLOT_PAYLOAD])
        h = head[i]
        if kind == _KIND_HEARTBEAT:
            if base == seq and plen == 0:
                out[i] = HEARTBEAT_OK | SKIP_OK
            continue
        if kind == _KIND_CHUNK:
            if base == seq and plen >= _CHUNK_INDEX[0] + _CHUNK_INDEX[1] and _le(h, _CHUNK_INDEX):
                out[i] = SKIP_OK
            continue
        if kind != _KIND_DELTA:
            continue
        out[i] = SKIP_OK  # a lane waiting for a snapshot skips any delta
        count = _le(h, COUNT_FIELD)
        if (
            base != _U64_MAX
            and seq == base + np.uint64(1)
            and plen >= IMAGES_AT
            and plen <= IMAGES_MAX_FRAME_BYTES
            and _le(h, _MAGIC) == _MAGIC_VALUE
            and _le(h, _WIRE_VERSION) == _WIRE
            and checksum[i] == _le(h, _CHECKSUM)
            and _le(h, _FORMAT) == _FORMAT_VERSION
            and _le(h, _FP_BITS) == _FP
            and _le(h, _SLOTS) == _SLOTS_VALUE
            and _le(h, _FLAGS) == _DELTA_FLAGS
            and count >= np.uint64(1)
            and count <= _MAX_IMAGES
            and plen == IMAGES_AT + IMAGE_SIZE * np.int64(count)
            and _le(h, _EPOCH) == seq
            and _le(h, _BASE_EPOCH) == base
        ):
            out[i] |= DELTA_OK
    return out


@_inline
def _same(b: Any, at: Any, n: Any, expect: Any, e_at: Any, e_n: Any) -> Any:
    """Whether ``b[at : at + n]`` equals ``expect[e_at : e_at + e_n]`` (eight bytes a load)."""
    if n != e_n:
        return False
    k = 0
    while k + 8 <= n:
        if _u64(b, at + k) != _u64(expect, e_at + k):
            return False
        k += 8
    while k < n:
        if b[at + k] != expect[e_at + k]:
            return False
        k += 1
    return True


@_inline
def _distinct(b: Any, at: Any, count: Any, stamps: Any, stamp: Any) -> Any:
    """Whether the ``count`` images at ``b[at:]`` name ``count`` different buckets: each bucket
    seen gets ``stamp`` in ``stamps`` (one entry per bucket of the largest lane in play; a
    stamp is used for one delta only)."""
    for k in range(count):
        bucket = _le_at(b, at + IMAGE_SIZE * k, _IMAGE_BUCKET)
        if stamps[bucket] == stamp:
            return False
        stamps[bucket] = stamp
    return True


@_kernel
def advance_rows(
    b: npt.NDArray[np.uint8],
    cand: npt.NDArray[np.uint8],
    value: npt.NDArray[np.uint64],
    present: npt.NDArray[np.bool_],
    offset: npt.NDArray[np.int64],
    head: npt.NDArray[np.uint8],
    top: npt.NDArray[np.uint64],
    run: npt.NDArray[np.int64],
    row_slot: npt.NDArray[np.int64],
    lo: int,
    hi: int,
    mode: npt.NDArray[np.int64],
    installed: npt.NDArray[np.uint64],
    seed: npt.NDArray[np.uint64],
    buckets: npt.NDArray[np.uint64],
    dc: npt.NDArray[np.uint64],
    delta_ok: npt.NDArray[np.bool_],
    expect: npt.NDArray[np.uint8],
    producer_at: npt.NDArray[np.int64],
    producer_len: npt.NDArray[np.int64],
    relay_at: npt.NDArray[np.int64],
    relay_len: npt.NDArray[np.int64],
    stamps: npt.NDArray[np.uint32],
    stamp: npt.NDArray[np.uint32],
    out: npt.NDArray[np.uint8],
) -> int:
    """Rows ``lo`` onwards, in order, each against its lane (``row_slot``: an index into the
    per-lane arrays; mode 0: the per-message engine's). A ready lane (``MODE_READY``) applies a
    delta candidate whose producer and relay bytes are the session's (``expect``), whose header
    names the session's seed, bucket count and DC, whose base is the lane's installed sequence,
    whose buckets are in the lane and each named once, and while no snapshot is being assembled
    (``delta_ok``); it takes a heartbeat at the installed sequence. A lane waiting for a
    snapshot (``MODE_RECOVERING``) skips a candidate whose producer and relay bytes are ones
    known to parse and validate (``expect``). ``run`` numbers runs of rows with the same relay
    and producer bytes (the scan's): their bytes are compared once a run.
    ``out[row]`` gets ``APPLIED``, ``HEARTBEAT`` or ``SKIPPED``, ``installed`` follows the
    applied deltas. ``stamps`` (at least as long as the largest lane, zero or stamped before)
    and ``stamp[0]`` (the last stamp used, below ``2**32 - 1 - (hi - lo)``) find a bucket named
    twice in a delta. Returns the first row it did not take (``hi`` when it took them all)."""
    checked = np.full(len(mode), -1, dtype=np.int64)  # per lane: a run whose bytes matched
    for r in range(lo, hi):
        s = row_slot[r]
        m = mode[s]
        c = cand[r]
        if m == MODE_RECOVERING:
            if not (c & SKIP_OK):
                return r
        elif m != MODE_READY or not (c & (DELTA_OK | HEARTBEAT_OK)):
            return r
        # a run's rows carry the same relay and producer bytes: compared once a run
        if run[r] != checked[s]:
            if not _same(
                b,
                offset[r, SLOT_PRODUCER],
                np.int64(value[r, SLOT_PRODUCER]),
                expect,
                producer_at[s],
                producer_len[s],
            ) or not _same(
                b,
                offset[r, SLOT_RELAY],
                np.int64(value[r, SLOT_RELAY]),
                expect,
                relay_at[s],
                relay_len[s],
            ):
                return r
            checked[s] = run[r]
        if m == MODE_RECOVERING:
            out[r] = SKIPPED
            continue
        if c & HEARTBEAT_OK:
            if value[r, SLOT_SEQUENCE] != installed[s]:
                return r
            out[r] = HEARTBEAT
            continue
        h = head[r]
        if not (
            delta_ok[s]
            and value[r, SLOT_BASE] == installed[s]
            and _le(h, _SEED) == seed[s]
            and _le(h, _BUCKETS) == buckets[s]
            and _le(h, _DC) == dc[s]
            and top[r] < buckets[s]
        ):
            return r
        stamp[0] += np.uint32(1)
        count = np.int64(_le(h, COUNT_FIELD))
        if not _distinct(b, offset[r, SLOT_PAYLOAD] + IMAGES_AT, count, stamps, stamp[0]):
            return r
        installed[s] = value[r, SLOT_SEQUENCE]
        out[r] = APPLIED
    return hi


#: a history row (``analysis._replay._ROW``): the delta's sequence, then the image as it is
HISTORY_ROW: Final = 8 + IMAGE_SIZE


@_kernel
def apply_deltas(
    b: npt.NDArray[np.uint8],
    at: npt.NDArray[np.int64],
    count: npt.NDArray[np.int64],
    sequence: npt.NDArray[np.uint64],
    lane: npt.NDArray[np.uint64],
    images: npt.NDArray[np.uint8],
    previous: npt.NDArray[np.uint64],
    history: npt.NDArray[np.uint8],
) -> None:
    """Write the images of deltas ``k`` (``count[k]`` images from ``b[at[k]:]``) into ``lane``,
    in order. Where they are not empty: ``images`` gets a copy of them all (packed,
    ``IMAGE_SIZE`` bytes each), ``previous`` the word each one replaced, ``history`` a
    ``HISTORY_ROW``-byte row each (``sequence[k]`` little-endian, then the image)."""
    keep = images.shape[0] > 0
    prev = previous.shape[0] > 0
    rows = history.shape[0] > 0
    j = 0
    for k in range(len(at)):
        p = at[k]
        seq = sequence[k]
        for _ in range(count[k]):
            bucket = _le_at(b, p, _IMAGE_BUCKET)
            word = _le_at(b, p, _IMAGE_WORD)
            if prev:
                previous[j] = lane[bucket]
            lane[bucket] = word
            if keep:
                for x in range(IMAGE_SIZE):
                    images[IMAGE_SIZE * j + x] = b[p + x]
            if rows:
                r = HISTORY_ROW * j
                for x in range(8):
                    history[r + x] = np.uint8((seq >> np.uint64(8 * x)) & np.uint64(0xFF))
                for x in range(IMAGE_SIZE):
                    history[r + 8 + x] = b[p + x]
            p += IMAGE_SIZE
            j += 1

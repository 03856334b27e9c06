"""One DC lane of an explanation (:mod:`cbi1kit.analysis._explain`): the request's blocks
against the lane's words at the moment, where each block's fingerprint sits and since which
snapshot or delta, where the chain breaks and which write removed the block (replay's history).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from cbi1kit.analysis._global import ViewLane, _time_of, format_unix_ns
from cbi1kit.analysis._replay import LaneReport, _Segment
from cbi1kit.ckf._bucket import bucket_contains, bucket_first, bucket_slot
from cbi1kit.ckf._consumer import CkfLaneTable, find_prefix_depths, sequence_hashes
from cbi1kit.hashing._dc_names import dc_fields
from cbi1kit.hashing._identity import ProducerIdentity
from cbi1kit.hashing._pools import DcId, PoolId


@dataclass(frozen=True, slots=True)
class Change:
    """A write the consumer applied: the snapshot installed at ``sequence`` or the delta that
    advanced the lane to it, received at ``unix_ns`` (None where the source has no receive
    times) on capture stream ``stream_id``."""

    kind: Literal["snapshot", "delta"]
    sequence: int
    unix_ns: int | None
    stream_id: int

    def __str__(self) -> str:
        when = "" if self.unix_ns is None else f" ({format_unix_ns(self.unix_ns)})"
        return f"{self.kind} {self.sequence}{when}"

    def to_dict(self) -> dict[str, object]:
        """The change as JSON-ready values."""
        return {
            "kind": self.kind,
            "sequence": self.sequence,
            "unix_ns": self.unix_ns,
            "time": None if self.unix_ns is None else format_unix_ns(self.unix_ns),
            "stream_id": self.stream_id,
        }


@dataclass(frozen=True, slots=True)
class BlockAddress:
    """One block of the request: its local hash (the engine's ``tokens_hash``), the canonical
    sequence hash a CKF stores, and that hash's fingerprint and two buckets (ckf.md §1.3)."""

    index: int
    local_hash: int
    sequence_hash: int
    fingerprint: int
    bucket_a: int
    bucket_b: int

    def to_dict(self) -> dict[str, object]:
        """The address as JSON-ready values (hashes in hex)."""
        return {
            "index": self.index,
            "local_hash": f"0x{self.local_hash:016x}",
            "sequence_hash": f"0x{self.sequence_hash:016x}",
            "fingerprint": f"0x{self.fingerprint:04x}",
            "bucket_a": self.bucket_a,
            "bucket_b": self.bucket_b,
        }


@dataclass(frozen=True, slots=True)
class Lookup:
    """The request's blocks on one consumer table: their addresses, the lanes that hold each
    block's fingerprint in bucket a or b (a bit per lane) and each lane's prefix depth by
    upstream's search (``find_prefix_depths``, with the router's verification window)."""

    blocks: tuple[BlockAddress, ...]
    masks: list[int]
    depths: list[int]

    @classmethod
    def of(cls, table: CkfLaneTable, local: npt.NDArray[np.uint64], window: int) -> Lookup:
        """The blocks of the local hashes ``local`` looked up in ``table``."""
        seq = sequence_hashes(local)
        fp, a, b = table.addressing.prepare_many(seq)
        blocks = tuple(
            BlockAddress(i, h, s, f, x, y)
            for i, (h, s, f, x, y) in enumerate(
                zip(local.tolist(), seq.tolist(), fp.tolist(), a.tolist(), b.tolist(), strict=True)
            )
        )
        masks = table.probe_many(seq).tolist()
        depths = find_prefix_depths(len(blocks), table.ready_mask(), window, masks.__getitem__)
        return cls(blocks, masks, depths)


class Truth(enum.StrEnum):
    """A block on a lane against what its producer holds (``UNKNOWN``: the consumer alone
    cannot tell a 16-bit fingerprint's owner)."""

    TRUE_POSITIVE = "true positive"
    FALSE_POSITIVE = "false positive"  # held by the filter, not by the producer
    FALSE_NEGATIVE = "false negative"  # held by the producer, not by the lane (a hole, a lag)
    TRUE_NEGATIVE = "true negative"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class LaneBlock:
    """One block on one lane: whether bucket a or b holds its fingerprint (``held``), which
    bucket (``side`` "a" is looked at first, as the producer inserts) and slot, and ``since``:
    the snapshot or delta that wrote the fingerprint into that slot, where it has stayed."""

    index: int
    held: bool
    side: Literal["a", "b"] | None = None
    bucket: int | None = None
    slot: int | None = None
    since: Change | None = None
    truth: Truth = Truth.UNKNOWN

    def to_dict(self) -> dict[str, object]:
        """The block's place in the lane as JSON-ready values."""
        return {
            "index": self.index,
            "held": self.held,
            "side": self.side,
            "bucket": self.bucket,
            "slot": self.slot,
            "since": None if self.since is None else self.since.to_dict(),
            "truth": None if self.truth is Truth.UNKNOWN else self.truth.value,
        }


@dataclass(frozen=True, slots=True)
class LaneExplanation:
    """The request on one DC lane of the table at the moment. ``depth``: what upstream's search
    finds (``find_prefix_depths``: advisory; a false positive at a sampled position can raise it, a
    hole past the verification window be jumped); ``first_missing``: the first block whose
    fingerprint neither bucket holds (None: all held); ``removed``: the write (a delta or a new
    session's snapshot) after which that fingerprint left both. Not ready: ``why``, not searched
    (upstream's ready mask); ``stale`` (last message, at ``touched_unix_ns``, older than
    ``max_age``): searched, not ranked (None: not judged)."""

    lane: int
    pool: PoolId
    producer: ProducerIdentity | None
    ready: bool
    sequence: int | None
    unix_ns: int | None
    stream_id: int | None
    why: str
    blocks: tuple[LaneBlock, ...] = ()
    depth: int | None = None
    first_missing: int | None = None
    removed: Change | None = None
    truth_known: bool = False
    stale: bool | None = None
    touched_unix_ns: int | None = None

    @property
    def dc_id(self) -> DcId:
        """The DC whose lane this is."""
        return self.pool.dc_id

    def to_dict(self) -> dict[str, object]:
        """The lane's explanation as JSON-ready values (u64 in hex)."""
        p = self.producer
        return {
            "lane": self.lane,
            **dc_fields(self.dc_id.value),
            "pool": str(self.pool),
            "producer": None if p is None else f"{p.producer_incarnation:x}.{p.layout_generation}",
            "ready": self.ready,
            "sequence": self.sequence,
            "unix_ns": self.unix_ns,
            "time": None if self.unix_ns is None else format_unix_ns(self.unix_ns),
            "stream_id": self.stream_id,
            "why": self.why,
            "depth": self.depth,
            "first_missing": self.first_missing,
            "removed": None if self.removed is None else self.removed.to_dict(),
            "truth_known": self.truth_known,
            "stale": self.stale,
            "last_message_unix_ns": self.touched_unix_ns,
            "blocks": [b.to_dict() for b in self.blocks],
        }


def _truth(held: bool, holds: bool | None) -> Truth:
    if holds is None:
        return Truth.UNKNOWN
    if held:
        return Truth.TRUE_POSITIVE if holds else Truth.FALSE_POSITIVE
    return Truth.FALSE_NEGATIVE if holds else Truth.TRUE_NEGATIVE


def _change(seg: _Segment, kind: Literal["snapshot", "delta"], sequence: int) -> Change:
    return Change(kind, sequence, _time_of(seg, sequence), seg.stream_id)


def _writes_by_bucket(rows: npt.NDArray[np.void]) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for sequence, bucket, word in rows.tolist():
        out.setdefault(int(bucket), []).append((int(sequence), int(word)))
    return out


def _since(
    seg: _Segment, snapshot: int, writes: Sequence[tuple[int, int]], slot: int, fp: int
) -> Change:
    """The write that put ``fp`` in ``slot`` where it has stayed: the last write after which
    the slot held it, with every later write keeping it there."""
    holding = bucket_slot(snapshot, slot) == fp
    since = _change(seg, "snapshot", seg.sequence) if holding else None
    for sequence, word in writes:
        now = bucket_slot(word, slot) == fp
        if now and not holding:
            since = _change(seg, "delta", sequence)
        holding = now
    assert since is not None and holding  # the slot holds fp at the moment
    return since


def _removal(lane: LaneReport, index: int, sequence: int, fp: int, a: int, b: int) -> Change | None:
    """The write after which neither bucket held ``fp`` any more: the last such delta of the
    session, or, going back session by session, the snapshot of the session after one that
    ended holding it; None when the lane never held it (as far as history reaches)."""
    segments = lane._segments
    for k in range(index, -1, -1):
        seg = segments[k]
        if not seg.kept:
            return None
        upto = sequence if k == index else seg.last_sequence
        snapshot, rows = lane._bucket_writes(seg, [a, b], upto)
        words = {a: int(snapshot[0]), b: int(snapshot[1])}
        present = bucket_contains(words[a], fp) or bucket_contains(words[b], fp)
        removed: int | None = None
        for seq, bucket, word in rows.tolist():
            words[int(bucket)] = int(word)
            now = bucket_contains(words[a], fp) or bucket_contains(words[b], fp)
            if present and not now:
                removed = int(seq)
            present = now
        if removed is not None:
            return _change(seg, "delta", removed)
        if k < index and present:  # held at this session's end; the next snapshot lacked it
            nxt = segments[k + 1]
            return _change(nxt, "snapshot", nxt.sequence)
    return None


def _slot_of(
    blk: BlockAddress, words: npt.NDArray[np.uint64]
) -> tuple[Literal["a", "b"], int, int]:
    """Where a held block's fingerprint sits: bucket a (looked at first, as the producer
    inserts) or b, that bucket and its first slot holding it."""
    slot = bucket_first(int(words[blk.bucket_a]), blk.fingerprint)
    if slot is not None:
        return "a", blk.bucket_a, slot
    slot = bucket_first(int(words[blk.bucket_b]), blk.fingerprint)
    assert slot is not None  # held: bucket a or b has it
    return "b", blk.bucket_b, slot


def _lane_blocks(
    lane: int,
    seg: _Segment,
    history: LaneReport,
    sequence: int,
    words: npt.NDArray[np.uint64],
    lookup: Lookup,
    holds: set[int] | None,
) -> tuple[LaneBlock, ...]:
    """Each block on lane ``lane`` (its words at ``sequence`` of the session ``seg``): whether a
    bucket holds its fingerprint, where and since which write; true or false where ``holds``
    says what the producer holds."""
    blocks = lookup.blocks
    buckets = sorted({b.bucket_a for b in blocks} | {b.bucket_b for b in blocks})
    snapshot, rows = history._bucket_writes(seg, buckets, sequence)
    at_snapshot = dict(zip(buckets, (int(w) for w in snapshot.tolist()), strict=True))
    writes = _writes_by_bucket(rows)
    out: list[LaneBlock] = []
    for blk in blocks:
        held = bool((lookup.masks[blk.index] >> lane) & 1)
        truth = _truth(held, None if holds is None else blk.sequence_hash in holds)
        if not held:
            out.append(LaneBlock(blk.index, False, truth=truth))
            continue
        side, bucket, slot = _slot_of(blk, words)
        since = _since(seg, at_snapshot[bucket], writes.get(bucket, ()), slot, blk.fingerprint)
        out.append(LaneBlock(blk.index, True, side, bucket, slot, since, truth))
    return tuple(out)


def explain_lane(
    n: ViewLane,
    history: LaneReport | None,
    words: npt.NDArray[np.uint64],
    lookup: Lookup,
    holds: set[int] | None,
) -> LaneExplanation:
    """One lane (its words at the moment, its replay ``history``; ``holds``: what its producer
    holds, if given): per block, where its fingerprint sits and since when; where it breaks.
    A lane that is not ready says why."""
    if not n.ready:
        return LaneExplanation(
            n.lane,
            n.pool,
            n.producer,
            False,
            None,
            None,
            None,
            n.why,
            truth_known=holds is not None,
        )
    assert n.sequence is not None and n.session is not None and history is not None
    index = n.session - 1
    out = _lane_blocks(n.lane, history._segments[index], history, n.sequence, words, lookup, holds)
    first_missing = next((b.index for b in out if not b.held), None)
    removed = None
    if first_missing is not None:
        blk = lookup.blocks[first_missing]
        removed = _removal(history, index, n.sequence, blk.fingerprint, blk.bucket_a, blk.bucket_b)
    return LaneExplanation(
        n.lane,
        n.pool,
        n.producer,
        True,
        n.sequence,
        n.time_unix_ns,
        n.stream_id,
        n.why,
        out,
        lookup.depths[n.lane],
        first_missing,
        removed,
        holds is not None,
        n.stale,
        n.touched_unix_ns,
    )

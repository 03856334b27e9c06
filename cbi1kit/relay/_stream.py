"""One subscription as a consumer reads it: every rule, in upstream's order, over a thin lane.

:class:`StreamChecker` is the one engine behind replay and the recorder's ``--validate``. Per
message: :data:`cbi1kit.wire.RULES` (relay contract, CBI1 decode, envelope vs header, delta
contiguity last), then the stream rules: one producer generation and relay identity per stream,
chunks in order, deltas by the lane ingestor's rules, heartbeats only at the installed sequence.
A violation ends the stream (the consumer resubscribes; a new checker starts) and names a rule
id, else the stream rule (``ProducerChanged``, ``AwaitingSnapshot``, a lane fault's upstream
variant, ...).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.ckf._lane import IngestOutcome, Lane
from cbi1kit.errors import Cbi1kitError, LaneError, LaneVariant
from cbi1kit.hashing._dc_names import dc_text
from cbi1kit.relay._messages import check_filter_update
from cbi1kit.wire._assembly import AssembledSnapshot, SnapshotAssembly
from cbi1kit.wire._codec import decode, peek_format
from cbi1kit.wire._format import FilterFormat
from cbi1kit.wire._frames import Delta, SnapshotChunk
from cbi1kit.wire._rules import rule_id, rule_of

Words = npt.NDArray[np.uint64]

# the envelope-against-header rules, named as the rulebook names them
_KIND_MISMATCH: Final = rule_id("cbi1-kind-mismatch")
_DC_ID: Final = rule_id("cbi1-dc-id")
_EPOCH: Final = rule_id("cbi1-epoch")
_BASE_EPOCH: Final = rule_id("cbi1-delta-base-epoch")
_CONTIGUOUS: Final = rule_id("relay-delta-contiguous")


class StepKind(enum.StrEnum):
    """What one message did to its lane in the stream engine."""

    SNAPSHOT_CHUNK = "snapshot_chunk"  # a chunk absorbed, snapshot not complete yet
    SNAPSHOT_INSTALLED = "snapshot_installed"  # the last chunk: the lane is ready at sequence
    DELTA_APPLIED = "delta_applied"
    HEARTBEAT = "heartbeat"
    VIOLATION = "violation"


@dataclass(frozen=True, slots=True)
class Step:
    """What one message did. ``sequence`` / ``base_sequence`` come from the CBI1 header when
    the message had no envelope; ``chunk`` is the absorbed snapshot chunk, ``snapshot`` is set
    on install, ``delta`` (and, when asked for, the ``previous`` words it overwrote) on an
    applied delta."""

    kind: StepKind
    rule: str | None = None
    reason: str | None = None
    sequence: int | None = None
    base_sequence: int | None = None
    snapshot: AssembledSnapshot | None = None
    delta: Delta | None = None
    previous: Words | None = None
    chunk: SnapshotChunk | None = None


def message_violation(update: pb.FilterUpdate) -> tuple[str, Cbi1kitError] | None:
    """The relay contract's first broken rule of one message on its own, as ``(rule id,
    error)``; delta contiguity is left out: upstream checks it last (see ``StreamChecker``)."""
    err = check_filter_update(update)
    if err is None or rule_of(err) == _CONTIGUOUS:
        return None
    return rule_of(err), err


def starts_snapshot(update: pb.FilterUpdate) -> bool:
    """A snapshot chunk 0 (or one too short to say): where a consumer may start over."""
    return update.kind == pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK and _chunk_index(update.payload) in (
        0,
        None,
    )


def bare_starts_snapshot(raw: bytes) -> bool:
    """The same for a bare CBI1 frame (flags 1, chunk 0)."""
    if len(raw) < 52 or raw[6:8] != b"\x01\x00":
        return True
    return int.from_bytes(raw[48:52], "little") == 0


def _chunk_index(payload: bytes) -> int | None:
    if len(payload) < 52:
        return None
    return int.from_bytes(payload[48:52], "little")


class StreamChecker:
    """The consumer's rules over one subscription (or one run of bare frames).

    ``expected_format`` / ``expected_producer`` pin format and generation (``LaneError``
    ``DifferentFormats`` if they disagree), else the first message's are taken, as the relay's is.
    ``lane`` is reset (new lease; replaced if sized otherwise); ``keep_previous`` returns old words.
    """

    def __init__(
        self,
        *,
        expected_format: FilterFormat | None = None,
        expected_producer: pb.ProducerIdentity | None = None,
        lane: Lane | None = None,
        keep_previous: bool = False,
    ) -> None:
        self.expected_format = expected_format
        self.keep_previous = keep_previous
        self.lane = lane
        if lane is not None:
            lane.reset()
        self.format: FilterFormat | None = None
        self.dc_id: int | None = None
        self.ended = False
        self._producer: bytes | None = None
        self._relay: bytes | None = None
        self._assembly: SnapshotAssembly | None = None
        if expected_producer is not None:
            mismatch = self._adopt(expected_producer)
            if mismatch is not None:
                raise LaneError(LaneVariant.DifferentFormats, mismatch)

    # -- steps --------------------------------------------------------------------------------
    def _violation(self, rule: str, reason: str, **at: Any) -> Step:
        self.ended = True
        if self.lane is not None:
            self.lane.ready = False
        return Step(StepKind.VIOLATION, rule, reason, **at)

    def check(self, update: pb.FilterUpdate) -> Step:
        """One ``FilterUpdate`` of the stream."""
        at = {"sequence": update.sequence, "base_sequence": update.base_sequence}
        err = check_filter_update(update)
        # upstream checks a delta's contiguity last (the lane ingestor, after decode and the
        # header checks), so that rule waits for the others, as in the rulebook's order
        contiguity = None
        if err is not None:
            if rule_of(err) != _CONTIGUOUS:
                return self._violation(rule_of(err), str(err), **at)
            contiguity = err
        changed = self._same_stream(update, at)
        if changed is not None:
            return changed
        if update.kind == pb.FILTER_UPDATE_KIND_HEARTBEAT:
            return self._heartbeat(update.sequence, at)
        frame = self._decode(update.payload, at)
        if isinstance(frame, Step):
            return frame
        broken = self._envelope(update, frame, at)
        if broken is not None:
            return broken
        if contiguity is not None:
            return self._violation(_CONTIGUOUS, str(contiguity), **at)
        return self._apply(frame, at)

    def _same_stream(self, update: pb.FilterUpdate, at: dict[str, Any]) -> Step | None:
        """The stream's producer generation and relay identity: adopted from its first message
        (the relay's from the first after a subscription), then held (a violation if not)."""
        producer = update.producer.SerializeToString(deterministic=True)
        relay = update.relay.SerializeToString(deterministic=True)
        if self._producer is None:
            mismatch = self._adopt(update.producer)
            if mismatch is not None:
                return self._violation("FormatMismatch", mismatch, **at)
            self._relay = relay
        elif producer != self._producer:
            return self._violation(
                "ProducerChanged", "different producer generation within one session", **at
            )
        elif self._relay is None:
            self._relay = relay  # subscribed to a producer: the stream's relay is its first
        elif relay != self._relay:
            return self._violation(
                "RelayChanged", "relay identity changed within one session", **at
            )
        return None

    def _envelope(
        self, update: pb.FilterUpdate, frame: SnapshotChunk | Delta, at: dict[str, Any]
    ) -> Step | None:
        """The envelope against the CBI1 header: kind, DC, epoch and a delta's base epoch."""
        want = "snapshot chunk" if update.kind == pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK else "delta"
        got = "snapshot chunk" if isinstance(frame, SnapshotChunk) else "delta"
        if want != got:
            return self._violation(_KIND_MISMATCH, f"envelope says {want}, CBI1 says {got}", **at)
        if frame.header.dc_id != self.dc_id:
            return self._violation(
                _DC_ID,
                f"CBI1 dc_id {dc_text(frame.header.dc_id)} != producer dc_id {dc_text(self.dc_id)}",
                **at,
            )
        if frame.header.epoch != update.sequence:
            return self._violation(
                _EPOCH,
                f"CBI1 epoch {frame.header.epoch} != envelope sequence {update.sequence}",
                **at,
            )
        if isinstance(frame, Delta) and frame.base_epoch != update.base_sequence:
            return self._violation(
                _BASE_EPOCH,
                f"CBI1 base_epoch {frame.base_epoch} != envelope base_sequence "
                f"{update.base_sequence}",
                **at,
            )
        return None

    def _adopt(self, producer: pb.ProducerIdentity) -> str | None:
        """Take the stream's producer generation: its bytes, format and DC (or say why not)."""
        fmt = producer.ckf_format
        adopted = FilterFormat(seed=fmt.seed, bucket_count=fmt.bucket_count)
        if self.expected_format is not None and adopted != self.expected_format:
            return f"producer format {adopted!r} differs from the expected {self.expected_format!r}"
        self._producer = producer.SerializeToString(deterministic=True)
        self.format = adopted
        self.dc_id = producer.pool_id.dc_id
        return None

    def check_frame(self, raw: bytes) -> Step:
        """One bare CBI1 frame: no envelope, so the CBI1 header is all there is."""
        at: dict[str, Any] = {}
        if self.format is None:
            try:
                self.format = self.expected_format or peek_format(raw)
            except Cbi1kitError as exc:
                return self._violation(rule_of(exc), str(exc), **at)
        frame = self._decode(raw, at)
        if isinstance(frame, Step):
            return frame
        if self.dc_id is None:
            self.dc_id = frame.header.dc_id
        elif frame.header.dc_id != self.dc_id:
            return self._violation(
                _DC_ID, f"CBI1 dc_id changed to {dc_text(frame.header.dc_id)}", **at
            )
        return self._apply(frame, at)

    def _decode(self, payload: bytes, at: dict[str, Any]) -> SnapshotChunk | Delta | Step:
        assert self.format is not None
        try:
            frame = decode(self.format, payload)
        except Cbi1kitError as exc:
            return self._violation(rule_of(exc), str(exc), **at)
        if at.get("sequence") is None:
            at["sequence"] = frame.header.epoch
            if isinstance(frame, Delta):
                at["base_sequence"] = frame.base_epoch
        return frame

    def _ensure_lane(self) -> Lane:
        assert self.format is not None
        lane = self.lane
        if lane is None or lane.bucket_count != self.format.bucket_count:
            lane = self.lane = Lane(self.format.bucket_count)
        return lane

    def _apply(self, frame: SnapshotChunk | Delta, at: dict[str, Any]) -> Step:
        lane = self._ensure_lane()
        if isinstance(frame, SnapshotChunk):
            if self._assembly is None:
                assert self.format is not None
                self._assembly = SnapshotAssembly(self.format)
            try:
                done = self._assembly.absorb(frame)
            except Cbi1kitError as exc:
                return self._violation(rule_of(exc), str(exc), **at)
            if done is None:
                return Step(
                    StepKind.SNAPSHOT_CHUNK,
                    reason=f"chunk {frame.chunk_index + 1} of {frame.chunk_count}",
                    chunk=frame,
                    **at,
                )
            return self._install(lane, done, frame, at)
        if self._assembly is not None and self._assembly.in_progress:
            return self._violation(
                "ChunkSequence", "a delta arrived while a snapshot was being assembled", **at
            )
        buckets, new_words = frame.buckets, frame.words
        previous = lane.words[buckets.astype(np.intp)] if self.keep_previous else None
        try:
            outcome = lane.apply(frame.base_epoch, frame.header.epoch, buckets, new_words)
        except LaneError as exc:
            if exc.variant is LaneVariant.AwaitingSnapshot:
                return self._violation(
                    "AwaitingSnapshot", "a delta arrived before any snapshot", **at
                )
            return self._violation(str(exc.subvariant), str(exc.detail), **at)
        if outcome is not IngestOutcome.DELTA_APPLIED:
            return self._violation(
                "StaleOrDuplicateDelta",
                f"delta {frame.base_epoch} -> {frame.header.epoch} ignored by the lane "
                f"(installed {lane.installed_sequence}); the consumer requires DeltaApplied",
                **at,
            )
        return Step(StepKind.DELTA_APPLIED, delta=frame, previous=previous, **at)

    def _install(
        self, lane: Lane, snap: AssembledSnapshot, last: SnapshotChunk, at: dict[str, Any]
    ) -> Step:
        try:
            # in one stream a lane that is ready ignores a stale snapshot and faults a newer one
            outcome = lane.install(snap.epoch, snap.words)
        except LaneError as exc:
            return self._violation(str(exc.subvariant), str(exc.detail), **at)
        if outcome is not IngestOutcome.SNAPSHOT_INSTALLED:
            return self._violation(
                "SnapshotNotInstalled",
                f"snapshot {snap.epoch} ignored by the lane ({outcome.value})",
                **at,
            )
        return Step(StepKind.SNAPSHOT_INSTALLED, snapshot=snap, chunk=last, **at)

    def _heartbeat(self, sequence: int, at: dict[str, Any]) -> Step:
        lane = self.lane
        if lane is None or not lane.ready:
            return self._violation("HeartbeatBeforeSnapshot", "heartbeat before a snapshot", **at)
        if sequence != lane.installed_sequence:
            return self._violation(
                "HeartbeatSequence",
                f"heartbeat at {sequence}, installed {lane.installed_sequence}",
                **at,
            )
        return Step(StepKind.HEARTBEAT, **at)

"""The thin lane model: one lane's words and upstream's ingestor rules for the data.

``Lane`` is what replay, the tables and the recorder need: a snapshot installs the whole lane, a
delta writes absolute words after upstream ``GlobalCkfLaneIngestor::apply_delta``'s checks, in
its order (readiness, stale or duplicate, base = installed, one step, then the images: none,
outside the lane, repeated). It knows no leases, consumer ids or producer identities: the
consumer port (:class:`~cbi1kit.ckf._consumer.LaneReplica`) adds those above it, and a stream reader
compares identities itself. ``DcCkfSnapshot`` / ``DcCkfDelta`` are the values a producer hands
a lane, here so that the consumer side does not import the producer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cbi1kit.errors import CkfError, CkfVariant, LaneError, LaneVariant
from cbi1kit.hashing._identity import LaneLease, ProducerIdentity


@dataclass(frozen=True, slots=True, eq=False)
class DcCkfDelta:
    """A sequenced batch: ``base_sequence → sequence`` under ``lease``."""

    identity: ProducerIdentity
    lease: LaneLease
    base_sequence: int
    sequence: int
    buckets: npt.NDArray[np.uint32]
    values: npt.NDArray[np.uint64]

    def images(self) -> list[tuple[int, int]]:
        """The batch as ``(bucket, word)`` pairs of Python ints, in batch order."""
        return list(zip(self.buckets.tolist(), self.values.tolist(), strict=True))


@dataclass(frozen=True, slots=True, eq=False)
class DcCkfSnapshot:
    """A full lane at ``sequence`` (every word, bucket order)."""

    identity: ProducerIdentity
    lease: LaneLease
    sequence: int
    buckets: npt.NDArray[np.uint64]


class IngestOutcome(enum.Enum):
    """What a lane did with one publication frame (upstream's ingestor)."""

    SNAPSHOT_INSTALLED = "snapshot_installed"
    DELTA_APPLIED = "delta_applied"
    IGNORED_FOREIGN_LEASE = "ignored_foreign_lease"
    IGNORED_STALE_OR_DUPLICATE = "ignored_stale_or_duplicate"


class Lane:
    """``bucket_count`` words (or the caller's ``words`` column) and the data rules.

    Rule breaks raise :class:`~cbi1kit.errors.LaneError`: ``Fault.<variant>`` clears readiness
    (upstream deactivates the lane until a new lease and snapshot), ``AwaitingSnapshot`` does
    not (the lane was never ready). ``lane`` only names the lane in messages.
    """

    def __init__(
        self, bucket_count: int, words: npt.NDArray[np.uint64] | None = None, *, lane: int = 0
    ) -> None:
        if words is None:
            words = np.zeros(bucket_count, dtype=np.uint64)
        if words.shape != (bucket_count,) or words.dtype != np.uint64:
            why = f"lane words must be uint64[{bucket_count}]"
            raise CkfError(CkfVariant.Usage, why, field="words", expected=bucket_count)
        self.bucket_count = bucket_count
        self.words = words
        self.lane = lane
        self.ready = False
        self.installed_sequence = 0
        self.last_fault: LaneError | None = None

    def reset(self) -> None:
        """A new lease: not ready, nothing installed (the words stay until a snapshot)."""
        self.ready = False
        self.installed_sequence = 0

    def fault(self, variant: str, detail: str) -> LaneError:
        """Deactivate the lane; the error to raise names upstream's fault ``variant``."""
        self.ready = False
        self.last_fault = LaneError(
            LaneVariant.Fault,
            detail,
            subvariant=variant,
            message=f"lane {self.lane} faulted ({variant}): {detail}; needs a new lease + snapshot",
            lane=self.lane,
        )
        return self.last_fault

    def install(self, sequence: int, buckets: npt.ArrayLike) -> IngestOutcome:
        """A full lane at ``sequence``: ignored when stale, a fault while ready or mis-sized."""
        if self.ready and sequence <= self.installed_sequence:
            return IngestOutcome.IGNORED_STALE_OR_DUPLICATE
        words = np.asarray(buckets)
        if words.shape != (self.bucket_count,):
            raise self.fault(
                "BucketCount", f"snapshot has {words.size} words, lane has {self.bucket_count}"
            )
        if self.ready:
            raise self.fault(
                "SnapshotWhileReady",
                f"snapshot {sequence} while ready at {self.installed_sequence}",
            )
        self.words[:] = words.astype(np.uint64, copy=False)
        self.installed_sequence = sequence
        self.ready = True
        return IngestOutcome.SNAPSHOT_INSTALLED

    def apply(
        self, base_sequence: int, sequence: int, buckets: npt.ArrayLike, values: npt.ArrayLike
    ) -> IngestOutcome:
        """Absolute images ``base_sequence → sequence``; no buffering across gaps."""
        if not self.ready:
            raise LaneError(
                LaneVariant.AwaitingSnapshot,
                message=f"lane {self.lane}: delta {sequence} arrived before any snapshot",
                lane=self.lane,
                sequence=sequence,
            )
        if sequence <= self.installed_sequence:
            return IngestOutcome.IGNORED_STALE_OR_DUPLICATE
        if base_sequence != self.installed_sequence:
            raise self.fault(
                "BaseSequenceMismatch",
                f"delta base {base_sequence} != installed {self.installed_sequence}",
            )
        if sequence != base_sequence + 1:
            raise self.fault("SequenceStep", f"delta {base_sequence} → {sequence} is not one step")
        index = np.asarray(buckets).astype(np.int64, copy=False)
        if index.size == 0:
            raise self.fault("EmptyDelta", f"delta {sequence} has no images")
        if int(index.min()) < 0 or int(index.max()) >= self.bucket_count:
            raise self.fault("BucketIndex", "image bucket index outside the lane")
        if np.unique(index).size != index.size:
            raise self.fault("DuplicateBucket", "a bucket appears twice in one delta")
        self.words[index] = np.asarray(values, dtype=np.uint64)
        self.installed_sequence = sequence
        return IngestOutcome.DELTA_APPLIED

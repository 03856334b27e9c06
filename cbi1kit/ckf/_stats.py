"""Filter statistics in the vocabulary of RedisBloom ``CF.INFO`` / cuckoofilter ``Info()``.

The estimated per-probe false-positive rate is 8α/65534 (spec §5.3): an absent key is compared
with the ≈ 8α occupied slots of its two buckets, and a fingerprint matches with probability
65538/2^32 ≈ 1/65534 (value 1 has double weight because 0 is promoted to 1). The measured rate
probes random hashes that are not resident.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._bucket import SLOTS_PER_BUCKET, lane_contains, lane_occupancy
from cbi1kit.ckf._producer import DcCkfState

__all__ = [
    "CkfStats",
    "estimated_false_positive_rate",
    "lane_stats",
    "measured_false_positive_rate",
    "producer_stats",
]

FINGERPRINT_MATCH_PROBABILITY = 65538 / 2**32


def estimated_false_positive_rate(load_factor: float) -> float:
    """Per-probe FPR for slot load α: 1 - (1 - p)^(8α), ≈ 8α/65534."""
    return 8 * load_factor * FINGERPRINT_MATCH_PROBABILITY


@dataclass(frozen=True, slots=True)
class CkfStats:
    """``CF.INFO``-style figures; producer-only fields are None for a bare lane."""

    buckets: int
    slots: int
    occupied_slots: int
    load_factor: float
    size_bytes: int
    bits_per_item: float | None
    estimated_fpr: float
    measured_fpr: float | None = None
    resident_items: int | None = None
    owners: int | None = None
    capacity_failures: int | None = None
    inserts: int | None = None
    deletes: int | None = None
    unknown_removals: int | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def lane_stats(
    words: npt.ArrayLike,
    *,
    addressing: CkfAddressing | None = None,
    fpr_probes: int = 0,
    seed: int = 0,
    resident: npt.ArrayLike | None = None,
) -> CkfStats:
    """Stats of one lane of words; with ``addressing`` and ``fpr_probes`` also a measured FPR."""
    arr = np.asarray(words, dtype=np.uint64)
    buckets = int(arr.size)
    slots = buckets * SLOTS_PER_BUCKET
    occupied = lane_occupancy(arr)
    alpha = occupied / slots if slots else 0.0
    measured = None
    if addressing is not None and fpr_probes > 0:
        measured = measured_false_positive_rate(arr, addressing, fpr_probes, seed, resident)
    return CkfStats(
        buckets=buckets,
        slots=slots,
        occupied_slots=occupied,
        load_factor=alpha,
        size_bytes=8 * buckets,
        bits_per_item=(64 * buckets / occupied) if occupied else None,
        estimated_fpr=estimated_false_positive_rate(alpha),
        measured_fpr=measured,
    )


def producer_stats(state: DcCkfState, *, fpr_probes: int = 0, seed: int = 0) -> CkfStats:
    """Stats of a producer: the lane's figures plus ownership and mutation counters."""
    base = lane_stats(
        state.words(),
        addressing=state.addressing,
        fpr_probes=fpr_probes,
        seed=seed,
        resident=state.resident_canonicals(),
    )
    resident = state.resident_count
    return CkfStats(
        buckets=base.buckets,
        slots=base.slots,
        occupied_slots=base.occupied_slots,
        load_factor=base.load_factor,
        size_bytes=base.size_bytes,
        bits_per_item=(64 * base.buckets / resident) if resident else None,
        estimated_fpr=base.estimated_fpr,
        measured_fpr=base.measured_fpr,
        resident_items=resident,
        owners=state.owner_count(),
        capacity_failures=state.capacity_failures,
        inserts=state.table.inserts,
        deletes=state.table.deletes,
        unknown_removals=state.unknown_removals,
    )


def measured_false_positive_rate(
    words: npt.ArrayLike,
    addressing: CkfAddressing,
    probes: int,
    seed: int = 0,
    resident: npt.ArrayLike | None = None,
) -> float:
    """Fraction of random absent u64 hashes whose fingerprint is in either of their buckets."""
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2**64, size=probes, dtype=np.uint64, endpoint=False)
    if resident is not None:
        hashes = hashes[~np.isin(hashes, np.asarray(resident, dtype=np.uint64))]
    if hashes.size == 0:
        return 0.0
    fp, a, b = addressing.prepare_many(hashes)
    arr = np.asarray(words, dtype=np.uint64)
    hit = lane_contains(arr, a, fp) | lane_contains(arr, b, fp)
    return float(np.count_nonzero(hit)) / float(hashes.size)

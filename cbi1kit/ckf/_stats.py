"""Filter statistics in the vocabulary of RedisBloom ``CF.INFO`` / cuckoofilter ``Info()``.

The estimated per-probe false-positive rate is 8α/65534 (ckf.md §5.3): an absent key is compared
with the ≈ 8α occupied slots of its two buckets, and a fingerprint matches with probability
65538/2^32 ≈ 1/65534 (value 1 has double weight because 0 is promoted to 1). The measured rate
probes distinct random hashes that are not resident, and carries its count and interval: a
handful of false positives per 10^5 probes says little without them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import sqrt

import numpy as np
import numpy.typing as npt

from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._bucket import SLOTS_PER_BUCKET, lane_contains, lane_occupancy
from cbi1kit.ckf._producer import DcCkfState

FINGERPRINT_MATCH_PROBABILITY = 65538 / 2**32
_Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile


def estimated_false_positive_rate(load_factor: float) -> float:
    """Per-probe FPR for slot load α: 1 - (1 - p)^(8α), ≈ 8α/65534."""
    return 8 * load_factor * FINGERPRINT_MATCH_PROBABILITY


@dataclass(frozen=True, slots=True)
class FprMeasurement:
    """False positives among distinct absent probes, with a 95 % Wilson score interval.

    Wilson because false positives are rare (a handful per 10^5 probes): the normal
    approximation's interval then dips below zero, and Clopper–Pearson would need beta
    quantiles (scipy) for an interval only slightly wider at these counts.
    """

    false_positives: int
    probes: int

    INTERVAL = "95 % Wilson score interval"

    @property
    def rate(self) -> float:
        """False positives per probe (0 when nothing was probed)."""
        return self.false_positives / self.probes if self.probes else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """(low, high) of the 95 % Wilson score interval; (0, 1) with no probes."""
        n, k = self.probes, self.false_positives
        if n == 0:
            return 0.0, 1.0
        z2 = _Z95 * _Z95
        centre = (k + z2 / 2) / (n + z2)
        half = _Z95 * sqrt(k * (n - k) / n + z2 / 4) / (n + z2)
        return max(0.0, centre - half), min(1.0, centre + half)

    def columns(self) -> dict[str, float | int]:
        """The measurement as table columns (what charts and tables of measured FPR carry)."""
        low, high = self.interval
        return {
            "measured_fpr": self.rate,
            "measured_fpr_low": low,
            "measured_fpr_high": high,
            "false_positives": self.false_positives,
            "fpr_probes": self.probes,
        }

    def against(self, estimate: float) -> str:
        """Where ``estimate`` falls against the interval, in words (for prose that must match)."""
        low, high = self.interval
        if low <= estimate <= high:
            return f"the estimate {estimate:.2e} lies inside the interval: consistent with it"
        side = "below" if estimate < low else "above"
        ratio = f"{self.rate / estimate:.1f}× the estimate" if estimate > 0 else "above zero"
        return f"{ratio}; the estimate {estimate:.2e} lies {side} the interval"

    def __str__(self) -> str:
        low, high = self.interval
        return (
            f"{self.rate:.2e} ({self.false_positives:,} false positives in {self.probes:,} "
            f"distinct absent probes; {self.INTERVAL} {low:.2e} to {high:.2e})"
        )


@dataclass(frozen=True, slots=True)
class CkfStats:
    """``CF.INFO``-style figures; producer-only fields are None for a bare lane, ``fpr`` is None
    unless probed."""

    buckets: int
    slots: int
    occupied_slots: int
    load_factor: float
    size_bytes: int
    bits_per_item: float | None
    estimated_fpr: float
    fpr: FprMeasurement | None = None
    resident_items: int | None = None
    owners: int | None = None
    capacity_failures: int | None = None
    inserts: int | None = None
    deletes: int | None = None
    unknown_removals: int | None = None

    @property
    def measured_fpr(self) -> float | None:
        """The measured false-positive rate, or None unless probed."""
        return None if self.fpr is None else self.fpr.rate

    def as_dict(self) -> dict[str, object]:
        """Flat figures: the measurement as its ``columns()`` (rate, interval, counts)."""
        figures: dict[str, object] = {k: v for k, v in asdict(self).items() if k != "fpr"}
        if self.fpr is not None:
            figures |= self.fpr.columns()
        return figures


def lane_stats(
    words: npt.ArrayLike,
    *,
    addressing: CkfAddressing | None = None,
    fpr_probes: int = 0,
    seed: int = 0,
    resident: npt.ArrayLike | None = None,
) -> CkfStats:
    """Stats of one lane of words; with ``addressing`` and ``fpr_probes`` also a measured FPR
    (``measure_false_positive_rate``)."""
    arr = np.asarray(words, dtype=np.uint64)
    buckets = int(arr.size)
    slots = buckets * SLOTS_PER_BUCKET
    occupied = lane_occupancy(arr)
    alpha = occupied / slots if slots else 0.0
    measured = None
    if addressing is not None and fpr_probes > 0:
        measured = measure_false_positive_rate(arr, addressing, fpr_probes, seed, resident)
    return CkfStats(
        buckets=buckets,
        slots=slots,
        occupied_slots=occupied,
        load_factor=alpha,
        size_bytes=8 * buckets,
        bits_per_item=(64 * buckets / occupied) if occupied else None,
        estimated_fpr=estimated_false_positive_rate(alpha),
        fpr=measured,
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
        fpr=base.fpr,
        resident_items=resident,
        owners=state.owner_count(),
        capacity_failures=state.capacity_failures,
        inserts=state.table.inserts,
        deletes=state.table.deletes,
        unknown_removals=state.unknown_removals,
    )


def measure_false_positive_rate(
    words: npt.ArrayLike,
    addressing: CkfAddressing,
    probes: int,
    seed: int = 0,
    resident: npt.ArrayLike | None = None,
) -> FprMeasurement:
    """How many of ``probes`` seeded random u64 hashes, made distinct and stripped of the
    ``resident`` ones, have their fingerprint in either of their buckets.

    Distinct because a probe repeated is the same trial: counting it again would shrink the
    interval without adding evidence.
    """
    rng = np.random.default_rng(seed)
    hashes = np.unique(rng.integers(0, 2**64, size=probes, dtype=np.uint64, endpoint=False))
    if resident is not None:
        hashes = hashes[~np.isin(hashes, np.asarray(resident, dtype=np.uint64))]
    if hashes.size == 0:
        return FprMeasurement(0, 0)
    fp, a, b = addressing.prepare_many(hashes)
    arr = np.asarray(words, dtype=np.uint64)
    hit = lane_contains(arr, a, fp) | lane_contains(arr, b, fp)
    return FprMeasurement(int(np.count_nonzero(hit)), int(hashes.size))

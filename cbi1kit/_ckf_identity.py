"""Minimal identity values the CKF producer/publisher and consumer compare.

Stand-ins until ``cbi1kit._identity`` lands: the publisher and the lane ingestor only need
equality and a few fields, so these are plain frozen dataclasses over ints. ``pool_id`` is an
opaque int here (upstream it is ``PoolId{indexer_domain, dc_id}``); ``dc_id`` is kept beside it
because CBI1 headers carry it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cbi1kit.errors import Cbi1kitError

__all__ = [
    "CKF_FINGERPRINT_BITS",
    "CKF_FORMAT_VERSION",
    "CKF_SLOTS_PER_BUCKET",
    "MAX_LANES",
    "ConsumerDrainMarker",
    "DcCkfFormatIdentity",
    "FormatIdentityError",
    "LaneLease",
    "ProducerIdentity",
]

CKF_FORMAT_VERSION = 1
CKF_FINGERPRINT_BITS = 16
CKF_SLOTS_PER_BUCKET = 4
MAX_LANES = 16


class FormatIdentityError(Cbi1kitError, ValueError):
    """A format identity upstream's ``DcCkfFormatIdentity::try_from_parts`` would reject."""

    def __init__(self, field: str, value: int, reason: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"invalid CKF format: {field}={value}: {reason}")


@dataclass(frozen=True, slots=True)
class DcCkfFormatIdentity:
    """What a consumer must agree on to read a producer's words (field order as upstream)."""

    seed: int
    bucket_count: int
    format_version: int = CKF_FORMAT_VERSION
    fingerprint_bits: int = CKF_FINGERPRINT_BITS
    slots_per_bucket: int = CKF_SLOTS_PER_BUCKET

    def __post_init__(self) -> None:
        if self.bucket_count < 2 or self.bucket_count & (self.bucket_count - 1):
            raise FormatIdentityError("bucket_count", self.bucket_count, "power of two >= 2")
        if self.format_version != CKF_FORMAT_VERSION:
            raise FormatIdentityError("format_version", self.format_version, "must be 1")
        if self.fingerprint_bits != CKF_FINGERPRINT_BITS:
            raise FormatIdentityError("fingerprint_bits", self.fingerprint_bits, "must be 16")
        if self.slots_per_bucket != CKF_SLOTS_PER_BUCKET:
            raise FormatIdentityError("slots_per_bucket", self.slots_per_bucket, "must be 4")


@dataclass(frozen=True, slots=True)
class ProducerIdentity:
    """One producer generation: pool, incarnation, layout generation and format."""

    pool_id: int
    producer_incarnation: int
    layout_generation: int
    format: DcCkfFormatIdentity
    dc_id: int = 0


@dataclass(frozen=True, slots=True)
class LaneLease:
    """A consumer's claim on one physical lane, ordered by ``assignment_epoch``."""

    consumer_instance: int
    physical_lane: int
    assignment_epoch: int

    def __post_init__(self) -> None:
        if not 0 <= self.physical_lane < MAX_LANES:
            raise FormatIdentityError("physical_lane", self.physical_lane, "must be in 0..16")


@dataclass(frozen=True, slots=True)
class ConsumerDrainMarker:
    """ "Everything up to ``expected_sequence`` has been published under ``lease``"."""

    lease: LaneLease
    expected_sequence: int

"""CBI1 constants and the filter format a stream is bound to.

Every number here is upstream's (``lib/llm/src/kv_dc_relay/publication/cbi1.rs``); the golden
vectors pin them. ``FilterFormat`` is the pair a consumer checks every frame against: the CKF
xxh3 seed and the lane's bucket count.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from cbi1kit.errors import Cbi1Error, Cbi1Variant

MAGIC = b"CBI1"
LEGACY_MAGIC = b"CKF1"
WIRE_VERSION = 1
HEADER_LEN = 48
FINGERPRINT_BITS = 16
SLOTS_PER_BUCKET = 4
FORMAT_VERSION = 1
SNAPSHOT_CHUNK_BUCKETS = 512 * 1024
MAX_BUCKET_COUNT = 1 << 24
DELTA_BODY_PREFIX = 12
SNAPSHOT_BODY_PREFIX = 16
IMAGE_BYTES = 12
WORD_BYTES = 8
IMAGES_MAX_FRAME_BYTES = HEADER_LEN + SNAPSHOT_BODY_PREFIX + SNAPSHOT_CHUNK_BUCKETS * WORD_BYTES
#: A frame's header and longer body prefix: CBI1 has no length field, its length follows from these
FRAME_HEAD_BYTES = HEADER_LEN + max(DELTA_BODY_PREFIX, SNAPSHOT_BODY_PREFIX)
U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1


class FixedField(NamedTuple):
    """A header field of one valid value: its name, the value, what an error calls it, and the
    ``Format`` subvariant a wrong value raises."""

    name: str
    value: int
    what: str
    subvariant: str


#: The header's fixed fields in upstream's check order (decode, the hex view, Kaitai, Wireshark).
FIXED_FIELDS = (
    FixedField("format_version", FORMAT_VERSION, "CKF format version", "Version"),
    FixedField("fingerprint_bits", FINGERPRINT_BITS, "fingerprint width", "FingerprintBits"),
    FixedField("slots_per_bucket", SLOTS_PER_BUCKET, "slots per bucket", "SlotsPerBucket"),
)


def max_delta_images() -> int:
    """Largest image count a delta may carry: a delta never outgrows a full snapshot chunk."""
    return (IMAGES_MAX_FRAME_BYTES - HEADER_LEN - DELTA_BODY_PREFIX) // IMAGE_BYTES


class FrameKind(enum.IntEnum):
    """The header ``flags`` value, which says what the body holds."""

    SNAPSHOT_CHUNK = 1
    DELTA = 2


def _check_u64(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= U64_MAX:
        raise OverflowError(f"{name} {value} is outside the unsigned 64-bit range")


@dataclass(frozen=True, slots=True, kw_only=True)
class FilterFormat:
    """The CKF a lane is built with: xxh3 ``seed`` and ``bucket_count`` (a power of two).

    Construction validates like upstream ``FilterFormat::new``: a power of two in ``2..=2**24``,
    else ``Cbi1Error`` ``Format(BucketCount)``. ``FilterFormat.unchecked`` skips that check, as
    upstream's struct literal can; ``decode`` never re-checks it.
    """

    seed: int
    bucket_count: int

    def __post_init__(self) -> None:
        _check_u64("seed", self.seed)
        _check_u64("bucket_count", self.bucket_count)
        n = self.bucket_count
        if not (2 <= n <= MAX_BUCKET_COUNT and n & (n - 1) == 0):
            raise Cbi1Error(
                Cbi1Variant.Format,
                f"got {n}",
                subvariant="BucketCount",
                field="FilterFormat.bucket_count",
                expected=f"power of two in 2..={MAX_BUCKET_COUNT}",
                actual=n,
            )

    @classmethod
    def unchecked(cls, *, seed: int, bucket_count: int) -> FilterFormat:
        """A format that skips the power-of-two check (u64 ranges still hold)."""
        _check_u64("seed", seed)
        _check_u64("bucket_count", bucket_count)
        fmt = object.__new__(cls)
        object.__setattr__(fmt, "seed", seed)
        object.__setattr__(fmt, "bucket_count", bucket_count)
        return fmt

    @property
    def chunk_count(self) -> int:
        """How many snapshot chunks a full lane of this format takes."""
        return -(-self.bucket_count // SNAPSHOT_CHUNK_BUCKETS)

    def __repr__(self) -> str:
        return f"FilterFormat(seed=0x{self.seed:x}, bucket_count={self.bucket_count})"

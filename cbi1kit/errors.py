"""Every error cbi1kit raises, in one place.

``Cbi1kitError`` is the root. ``Cbi1Error`` and its subclasses mirror the upstream Rust
``Cbi1Error`` variants one for one, so a test can ask for exactly the variant upstream would
return; each also subclasses ``ValueError`` (bad bytes are bad values) and, for ``Truncated``,
``EOFError``. Every instance carries where it was detected (``offset``, ``field``) and what was
expected against what was found, and its message says all of it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BucketCountError",
    "BucketIndexError",
    "Cbi1Error",
    "Cbi1kitError",
    "ChecksumError",
    "ChunkSequenceError",
    "DeltaImageCountError",
    "FingerprintBitsError",
    "FlagsError",
    "FormatError",
    "FormatMismatchError",
    "FormatVersionError",
    "FrameTooLargeError",
    "IncompleteCoverageError",
    "InvalidImageError",
    "LegacyFrameError",
    "MagicError",
    "MalformedError",
    "SlotsPerBucketError",
    "SnapshotBucketCountError",
    "SnapshotChunkWordCountError",
    "TruncatedError",
    "WireVersionError",
]


def _show(value: Any) -> str:
    """Integers in hex and decimal (exact u64), everything else as repr."""
    if isinstance(value, bool) or not isinstance(value, int):
        return repr(value)
    if 0 <= value < 10:
        return str(value)
    return f"0x{value:x} ({value})"


class Cbi1kitError(Exception):
    """Root of every error this package raises on purpose."""


class Cbi1Error(Cbi1kitError, ValueError):
    """A CBI1 frame (or an encoder input) that upstream's codec would reject.

    ``variant`` is the upstream ``Cbi1Error`` variant name; ``offset`` the byte offset in the
    frame where the problem was found (``None`` for encoder-side and assembly errors that are
    not about one byte); ``field`` the dotted field path (``header.body_checksum``,
    ``delta.images[3].bucket``); ``expected`` / ``actual`` the values compared.
    """

    variant: str = "Cbi1Error"
    summary: str = "CBI1 error"

    def __init__(
        self,
        detail: str | None = None,
        *,
        offset: int | None = None,
        field: str | None = None,
        expected: Any = None,
        actual: Any = None,
    ) -> None:
        self.offset = offset
        self.field = field
        self.expected = expected
        self.actual = actual
        self.detail = detail
        super().__init__(self._message())

    @property
    def value(self) -> Any:
        """The offending value (upstream's tuple-variant payload, e.g. ``WireVersion(2)``)."""
        return self.actual

    @property
    def maximum(self) -> Any:
        """The bound that was exceeded, for the count and size variants."""
        return self.expected

    def _message(self) -> str:
        where = ""
        if self.field is not None:
            where = f" at {self.field}"
            if self.offset is not None:
                where += f" (offset {self.offset})"
        elif self.offset is not None:
            where = f" at offset {self.offset}"
        text = f"{self.summary}{where}"
        if self.detail:
            text += f": {self.detail}"
        elif self.expected is not None or self.actual is not None:
            text += f": expected {_show(self.expected)}, got {_show(self.actual)}"
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        kwargs = {
            "offset": self.offset,
            "field": self.field,
            "expected": self.expected,
            "actual": self.actual,
        }
        return (_rebuild, (type(self), self.detail, kwargs))


def _rebuild(cls: type[Cbi1Error], detail: str | None, kwargs: dict[str, Any]) -> Cbi1Error:
    return cls(detail, **kwargs)


class TruncatedError(Cbi1Error, EOFError):
    """Fewer bytes than the 48-byte header (upstream ``Truncated``)."""

    variant = "Truncated"
    summary = "frame shorter than the CBI1 header"


class FrameTooLargeError(Cbi1Error):
    """More bytes than ``IMAGES_MAX_FRAME_BYTES`` (upstream ``FrameTooLarge``)."""

    variant = "FrameTooLarge"
    summary = "CBI1 frame exceeds the maximum size"


class MagicError(Cbi1Error):
    """The first four bytes are not ``CBI1`` (upstream ``Magic``)."""

    variant = "Magic"
    summary = "bad CBI1 magic"


class LegacyFrameError(MagicError):
    """A prototype ``CKF1`` frame: a different generation, recognised so it is not misread."""

    summary = "not a CBI1 frame: this is a legacy CKF1 prototype frame"


class WireVersionError(Cbi1Error):
    """Wire version other than 1 (upstream ``WireVersion``)."""

    variant = "WireVersion"
    summary = "unsupported CBI1 wire version"


class FlagsError(Cbi1Error):
    """Flags other than 1 (snapshot chunk) or 2 (delta) (upstream ``Flags``)."""

    variant = "Flags"
    summary = "unknown CBI1 frame flags"


class ChecksumError(Cbi1Error):
    """Body checksum differs from the header's (upstream ``Checksum``)."""

    variant = "Checksum"
    summary = "checksum mismatch"


class MalformedError(Cbi1Error):
    """A body whose lengths or indices do not add up (upstream ``Malformed``)."""

    variant = "Malformed"
    summary = "CBI1 frame body is malformed"


class FormatError(Cbi1Error):
    """The frame's filter format is not the one expected (upstream ``Format(..)``)."""

    variant = "Format"
    summary = "CKF format error"
    format_variant: str = "Format"


class FormatVersionError(FormatError):
    format_variant = "Version"
    summary = "unsupported CKF format version"


class FingerprintBitsError(FormatError):
    format_variant = "FingerprintBits"
    summary = "unsupported fingerprint width"


class SlotsPerBucketError(FormatError):
    format_variant = "SlotsPerBucket"
    summary = "unsupported slots per bucket"


class FormatMismatchError(FormatError):
    """``expected`` is the consumer's ``FilterFormat``; ``actual`` the frame's (seed, buckets)."""

    format_variant = "Mismatch"
    summary = "format mismatch"

    @property
    def seed(self) -> int:
        return int(self.actual[0])

    @property
    def buckets(self) -> int:
        return int(self.actual[1])


class BucketCountError(FormatError):
    format_variant = "BucketCount"
    summary = "bucket count is not a power of two in 2..=16777216"


class DeltaImageCountError(Cbi1Error):
    variant = "DeltaImageCount"
    summary = "delta has more images than the CBI1 maximum"


class SnapshotChunkWordCountError(Cbi1Error):
    variant = "SnapshotChunkWordCount"
    summary = "snapshot chunk has more words than the CBI1 maximum"


class BucketIndexError(Cbi1Error):
    """Encoder input: ``actual`` is the bucket, ``expected`` the lane's bucket count."""

    variant = "BucketIndex"
    summary = "bucket index outside the declared lane"

    @property
    def bucket(self) -> int:
        return int(self.actual)

    @property
    def bucket_count(self) -> int:
        return int(self.expected)


class InvalidImageError(Cbi1Error):
    """Encoder input that no u32 bucket / u64 word can hold (Rust's types rule this out)."""

    variant = "InvalidImage"
    summary = "delta image is not a (u32 bucket, u64 word) pair"


class SnapshotBucketCountError(Cbi1Error):
    variant = "SnapshotBucketCount"
    summary = "snapshot lane length differs from the format's bucket count"


class ChunkSequenceError(Cbi1Error):
    variant = "ChunkSequence"
    summary = "snapshot chunk sequence violation"


class IncompleteCoverageError(Cbi1Error):
    variant = "IncompleteCoverage"
    summary = "snapshot chunks do not cover the lane"

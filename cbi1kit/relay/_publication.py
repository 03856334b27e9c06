"""The relay's transport-independent publication envelope around CBI1 payloads.

Mirrors upstream ``lib/llm/src/kv_dc_relay/publication/codec.rs``: a snapshot becomes exact-size
chunk frames, a delta one delta frame, both after a format-identity gate (CBI1 carries only
``(format_version 1, 16-bit fingerprints, 4 slots)``). Heartbeats come from the gRPC driver
(``cbi1kit.relay._messages.heartbeat_update``). Inputs are duck-typed (``DcCkfSnapshot``,
``DcCkfDelta``, ``HubSnapshot``: an ``identity``, ``sequence`` and lane words or images); their
format may be any shape (``DcCkfFormatIdentity.unchecked``), and the gate refuses the rest.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from cbi1kit.errors import Cbi1Error, Cbi1Variant, PublicationError, PublicationVariant
from cbi1kit.hashing._identity import DcCkfFormatIdentity, LaneLease, ProducerIdentity
from cbi1kit.wire._encode import (
    SnapshotChunks,
    encode_delta as _encode_delta_payload,
    encode_snapshot_chunks,
)
from cbi1kit.wire._format import (
    FINGERPRINT_BITS,
    FORMAT_VERSION,
    SLOTS_PER_BUCKET,
    SNAPSHOT_CHUNK_BUCKETS,
    FilterFormat,
)
from cbi1kit.wire._frames import IMAGE_DTYPE

if TYPE_CHECKING:
    from cbi1kit.ckf._lane import DcCkfDelta, DcCkfSnapshot

#: Bytes reserved per queued frame on top of the payload, so per-subscriber byte budgets
#: also bound the protobuf/gRPC framing around it (upstream ``queued_bytes``).
ENVELOPE_HEADROOM_BYTES: Final = 256
_U32_MAX: Final = (1 << 32) - 1


def _unsupported_format(fmt: DcCkfFormatIdentity) -> PublicationError:
    """Upstream ``UnsupportedFormatIdentity``: the CKF shape is not the one CBI1 carries."""
    return PublicationError(
        PublicationVariant.UnsupportedFormatIdentity,
        message="unsupported CKF format identity: "
        f"version={fmt.format_version}, fingerprint_bits={fmt.fingerprint_bits}, "
        f"slots_per_bucket={fmt.slots_per_bucket} (CBI1 carries version={FORMAT_VERSION}, "
        f"fingerprint_bits={FINGERPRINT_BITS}, slots_per_bucket={SLOTS_PER_BUCKET})",
        field="identity.format",
        format_version=fmt.format_version,
        fingerprint_bits=fmt.fingerprint_bits,
        slots_per_bucket=fmt.slots_per_bucket,
    )


def _wrapped(error: Cbi1Error) -> PublicationError:
    """The codec's error as upstream's adapter returns it: ``Format(..)`` for the format,
    ``Wire(..)`` for the encoder; the codec's error stays the ``__cause__``."""
    fmt = error.variant is Cbi1Variant.Format
    return PublicationError(
        PublicationVariant.Format if fmt else PublicationVariant.Wire,
        subvariant=error.subvariant if fmt else str(error.variant),
        message=str(error),
        field=error.field,
        expected=error.expected,
        actual=error.actual,
    )


def _bucket_index_overflow(bucket: int, image_index: int) -> PublicationError:
    """Upstream ``BucketIndexOverflow``: a delta bucket index that does not fit CBI1's u32."""
    return PublicationError(
        PublicationVariant.BucketIndexOverflow,
        message=f"delta image {image_index}: bucket index {bucket} exceeds the CBI1 u32 "
        "address space",
        field=f"images[{image_index}].bucket",
        actual=bucket,
        bucket=bucket,
        image_index=image_index,
    )


class PublicationFrameKind(enum.Enum):
    """Snapshot bootstrap vs live delta, distinguishable without decoding CBI1."""

    SNAPSHOT_CHUNK = "SnapshotChunk"
    DELTA = "Delta"


@dataclass(frozen=True, slots=True)
class PublicationFrame:
    """One canonical frame for one producer generation; ``payload`` is opaque CBI1 bytes."""

    identity: ProducerIdentity
    base_sequence: int
    sequence: int
    kind: PublicationFrameKind
    payload: bytes = field(repr=False)

    @property
    def queued_bytes(self) -> int:
        """Budget a subscriber queue charges for this frame: payload plus envelope headroom."""
        return len(self.payload) + ENVELOPE_HEADROOM_BYTES


@dataclass(frozen=True, slots=True, eq=False)
class HubSnapshot:
    """The publication hub's full-lane mirror at ``sequence`` (upstream ``HubSnapshot``)."""

    identity: ProducerIdentity
    sequence: int
    buckets: npt.NDArray[np.uint64]
    lease: LaneLease | None = None


def filter_format(fmt: DcCkfFormatIdentity) -> FilterFormat:
    """The format gate: only CBI1's shape passes; the bucket count is checked by ``FilterFormat``.

    Raises ``PublicationError`` ``UnsupportedFormatIdentity``, or ``Format(BucketCount)`` for a
    bucket count that is not a power of two in ``2..=2**24``.
    """
    if (
        fmt.format_version != FORMAT_VERSION
        or fmt.fingerprint_bits != FINGERPRINT_BITS
        or fmt.slots_per_bucket != SLOTS_PER_BUCKET
    ):
        raise _unsupported_format(fmt)
    try:
        return FilterFormat(seed=fmt.seed, bucket_count=fmt.bucket_count)
    except Cbi1Error as exc:
        raise _wrapped(exc) from exc


class SnapshotFrames(Iterator[PublicationFrame]):
    """Exact-size iterator of a snapshot's chunk frames, each encoded when it is pulled.

    ``len()`` is the number of frames still to come (Rust's ``ExactSizeIterator``), so a driver
    can count remaining chunks without encoding 4 MiB frames ahead of time.
    """

    __slots__ = ("_chunks", "_identity", "_next", "_sequence")

    def __init__(self, identity: ProducerIdentity, sequence: int, chunks: SnapshotChunks) -> None:
        self._identity = identity
        self._sequence = sequence
        self._chunks = chunks
        self._next = 0

    @property
    def chunk_count(self) -> int:
        """How many CBI1 chunks the snapshot was cut into."""
        return len(self._chunks)

    def __len__(self) -> int:
        return len(self._chunks) - self._next

    def __length_hint__(self) -> int:
        return len(self)

    def __iter__(self) -> SnapshotFrames:
        return self

    def __next__(self) -> PublicationFrame:
        if self._next >= len(self._chunks):
            raise StopIteration
        payload = self._chunks[self._next]
        self._next += 1
        return PublicationFrame(
            identity=self._identity,
            base_sequence=self._sequence,
            sequence=self._sequence,
            kind=PublicationFrameKind.SNAPSHOT_CHUNK,
            payload=payload,
        )


def encode_snapshot_publication(hub_snapshot: HubSnapshot | DcCkfSnapshot) -> SnapshotFrames:
    """A snapshot as ``ceil(bucket_count / 524288)`` chunk frames, all with ``base == sequence``.

    The gate, then the lane length (``SnapshotBucketCount``), raise here before any frame, as
    upstream. The frames hold a private read-only copy of the lane (chunks encode when pulled;
    upstream's ``HubSnapshot`` buffer is immutable), so the caller may reuse its array.
    """
    identity: ProducerIdentity = hub_snapshot.identity
    fmt = filter_format(identity.format)
    words = np.asarray(hub_snapshot.buckets)
    if words.ndim != 1 or words.shape[0] != fmt.bucket_count:
        raise PublicationError(
            PublicationVariant.SnapshotBucketCount,
            message=f"snapshot has {words.size} buckets, format declares {fmt.bucket_count}",
            field="buckets",
            expected=fmt.bucket_count,
            actual=int(words.size),
        )
    words = words.copy()  # once, before any frame: the lazy chunks read this, never the caller's
    words.flags.writeable = False
    sequence = int(hub_snapshot.sequence)
    chunks = encode_snapshot_chunks(fmt, int(identity.dc_id), sequence, words)
    assert len(chunks) == -(-fmt.bucket_count // SNAPSHOT_CHUNK_BUCKETS)
    return SnapshotFrames(hub_snapshot.identity, sequence, chunks)


def _delta_images(delta: Any) -> npt.NDArray[np.void]:
    """The delta's images as CBI1's packed dtype, refusing indices beyond u32 (not wrapping)."""
    buckets = getattr(delta, "buckets", None)
    values = getattr(delta, "values", None)
    if buckets is not None and values is not None:
        b = np.asarray(buckets)
        if b.dtype.kind in "ui" and b.size:
            over = np.flatnonzero((b > _U32_MAX) | (b < 0))
            if over.size:
                i = int(over[0])
                raise _bucket_index_overflow(int(b[i]), i)
        out = np.empty(b.shape[0], dtype=IMAGE_DTYPE)
        out["bucket"] = b
        out["word"] = np.asarray(values, dtype=np.uint64)
        return out
    images = delta.images
    pairs: Sequence[tuple[int, int]] = list(images() if callable(images) else images)
    out = np.empty(len(pairs), dtype=IMAGE_DTYPE)
    for i, (bucket, word) in enumerate(pairs):
        if not 0 <= bucket <= _U32_MAX:
            raise _bucket_index_overflow(int(bucket), i)
        out[i] = (bucket, word)
    return out


def encode_delta_publication(delta: DcCkfDelta) -> PublicationFrame:
    """One delta frame ``base_sequence -> sequence`` carrying the delta's absolute images.

    Gate, then u32 overflow of any bucket index, then the CBI1 encoder's own checks
    (``Wire(DeltaImageCount)``, ``Wire(BucketIndex)``), in upstream's order.
    """
    identity: ProducerIdentity = delta.identity
    fmt = filter_format(identity.format)
    images = _delta_images(delta)
    base, seq = int(delta.base_sequence), int(delta.sequence)
    try:
        payload = _encode_delta_payload(fmt, int(identity.dc_id), base, seq, images)
    except Cbi1Error as exc:
        raise _wrapped(exc) from exc
    return PublicationFrame(
        identity=delta.identity,
        base_sequence=base,
        sequence=seq,
        kind=PublicationFrameKind.DELTA,
        payload=payload,
    )

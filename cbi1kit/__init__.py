"""cbi1kit: see inside NVIDIA Dynamo's KV-cache filter stream.

The public API, in data-flow order. Everything here is importable from ``cbi1kit`` directly;
the underscore modules behind it are private and may move.
"""

from __future__ import annotations

from cbi1kit import errors
from cbi1kit._assembly import AssembledSnapshot, SnapshotAssembly
from cbi1kit._format import (
    FINGERPRINT_BITS,
    FORMAT_VERSION,
    HEADER_LEN,
    IMAGES_MAX_FRAME_BYTES,
    MAX_BUCKET_COUNT,
    SLOTS_PER_BUCKET,
    SNAPSHOT_CHUNK_BUCKETS,
    WIRE_VERSION,
    FilterFormat,
    FrameKind,
    max_delta_images,
)
from cbi1kit._inspect import AnnotatedHexdump, Inspection, Problem, inspect
from cbi1kit._layout import DELTA_IMAGE, DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX, FieldSpec, Layout
from cbi1kit._wire import (
    IMAGE_DTYPE,
    Delta,
    Frame,
    FrameHeader,
    SnapshotChunk,
    SnapshotChunks,
    body_checksum,
    decode,
    encode_delta,
    encode_snapshot_chunk,
    encode_snapshot_chunks,
    peek_format,
)

__version__ = "0.1.0"

__all__ = [
    "DELTA_IMAGE",
    "DELTA_PREFIX",
    "FINGERPRINT_BITS",
    "FORMAT_VERSION",
    "HEADER",
    "HEADER_LEN",
    "IMAGES_MAX_FRAME_BYTES",
    "IMAGE_DTYPE",
    "MAX_BUCKET_COUNT",
    "SLOTS_PER_BUCKET",
    "SNAPSHOT_CHUNK_BUCKETS",
    "SNAPSHOT_PREFIX",
    "WIRE_VERSION",
    "AnnotatedHexdump",
    "AssembledSnapshot",
    "Delta",
    "FieldSpec",
    "FilterFormat",
    "Frame",
    "FrameHeader",
    "FrameKind",
    "Inspection",
    "Layout",
    "Problem",
    "SnapshotAssembly",
    "SnapshotChunk",
    "SnapshotChunks",
    "body_checksum",
    "decode",
    "encode_delta",
    "encode_snapshot_chunk",
    "encode_snapshot_chunks",
    "errors",
    "inspect",
    "max_delta_images",
    "peek_format",
]

"""CBI1 frames: the format constants, the byte layout as data, encode/decode, snapshot assembly and
the annotated hex view, and the consumer's per-message rulebook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import attach

if TYPE_CHECKING:
    from cbi1kit.wire._assembly import (
        AssembledSnapshot as AssembledSnapshot,
        SnapshotAssembly as SnapshotAssembly,
    )
    from cbi1kit.wire._codec import (
        DeltaBatch as DeltaBatch,
        decode as decode,
        decode_deltas as decode_deltas,
        peek_format as peek_format,
    )
    from cbi1kit.wire._encode import (
        encode_delta as encode_delta,
        encode_snapshot_chunks as encode_snapshot_chunks,
    )
    from cbi1kit.wire._format import (
        IMAGES_MAX_FRAME_BYTES as IMAGES_MAX_FRAME_BYTES,
        MAGIC as MAGIC,
        MAX_BUCKET_COUNT as MAX_BUCKET_COUNT,
        SNAPSHOT_CHUNK_BUCKETS as SNAPSHOT_CHUNK_BUCKETS,
        FilterFormat as FilterFormat,
        FrameKind as FrameKind,
        max_delta_images as max_delta_images,
    )
    from cbi1kit.wire._frames import (
        Delta as Delta,
        Frame as Frame,
        FrameHeader as FrameHeader,
        SnapshotChunk as SnapshotChunk,
        body_checksum as body_checksum,
    )
    from cbi1kit.wire._inspect import Inspection as Inspection, inspect as inspect
    from cbi1kit.wire._layout import (
        HEADER as HEADER,
        Layout as Layout,
        layout_markdown as layout_markdown,
        layout_rows as layout_rows,
    )
    from cbi1kit.wire._rules import RULES as RULES, Rule as Rule, rule_for as rule_for
else:
    __getattr__, __dir__, __all__ = attach(__name__, __file__)

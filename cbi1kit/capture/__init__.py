"""The kvrcap capture file and the readers for captures, grpcurl JSON dumps and bare CBI1 frames."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import attach

if TYPE_CHECKING:
    from cbi1kit.capture._file import CaptureRecord as CaptureRecord
    from cbi1kit.capture._items import (
        CaptureItem as CaptureItem,
        CatalogRecord as CatalogRecord,
        FrameRecord as FrameRecord,
        ReadinessRecord as ReadinessRecord,
    )
    from cbi1kit.capture._layout import RecordType as RecordType
    from cbi1kit.capture._reader import CaptureReader as CaptureReader
    from cbi1kit.capture._readers import (
        read_capture as read_capture,
        read_capture_items as read_capture_items,
        read_catalog as read_catalog,
        read_cbi1_files as read_cbi1_files,
        read_frames as read_frames,
        read_grpcurl_json as read_grpcurl_json,
        write_grpcurl_json as write_grpcurl_json,
    )
    from cbi1kit.capture._rotating import RotatingCaptureWriter as RotatingCaptureWriter
    from cbi1kit.capture._segments import (
        CaptureSet as CaptureSet,
        capture_segments as capture_segments,
    )
    from cbi1kit.capture._writer import CaptureWriter as CaptureWriter
else:
    __getattr__, __dir__, __all__ = attach(__name__, __file__)

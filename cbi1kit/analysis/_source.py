"""What a source is: every path into analysis/ starts from one (``docs/data-path.md``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._items import FrameRecord
from cbi1kit.capture._segments import CaptureSet

#: what ``cbi1kit.open`` takes: a capture (a kvrcap file, a rotated recording's first segment, a
#: ``CaptureSet`` or a list of segment paths), a grpcurl JSON dump, a bare CBI1 frame file, or
#: messages (``FilterUpdate`` values or ``FrameRecord`` items)
Source = (
    str
    | os.PathLike[str]
    | CaptureSet
    | Sequence[str | os.PathLike[str]]
    | Iterable[FrameRecord | pb.FilterUpdate]
)

"""The kvrcap capture file (and rotated recordings: segment sets read as one capture) and the
readers for captures, grpcurl JSON dumps and bare CBI1 frames."""

from __future__ import annotations

from cbi1kit.capture import _file, _readers, _segments, _streams
from cbi1kit.capture._file import *  # noqa: F403
from cbi1kit.capture._readers import *  # noqa: F403
from cbi1kit.capture._segments import *  # noqa: F403
from cbi1kit.capture._streams import *  # noqa: F403

__all__: list[str] = []
__all__ += _file.__all__
__all__ += _segments.__all__
__all__ += _readers.__all__
__all__ += _streams.__all__

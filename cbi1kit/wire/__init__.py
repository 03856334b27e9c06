"""CBI1 frames: the format constants, the byte layout as data, encode/decode, snapshot assembly and
the annotated hex view, and the consumer's per-message rulebook.
"""

from __future__ import annotations

from cbi1kit.wire import _assembly, _codec, _format, _inspect, _layout, _rules
from cbi1kit.wire._assembly import *  # noqa: F403
from cbi1kit.wire._codec import *  # noqa: F403
from cbi1kit.wire._format import *  # noqa: F403
from cbi1kit.wire._inspect import *  # noqa: F403
from cbi1kit.wire._layout import *  # noqa: F403
from cbi1kit.wire._rules import *  # noqa: F403

__all__: list[str] = []
__all__ += _format.__all__
__all__ += _layout.__all__
__all__ += _codec.__all__
__all__ += _assembly.__all__
__all__ += _inspect.__all__
__all__ += _rules.__all__

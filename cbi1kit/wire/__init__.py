"""CBI1 frames: the format constants, the byte layout as data, encode/decode, snapshot assembly and
the annotated hex view, and the consumer's per-message rulebook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_stage

if TYPE_CHECKING:
    from cbi1kit.wire._assembly import *  # noqa: F403
    from cbi1kit.wire._codec import *  # noqa: F403
    from cbi1kit.wire._format import *  # noqa: F403
    from cbi1kit.wire._inspect import *  # noqa: F403
    from cbi1kit.wire._layout import *  # noqa: F403
    from cbi1kit.wire._rules import *  # noqa: F403

#: the modules whose ``__all__`` is this stage's surface, in order; each loads on first use
MODULES = ("_format", "_layout", "_codec", "_assembly", "_inspect", "_rules")
__getattr__, __dir__ = lazy_stage(__name__, MODULES)

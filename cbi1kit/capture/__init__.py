"""The kvrcap capture file and the readers for captures, grpcurl JSON dumps and bare CBI1 frames."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_stage

if TYPE_CHECKING:
    from cbi1kit.capture._file import *  # noqa: F403
    from cbi1kit.capture._readers import *  # noqa: F403
    from cbi1kit.capture._segments import *  # noqa: F403
    from cbi1kit.capture._streams import *  # noqa: F403

#: the modules whose ``__all__`` is this stage's surface, in order; each loads on first use
MODULES = ("_file", "_readers", "_streams", "_segments")
__getattr__, __dir__ = lazy_stage(__name__, MODULES)

"""The relay: upstream's publication adapter (CKF snapshots and deltas to CBI1 frames), the
dynamo.kvrelay.v1 message contract, the gRPC transport's settings (TLS, headers, keepalive), and
the recorder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_stage

if TYPE_CHECKING:
    from cbi1kit.relay._messages import *  # noqa: F403
    from cbi1kit.relay._publication import *  # noqa: F403
    from cbi1kit.relay._recorder import *  # noqa: F403
    from cbi1kit.relay._stream import *  # noqa: F403
    from cbi1kit.relay._transport import *  # noqa: F403

#: the modules whose ``__all__`` is this stage's surface, in order; each loads on first use
MODULES = ("_publication", "_messages", "_stream", "_transport", "_recorder")
__getattr__, __dir__ = lazy_stage(__name__, MODULES)

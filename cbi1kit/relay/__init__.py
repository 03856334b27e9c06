"""The relay: upstream's publication adapter (CKF snapshots and deltas to CBI1 frames), the
dynamo.kvrelay.v1 message contract, the gRPC transport's settings (TLS, headers, keepalive), and
the recorder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_getattr, lazy_names
from cbi1kit.relay import _messages, _publication, _stream, _transport
from cbi1kit.relay._messages import *  # noqa: F403
from cbi1kit.relay._publication import *  # noqa: F403
from cbi1kit.relay._stream import *  # noqa: F403
from cbi1kit.relay._transport import *  # noqa: F403

if TYPE_CHECKING:
    from cbi1kit.relay._recorder import *  # noqa: F403

# altair and grpc load on first use; the names are each module's __all__ (a test checks)
_RECORDER = (
    "CATALOG_METHOD",
    "PLANES",
    "POOL_LOAD_METHOD",
    "READINESS_METHOD",
    "RELAY_INFO_METHOD",
    "SERVING_LOAD_METHOD",
    "SUBSCRIBE_METHOD",
    "WITHHELD",
    "Action",
    "CloseInfo",
    "Plane",
    "PoolRecord",
    "PoolSelector",
    "RecordReport",
    "Recorder",
    "RecorderConfig",
    "classify_close",
    "describe_pool",
    "pool_key_text",
    "pool_label",
    "producer_key_text",
)
_LAZY = {**lazy_names("_recorder", _RECORDER)}

__all__: list[str] = []
__all__ += _publication.__all__
__all__ += _messages.__all__
__all__ += _stream.__all__
__all__ += _transport.__all__
__all__ += _RECORDER  # noqa: PLE0605 (a tuple of str, defined above)

__getattr__ = lazy_getattr(__name__, _LAZY)

"""The relay: upstream's publication adapter (CKF snapshots and deltas to CBI1 frames), the
dynamo.kvrelay.v1 message contract, the gRPC transport's settings (TLS, headers, keepalive), and
the recorder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import attach

if TYPE_CHECKING:
    from cbi1kit.relay._messages import (
        PoolCatalog as PoolCatalog,
        PoolDescriptor as PoolDescriptor,
        filter_update_from_frame as filter_update_from_frame,
        frame_from_filter_update as frame_from_filter_update,
    )
    from cbi1kit.relay._publication import (
        HubSnapshot as HubSnapshot,
        PublicationFrame as PublicationFrame,
        PublicationFrameKind as PublicationFrameKind,
        encode_delta_publication as encode_delta_publication,
        encode_snapshot_publication as encode_snapshot_publication,
    )
    from cbi1kit.relay._recorder import Recorder as Recorder
    from cbi1kit.relay._session import (
        PoolSelector as PoolSelector,
        RecorderConfig as RecorderConfig,
        RecordReport as RecordReport,
    )
    from cbi1kit.relay._stream import StreamChecker as StreamChecker
    from cbi1kit.relay._transport import ClientTls as ClientTls, ServerTls as ServerTls
else:
    __getattr__, __dir__, __all__ = attach(__name__, __file__)

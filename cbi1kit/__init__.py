"""cbi1kit: see inside NVIDIA Dynamo's KV-cache filter stream.

The front door holds what a notebook user types, in data-flow order; every stage is also a
subpackage with its whole public surface (``ck.wire``, ``ck.ckf``, ``ck.viz`` ...):

    hashing -> wire -> ckf -> capture -> relay -> analysis -> sim -> viz

Errors are a few families in :mod:`cbi1kit.errors`, each naming upstream's variant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_getattr

if TYPE_CHECKING:
    from cbi1kit import analysis, capture, ckf, errors, fleet, hashing, relay, sim, viz, wire
    from cbi1kit.analysis import (
        Capture,
        diff,
        explain,
        export_dataset,
        export_parquet,
        frames_table,
        global_view,
        images_table,
        occupancy_table,
        open_dataset,
        replay,
        snapshots_table,
    )
    from cbi1kit.analysis import (
        open_capture as open,
    )
    from cbi1kit.capture import (
        CaptureWriter,
        read_capture,
        read_frames,
    )
    from cbi1kit.ckf import (
        CkfAddressing,
        CkfConfig,
        CkfLaneTable,
        CuckooTable,
        DcCkfDelta,
        DcCkfState,
        find_prefix_depths,
        lane_stats,
    )
    from cbi1kit.hashing import (
        CanonicalModelRegistration,
        KvQueryHashFormat,
        ModelTarget,
        compute_block_hash_for_seq,
        compute_seq_hash_for_block,
        resolve_lora_name,
    )
    from cbi1kit.relay import HubSnapshot, PublicationFrame
    from cbi1kit.relay import encode_delta as encode_delta_publication
    from cbi1kit.relay import encode_snapshot as encode_snapshot_publication
    from cbi1kit.sim import (
        HashSpace,
        Simulator,
        SimulatorConfig,
        read_mooncake,
        simulate_capture,
        synthetic_chat,
    )
    from cbi1kit.viz import build_report, hex64, setup_notebook
    from cbi1kit.wire import (
        FilterFormat,
        SnapshotAssembly,
        decode,
        encode_delta,
        encode_snapshot_chunks,
        inspect,
        peek_format,
    )

from cbi1kit._version import __version__ as __version__

#: Where each front-door name lives: ``stage`` or ``stage:attribute`` (a name the stage spells
#: differently). Everything loads on first use, so ``import cbi1kit`` and ``cbi1kit --help`` do
#: not pay for numpy, polars, pyarrow, grpc or altair until a name needs them.
_FRONT: dict[str, str] = {
    "open": "analysis:open_capture",
    **dict.fromkeys(
        ("Capture", "diff", "explain", "export_dataset", "export_parquet", "frames_table"),
        "analysis",
    ),
    "open_dataset": "analysis",
    **dict.fromkeys(
        ("global_view", "images_table", "occupancy_table", "replay", "snapshots_table"),
        "analysis",
    ),
    **dict.fromkeys(
        ("CaptureWriter", "read_capture", "read_frames"),
        "capture",
    ),
    **dict.fromkeys(
        ("CkfAddressing", "CkfConfig", "CkfLaneTable", "CuckooTable", "DcCkfDelta"), "ckf"
    ),
    **dict.fromkeys(("DcCkfState", "find_prefix_depths", "lane_stats"), "ckf"),
    **dict.fromkeys(
        ("CanonicalModelRegistration", "KvQueryHashFormat", "ModelTarget", "resolve_lora_name"),
        "hashing",
    ),
    **dict.fromkeys(("compute_block_hash_for_seq", "compute_seq_hash_for_block"), "hashing"),
    **dict.fromkeys(("HubSnapshot", "PublicationFrame"), "relay"),
    "encode_delta_publication": "relay:encode_delta",
    "encode_snapshot_publication": "relay:encode_snapshot",
    **dict.fromkeys(
        ("HashSpace", "Simulator", "SimulatorConfig", "read_mooncake", "simulate_capture"), "sim"
    ),
    "synthetic_chat": "sim",
    **dict.fromkeys(("build_report", "hex64", "setup_notebook"), "viz"),
    **dict.fromkeys(
        ("FilterFormat", "SnapshotAssembly", "decode", "encode_delta", "encode_snapshot_chunks"),
        "wire",
    ),
    **dict.fromkeys(("inspect", "peek_format"), "wire"),
}
#: The stages, each a subpackage (``ck.wire`` ...), and the errors module.
_STAGES = (
    "analysis",
    "capture",
    "ckf",
    "errors",
    "fleet",
    "hashing",
    "relay",
    "sim",
    "viz",
    "wire",
)

#: ``_FRONT`` and ``_STAGES``, spelled out for readers and linters (a test holds them equal).
__all__ = [
    "CanonicalModelRegistration",
    "Capture",
    "CaptureWriter",
    "CkfAddressing",
    "CkfConfig",
    "CkfLaneTable",
    "CuckooTable",
    "DcCkfDelta",
    "DcCkfState",
    "FilterFormat",
    "HashSpace",
    "HubSnapshot",
    "KvQueryHashFormat",
    "ModelTarget",
    "PublicationFrame",
    "Simulator",
    "SimulatorConfig",
    "SnapshotAssembly",
    "analysis",
    "build_report",
    "capture",
    "ckf",
    "compute_block_hash_for_seq",
    "compute_seq_hash_for_block",
    "decode",
    "diff",
    "encode_delta",
    "encode_delta_publication",
    "encode_snapshot_chunks",
    "encode_snapshot_publication",
    "errors",
    "explain",
    "export_dataset",
    "export_parquet",
    "find_prefix_depths",
    "fleet",
    "frames_table",
    "global_view",
    "hashing",
    "hex64",
    "images_table",
    "inspect",
    "lane_stats",
    "occupancy_table",
    "open",
    "open_dataset",
    "peek_format",
    "read_capture",
    "read_frames",
    "read_mooncake",
    "relay",
    "replay",
    "resolve_lora_name",
    "setup_notebook",
    "sim",
    "simulate_capture",
    "snapshots_table",
    "synthetic_chat",
    "viz",
    "wire",
]

__getattr__ = lazy_getattr(__name__, _FRONT, modules=_STAGES)


def __dir__() -> list[str]:
    return [*__all__, "__version__"]

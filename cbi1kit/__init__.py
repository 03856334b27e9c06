"""cbi1kit: see inside NVIDIA Dynamo's KV-cache filter stream.

The front door holds what a notebook user types, in data-flow order; every stage is also a
subpackage with its whole public surface (``ck.wire``, ``ck.ckf``, ``ck.viz`` ...):

    hashing -> wire -> ckf -> capture -> relay -> analysis -> fleet -> sim -> viz

Errors are a few families in :mod:`cbi1kit.errors`, each naming upstream's variant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit import analysis, capture, ckf, errors, fleet, hashing, relay, sim, viz, wire
from cbi1kit._lazy import lazy_getattr, lazy_names
from cbi1kit.analysis import (
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
from cbi1kit.capture import (
    CaptureWriter,
    read_capture,
    read_cbi1_files,
    read_frames,
    read_grpcurl_json,
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
from cbi1kit.wire import (
    FilterFormat,
    SnapshotAssembly,
    decode,
    encode_delta,
    encode_snapshot_chunks,
    inspect,
    peek_format,
)

if TYPE_CHECKING:
    from cbi1kit.viz import build_report, hex64, setup_notebook

__version__ = "0.1.0"

__all__ = [
    "CanonicalModelRegistration",
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
    "encode_delta",
    "encode_delta_publication",
    "encode_snapshot_chunks",
    "encode_snapshot_publication",
    "errors",
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
    "open_dataset",
    "peek_format",
    "read_capture",
    "read_cbi1_files",
    "read_frames",
    "read_grpcurl_json",
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

_LAZY = lazy_names("viz", ("build_report", "hex64", "setup_notebook"))  # altair loads on first use
__getattr__ = lazy_getattr(__name__, _LAZY)

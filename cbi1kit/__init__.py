"""cbi1kit: see inside NVIDIA Dynamo's KV-cache filter stream.

The front door holds what a notebook user types; every stage is also a subpackage with a curated
public surface of its own (``ck.wire``, ``ck.ckf``, ``ck.viz`` ...; docs/api.md):

    hashing -> wire -> ckf -> capture -> relay -> analysis -> fleet -> sim -> viz

Errors are a few families in :mod:`cbi1kit.errors`, each naming upstream's variant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import attach

if TYPE_CHECKING:
    from cbi1kit import (
        analysis as analysis,
        capture as capture,
        ckf as ckf,
        data as data,
        errors as errors,
        fleet as fleet,
        hashing as hashing,
        relay as relay,
        sim as sim,
        viz as viz,
        wire as wire,
    )
    from cbi1kit.analysis import (
        Capture as Capture,
        Source as Source,
        diff as diff,
        explain as explain,
        export_dataset as export_dataset,
        export_parquet as export_parquet,
        frames_table as frames_table,
        global_view as global_view,
        images_table as images_table,
        occupancy_table as occupancy_table,
        open_capture as open,  # noqa: F401 (public: ``ck.open``; see _lazy.attach)
        open_dataset as open_dataset,
        replay as replay,
        snapshots_table as snapshots_table,
    )
    from cbi1kit.capture import (
        CaptureWriter as CaptureWriter,
        read_capture as read_capture,
        read_frames as read_frames,
    )
    from cbi1kit.ckf import (
        CkfAddressing as CkfAddressing,
        CkfConfig as CkfConfig,
        CuckooTable as CuckooTable,
        DcCkfDelta as DcCkfDelta,
        DcCkfState as DcCkfState,
        find_prefix_depths as find_prefix_depths,
        lane_stats as lane_stats,
    )
    from cbi1kit.hashing import (
        CanonicalModelRegistration as CanonicalModelRegistration,
        KvQueryHashFormat as KvQueryHashFormat,
        ModelTarget as ModelTarget,
        compute_block_hash_for_seq as compute_block_hash_for_seq,
        compute_seq_hash_for_block as compute_seq_hash_for_block,
        resolve_lora_name as resolve_lora_name,
    )
    from cbi1kit.relay import (
        HubSnapshot as HubSnapshot,
        encode_delta_publication as encode_delta_publication,
        encode_snapshot_publication as encode_snapshot_publication,
    )
    from cbi1kit.sim import (
        HashSpace as HashSpace,
        Simulator as Simulator,
        SimulatorConfig as SimulatorConfig,
        read_mooncake as read_mooncake,
        simulate_capture as simulate_capture,
        synthetic_chat as synthetic_chat,
    )
    from cbi1kit.viz import hex64 as hex64, live as live, setup_notebook as setup_notebook
    from cbi1kit.wire import (
        FilterFormat as FilterFormat,
        SnapshotAssembly as SnapshotAssembly,
        decode as decode,
        encode_delta as encode_delta,
        encode_snapshot_chunks as encode_snapshot_chunks,
        inspect as inspect,
        peek_format as peek_format,
    )
else:
    __getattr__, __dir__, __all__ = attach(__name__, __file__)

from cbi1kit._version import __version__ as __version__

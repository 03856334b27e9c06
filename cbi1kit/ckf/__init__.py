"""The cuckoo filter model: addressing, buckets, the kick walk, upstream's producer (DcCkfState)
and consumer (lane table), and CF.INFO-style stats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import attach

if TYPE_CHECKING:
    from cbi1kit.ckf._addressing import CkfAddressing as CkfAddressing
    from cbi1kit.ckf._bucket import (
        lane_contains as lane_contains,
        lane_occupancy as lane_occupancy,
        slots_text as slots_text,
    )
    from cbi1kit.ckf._consumer import (
        CkfLaneTable as CkfLaneTable,
        PrefixSearchResult as PrefixSearchResult,
        find_prefix_depths as find_prefix_depths,
    )
    from cbi1kit.ckf._lane import (
        DcCkfDelta as DcCkfDelta,
        DcCkfSnapshot as DcCkfSnapshot,
        Lane as Lane,
    )
    from cbi1kit.ckf._limits import DEFAULT_VERIFICATION_WINDOW as DEFAULT_VERIFICATION_WINDOW
    from cbi1kit.ckf._producer import (
        CkfConfig as CkfConfig,
        DcCkfPublisher as DcCkfPublisher,
        DcCkfState as DcCkfState,
        KvCleared as KvCleared,
        KvRemoved as KvRemoved,
        KvStored as KvStored,
        StoredBlock as StoredBlock,
    )
    from cbi1kit.ckf._stats import (
        CkfStats as CkfStats,
        estimated_false_positive_rate as estimated_false_positive_rate,
        lane_stats as lane_stats,
        measure_false_positive_rate as measure_false_positive_rate,
        producer_stats as producer_stats,
    )
    from cbi1kit.ckf._table import (
        DEFAULT_MAX_KICKS as DEFAULT_MAX_KICKS,
        CuckooTable as CuckooTable,
        SplitMix64 as SplitMix64,
        lane_rng_seed as lane_rng_seed,
    )
else:
    __getattr__, __dir__, __all__ = attach(__name__, __file__)

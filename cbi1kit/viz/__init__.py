"""Charts (altair over polars, u64 as hex), drawn offline in notebooks; widgets for learning by
doing; the offline report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import attach

if TYPE_CHECKING:
    from cbi1kit.viz._bytes import byte_explorer as byte_explorer
    from cbi1kit.viz._chart_common import (
        full_table as full_table,
        hex64 as hex64,
        word_changes as word_changes,
    )
    from cbi1kit.viz._display import setup_notebook as setup_notebook
    from cbi1kit.viz._lane_charts import (
        bucket_words_table as bucket_words_table,
        byte_map_chart as byte_map_chart,
        fingerprint_chart as fingerprint_chart,
        occupancy_chart as occupancy_chart,
        slots_histogram_chart as slots_histogram_chart,
    )
    from cbi1kit.viz._live import live as live
    from cbi1kit.viz._report import build_report as build_report, charted_lane as charted_lane
    from cbi1kit.viz._run_charts import (
        compare_runs_chart as compare_runs_chart,
        fleet_churn_chart as fleet_churn_chart,
        fpr_vs_load_chart as fpr_vs_load_chart,
        prefix_depth_chart as prefix_depth_chart,
    )
    from cbi1kit.viz._stream_charts import (
        churn_chart as churn_chart,
        filter_health_chart as filter_health_chart,
        filter_health_table as filter_health_table,
        lanes_over_time_chart as lanes_over_time_chart,
    )
    from cbi1kit.viz._whatif import WhatIf as WhatIf, what_if as what_if
    from cbi1kit.viz._widgets import (
        filter_playground as filter_playground,
        occupancy_explorer as occupancy_explorer,
        stream_scrubber as stream_scrubber,
    )
else:
    __getattr__, __dir__, __all__ = attach(__name__, __file__)

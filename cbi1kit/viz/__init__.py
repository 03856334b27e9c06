"""Charts (altair over polars, u64 as hex), drawn offline in notebooks; widgets for learning by
doing; the offline report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_getattr, lazy_names

if TYPE_CHECKING:
    from cbi1kit.viz._charts import *  # noqa: F403
    from cbi1kit.viz._display import *  # noqa: F403
    from cbi1kit.viz._report import *  # noqa: F403
    from cbi1kit.viz._widgets import *  # noqa: F403

# altair and grpc load on first use; the names are each module's __all__ (a test checks)
_CHARTS = (
    "MAX_ROWS",
    "bucket_words_table",
    "byte_map_chart",
    "byte_map_table",
    "churn_chart",
    "compare_runs_chart",
    "filter_health_chart",
    "filter_health_table",
    "fingerprint_chart",
    "fleet_churn_chart",
    "fpr_vs_load_chart",
    "full_table",
    "hex64",
    "lanes_over_time_chart",
    "occupancy_chart",
    "prefix_depth_chart",
    "slots_histogram_chart",
)
_DISPLAY = ("STATIC_ENV", "interactive_charts", "setup_notebook")
_REPORT = ("CHART_KINDS", "NOTEBOOKS", "ReportResult", "build_report", "report_charts")
_WIDGETS = (
    "ByteExplorer",
    "FilterPlayground",
    "byte_explorer",
    "filter_playground",
    "occupancy_explorer",
    "stream_scrubber",
)
_LAZY = {
    **lazy_names("_charts", _CHARTS),
    **lazy_names("_display", _DISPLAY),
    **lazy_names("_report", _REPORT),
    **lazy_names("_widgets", _WIDGETS),
}

__all__: list[str] = []
__all__ += _CHARTS  # noqa: PLE0605 (a tuple of str, defined above)
__all__ += _DISPLAY  # noqa: PLE0605 (a tuple of str, defined above)
__all__ += _REPORT  # noqa: PLE0605 (a tuple of str, defined above)
__all__ += _WIDGETS  # noqa: PLE0605 (a tuple of str, defined above)

__getattr__ = lazy_getattr(__name__, _LAZY)

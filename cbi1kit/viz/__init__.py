"""Charts (altair over polars, u64 as hex) and the offline HTML report."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cbi1kit.viz._charts import (
        MAX_ROWS,
        bucket_words_table,
        byte_map_chart,
        byte_map_table,
        churn_chart,
        compare_runs_chart,
        filter_health_chart,
        filter_health_table,
        fingerprint_chart,
        fpr_vs_load_chart,
        hex64,
        occupancy_chart,
        prefix_depth_chart,
        slots_histogram_chart,
    )
    from cbi1kit.viz._report import (
        CHART_KINDS,
        NOTEBOOKS,
        ReportResult,
        build_report,
        interactive_charts,
        report_charts,
    )

# heavy imports (altair, grpc) load on first use
_LAZY = {
    "CHART_KINDS": "_report",
    "MAX_ROWS": "_charts",
    "NOTEBOOKS": "_report",
    "ReportResult": "_report",
    "bucket_words_table": "_charts",
    "build_report": "_report",
    "byte_map_chart": "_charts",
    "byte_map_table": "_charts",
    "churn_chart": "_charts",
    "compare_runs_chart": "_charts",
    "filter_health_chart": "_charts",
    "filter_health_table": "_charts",
    "fingerprint_chart": "_charts",
    "fpr_vs_load_chart": "_charts",
    "hex64": "_charts",
    "interactive_charts": "_report",
    "occupancy_chart": "_charts",
    "prefix_depth_chart": "_charts",
    "report_charts": "_report",
    "slots_histogram_chart": "_charts",
}

__all__ = [
    "CHART_KINDS",
    "MAX_ROWS",
    "NOTEBOOKS",
    "ReportResult",
    "bucket_words_table",
    "build_report",
    "byte_map_chart",
    "byte_map_table",
    "churn_chart",
    "compare_runs_chart",
    "filter_health_chart",
    "filter_health_table",
    "fingerprint_chart",
    "fpr_vs_load_chart",
    "hex64",
    "interactive_charts",
    "occupancy_chart",
    "prefix_depth_chart",
    "report_charts",
    "slots_histogram_chart",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

"""Replay of a capture under the consumer's rules, the global view, a request explained against
it, lanes compared, the polars tables, Parquet export."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import attach

if TYPE_CHECKING:
    from cbi1kit.analysis._capture import Capture as Capture, open_capture as open_capture
    from cbi1kit.analysis._dataset import (
        Dataset as Dataset,
        export_dataset as export_dataset,
        open_dataset as open_dataset,
    )
    from cbi1kit.analysis._diff import LaneDiff as LaneDiff
    from cbi1kit.analysis._events import Violation as Violation
    from cbi1kit.analysis._explain import Explanation as Explanation
    from cbi1kit.analysis._global import GlobalView as GlobalView, parse_at as parse_at
    from cbi1kit.analysis._replay import LaneReport as LaneReport, ReplayReport as ReplayReport
    from cbi1kit.analysis._schema import TABLE_SCHEMAS as TABLE_SCHEMAS
    from cbi1kit.analysis._shorthands import (
        diff as diff,
        explain as explain,
        export_parquet as export_parquet,
        frames_table as frames_table,
        global_timeline as global_timeline,
        global_view as global_view,
        images_table as images_table,
        replay as replay,
        snapshots_table as snapshots_table,
    )
    from cbi1kit.analysis._source import Source as Source
    from cbi1kit.analysis._tables import occupancy_table as occupancy_table
else:
    __getattr__, __dir__, __all__ = attach(__name__, __file__)

"""The fleet on Dask: many captures converted into the partitioned dataset (one task per capture
file) and fleet queries over it as Dask computations, on a local cluster of worker processes or
an existing cluster (``client(scheduler="tcp://HOST:8786")``). Results equal the single-process
path (``export_dataset``, ``run_local``) exactly."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import attach

if TYPE_CHECKING:
    from cbi1kit.fleet._cluster import client as client, dashboard_link as dashboard_link
    from cbi1kit.fleet._convert import convert as convert
    from cbi1kit.fleet._queries import (
        QUERIES as QUERIES,
        Query as Query,
        churn_per_pool_per_hour as churn_per_pool_per_hour,
        load_over_time as load_over_time,
        run_local as run_local,
        run_query as run_query,
        snapshot_sizes as snapshot_sizes,
        violations_per_relay as violations_per_relay,
    )
else:
    __getattr__, __dir__, __all__ = attach(__name__, __file__)

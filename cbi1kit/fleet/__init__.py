"""The fleet on Dask: many captures converted into the partitioned dataset (one task per capture
file) and fleet queries over it as Dask computations, on a local cluster of worker processes or
an existing cluster (``client(scheduler="tcp://HOST:8786")``). Results equal the single-process
path (``export_dataset``, ``run_local``) exactly."""

from __future__ import annotations

from cbi1kit.fleet import _cluster, _convert, _queries
from cbi1kit.fleet._cluster import *  # noqa: F403
from cbi1kit.fleet._convert import *  # noqa: F403
from cbi1kit.fleet._queries import *  # noqa: F403

__all__: list[str] = []
__all__ += _cluster.__all__
__all__ += _convert.__all__
__all__ += _queries.__all__

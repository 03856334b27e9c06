"""The fleet on Dask: many captures converted into the partitioned dataset (one task per capture
file) and fleet queries over it as Dask computations, on a local cluster of worker processes or
an existing cluster (``client(scheduler="tcp://HOST:8786")``). Results equal the single-process
path (``export_dataset``, ``run_local``) exactly."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_stage

if TYPE_CHECKING:
    from cbi1kit.fleet._cluster import *  # noqa: F403
    from cbi1kit.fleet._convert import *  # noqa: F403
    from cbi1kit.fleet._menu import *  # noqa: F403
    from cbi1kit.fleet._queries import *  # noqa: F403

#: the modules whose ``__all__`` is this stage's surface, in order; each loads on first use
MODULES = ("_menu", "_cluster", "_convert", "_queries")
__getattr__, __dir__ = lazy_stage(__name__, MODULES)

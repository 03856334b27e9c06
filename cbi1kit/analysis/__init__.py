"""Replay of a capture under the consumer's rules, the global view, a request explained against
it, lanes compared, the polars tables, Parquet export."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_stage

if TYPE_CHECKING:
    from cbi1kit.analysis._capture import *  # noqa: F403
    from cbi1kit.analysis._dataset import *  # noqa: F403
    from cbi1kit.analysis._diff import *  # noqa: F403
    from cbi1kit.analysis._events import *  # noqa: F403
    from cbi1kit.analysis._explain import *  # noqa: F403
    from cbi1kit.analysis._export import *  # noqa: F403
    from cbi1kit.analysis._frames import *  # noqa: F403
    from cbi1kit.analysis._global import *  # noqa: F403
    from cbi1kit.analysis._replay import *  # noqa: F403
    from cbi1kit.analysis._schema import *  # noqa: F403
    from cbi1kit.analysis._tables import *  # noqa: F403

#: the modules whose ``__all__`` is this stage's surface, in order; each loads on first use
MODULES = (
    "_capture",
    "_events",
    "_replay",
    "_global",
    "_explain",
    "_diff",
    "_schema",
    "_frames",
    "_tables",
    "_export",
    "_dataset",
)
__getattr__, __dir__ = lazy_stage(__name__, MODULES)

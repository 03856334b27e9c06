"""Charts (altair over polars, u64 as hex), drawn offline in notebooks; widgets for learning by
doing; the offline report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_stage

if TYPE_CHECKING:
    from cbi1kit.viz._charts import *  # noqa: F403
    from cbi1kit.viz._display import *  # noqa: F403
    from cbi1kit.viz._report import *  # noqa: F403
    from cbi1kit.viz._widgets import *  # noqa: F403

#: the modules whose ``__all__`` is this stage's surface, in order; each loads on first use
MODULES = ("_charts", "_display", "_report", "_widgets")
__getattr__, __dir__ = lazy_stage(__name__, MODULES)

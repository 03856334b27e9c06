"""The cuckoo filter model: addressing, buckets, the kick walk, upstream's producer (DcCkfState)
and consumer (lane table), and CF.INFO-style stats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_stage

if TYPE_CHECKING:
    from cbi1kit.ckf._addressing import *  # noqa: F403
    from cbi1kit.ckf._bucket import *  # noqa: F403
    from cbi1kit.ckf._consumer import *  # noqa: F403
    from cbi1kit.ckf._lane import *  # noqa: F403
    from cbi1kit.ckf._limits import *  # noqa: F403
    from cbi1kit.ckf._producer import *  # noqa: F403
    from cbi1kit.ckf._stats import *  # noqa: F403
    from cbi1kit.ckf._table import *  # noqa: F403

#: the modules whose ``__all__`` is this stage's surface, in order; each loads on first use
MODULES = (
    "_limits",
    "_addressing",
    "_bucket",
    "_table",
    "_lane",
    "_producer",
    "_consumer",
    "_stats",
)
__getattr__, __dir__ = lazy_stage(__name__, MODULES)

"""The cuckoo filter model: addressing, buckets, the kick walk, upstream's producer (DcCkfState)
and consumer (lane table), and CF.INFO-style stats.
"""

from __future__ import annotations

from cbi1kit.ckf import _addressing, _bucket, _consumer, _lane, _producer, _stats, _table
from cbi1kit.ckf._addressing import *  # noqa: F403
from cbi1kit.ckf._bucket import *  # noqa: F403
from cbi1kit.ckf._consumer import *  # noqa: F403
from cbi1kit.ckf._lane import *  # noqa: F403
from cbi1kit.ckf._producer import *  # noqa: F403
from cbi1kit.ckf._stats import *  # noqa: F403
from cbi1kit.ckf._table import *  # noqa: F403

__all__: list[str] = []
__all__ += _addressing.__all__
__all__ += _bucket.__all__
__all__ += _table.__all__
__all__ += _lane.__all__
__all__ += _producer.__all__
__all__ += _consumer.__all__
__all__ += _stats.__all__

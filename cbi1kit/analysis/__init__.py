"""Replay of a capture under the consumer's rules, the global view, the polars tables, Parquet
export and the partitioned dataset."""

from __future__ import annotations

from cbi1kit.analysis import _dataset, _export, _frames, _global, _replay, _schema, _tables
from cbi1kit.analysis._dataset import *  # noqa: F403
from cbi1kit.analysis._export import *  # noqa: F403
from cbi1kit.analysis._frames import *  # noqa: F403
from cbi1kit.analysis._global import *  # noqa: F403
from cbi1kit.analysis._replay import *  # noqa: F403
from cbi1kit.analysis._schema import *  # noqa: F403
from cbi1kit.analysis._tables import *  # noqa: F403

__all__: list[str] = []
__all__ += _replay.__all__
__all__ += _global.__all__
__all__ += _schema.__all__
__all__ += _frames.__all__
__all__ += _tables.__all__
__all__ += _export.__all__
__all__ += _dataset.__all__

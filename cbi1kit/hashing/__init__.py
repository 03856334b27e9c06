"""Block and sequence hashes (standard, EAGLE, LoRA, namespace, multimodal), exact xxh3, and the
model / pool / producer identities every later stage keys on.
"""

from __future__ import annotations

from cbi1kit.hashing import _blocks, _identity, _xxh3
from cbi1kit.hashing._blocks import *  # noqa: F403
from cbi1kit.hashing._identity import *  # noqa: F403
from cbi1kit.hashing._xxh3 import *  # noqa: F403

__all__: list[str] = []
__all__ += _xxh3.__all__
__all__ += _blocks.__all__
__all__ += _identity.__all__

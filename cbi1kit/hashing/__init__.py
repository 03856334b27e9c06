"""Block and sequence hashes (standard, EAGLE, LoRA, namespace, multimodal), exact xxh3, and the
model / pool / producer identities every later stage keys on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_stage

if TYPE_CHECKING:
    from cbi1kit.hashing._blocks import *  # noqa: F403
    from cbi1kit.hashing._identity import *  # noqa: F403
    from cbi1kit.hashing._xxh3 import *  # noqa: F403

#: the modules whose ``__all__`` is this stage's surface, in order; each loads on first use
MODULES = ("_xxh3", "_blocks", "_identity")
__getattr__, __dir__ = lazy_stage(__name__, MODULES)

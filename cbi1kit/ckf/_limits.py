"""The CKF's fixed numbers a user sets or is shown before anything heavy loads: the default
seed, the prefix search's verification window (upstream's ``PrefixSearchConfig``) and when a
lane goes stale, in a module of their own so the CLI's parser reads them without numpy."""

from __future__ import annotations

from typing import Final

DEFAULT_SEED: Final = 0x5DEECE66D1B54A33
DEFAULT_VERIFICATION_WINDOW: Final = 2
MAX_VERIFICATION_WINDOW: Final = 8
#: a ready lane silent this long is stale; upstream's ``overlap_max_age`` is a deployment
#: setting, this is ours (``watch``, ``ck.live``)
DEFAULT_MAX_AGE_S: Final = 30.0


def verification_window_fault(window: int) -> str | None:
    """Why ``window`` is not a verification window (None: it is one), the one check of its
    range: the producer's ``CkfConfig`` and the consumer's prefix search both hold to it."""
    if 1 <= window <= MAX_VERIFICATION_WINDOW:
        return None
    return f"must be in 1..={MAX_VERIFICATION_WINDOW}"

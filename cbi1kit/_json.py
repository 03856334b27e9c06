"""JSON as cbi1kit writes it: no number a float reader would round (docs/tables.md).

``jq``, JavaScript and most JSON readers hold numbers as IEEE-754 doubles, exact only up to
2^53: a 64-bit DC id or a nanosecond timestamp written as a bare number comes back changed.
Identifiers, seeds and words are hex text where they are made (``HEX_COLUMNS`` for tables);
any other integer beyond 2^53 (a nanosecond timestamp) is written here as a decimal string.
"""

from __future__ import annotations

import json
from typing import Any, Final

#: the largest integer every JSON reader holds exactly (2^53 - 1)
EXACT_INT: Final = (1 << 53) - 1


def exact(value: Any) -> Any:
    """``value`` with every integer beyond ``EXACT_INT`` (either sign) as its decimal string."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if abs(value) > EXACT_INT else value
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [exact(v) for v in value]
    return value


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps`` of ``exact(value)`` (indented by 2 unless ``options`` say otherwise)."""
    return json.dumps(exact(value), **({"indent": 2} | options))

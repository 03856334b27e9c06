"""The checks every identity type's fields pass (unsigned ranges, serde JSON's fields), and the
i64 / u64 views of one hash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from cbi1kit.errors import IdentityError, IdentityVariant

_U64_MASK = (1 << 64) - 1


def _int_in(value: Any, bits: int, field: str, *, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise IdentityError(
            IdentityVariant.Range,
            f"{field} must be an integer, got {type(value).__name__} {value!r}",
            field=field,
            value=value,
        )
    n = int(value)
    if not low <= n < (1 << bits):
        raise IdentityError(
            IdentityVariant.Range,
            f"{field} = {n} is outside {low}..={(1 << bits) - 1} (u{bits})",
            field=field,
            value=n,
        )
    return n


def _json_obj(value: Any, type_name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise IdentityError(
            IdentityVariant.Json,
            f"{type_name} JSON must be an object, got {type(value).__name__}",
            field=type_name,
            value=value,
        )
    return value


def _json_field(obj: Mapping[str, Any], key: str, type_name: str) -> Any:
    if key not in obj:
        raise IdentityError(
            IdentityVariant.Json, f"{type_name}: missing field `{key}`", field=key, value=obj
        )
    return obj[key]


def _json_uint(obj: Mapping[str, Any], key: str, bits: int, type_name: str) -> int:
    value = _json_field(obj, key, type_name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise IdentityError(
            IdentityVariant.Json,
            f"{type_name}.{key} must be an integer, got {value!r}",
            field=key,
            value=value,
        )
    return _int_in(value, bits, f"{type_name}.{key}")


def _json_str(value: Any, field_name: str) -> str:
    if not isinstance(value, str):
        raise IdentityError(
            IdentityVariant.Json,
            f"{field_name} must be a string, got {value!r}",
            field=field_name,
            value=value,
        )
    return value


@overload
def to_u64(value: int) -> int: ...
@overload
def to_u64(value: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]: ...
def to_u64(value: int | npt.NDArray[np.int64]) -> int | npt.NDArray[np.uint64]:
    """Reinterpret a signed i64 as the u64 it carries (``i & (2**64-1)``), as Rust's ``as u64``.

    Publishers document ``block_hashes`` / ``parent_hash`` as i64; the router works in u64.
    """
    if isinstance(value, np.ndarray):
        return value.astype(np.int64, copy=False).view(np.uint64)
    n = int(value)
    if not -(1 << 63) <= n <= _U64_MASK:
        raise IdentityError(
            IdentityVariant.Range, f"{n} is neither an i64 nor a u64", field="value", value=n
        )
    return n & _U64_MASK


@overload
def to_i64(value: int) -> int: ...
@overload
def to_i64(value: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]: ...
def to_i64(value: int | npt.NDArray[np.uint64]) -> int | npt.NDArray[np.int64]:
    """The i64 with the same bits as a u64 hash (``u - 2**64`` when ``u >= 2**63``)."""
    if isinstance(value, np.ndarray):
        return value.astype(np.uint64, copy=False).view(np.int64)
    n = _int_in(value, 64, "value")
    return n - (1 << 64) if n >= 1 << 63 else n

"""Asserting on an error family and its upstream variant, the way callers match on them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from cbi1kit.errors import Cbi1kitError


@contextmanager
def raises_variant(
    family: type[Cbi1kitError], variant: str, match: str | None = None
) -> Iterator[Any]:
    """``pytest.raises(family)`` that also requires ``variant`` (``"Format.Mismatch"`` checks
    the subvariant too)."""
    with pytest.raises(family, match=match) as info:
        yield info
    outer, _, inner = variant.partition(".")
    assert info.value.variant == outer, f"{info.value.variant!r} != {outer!r}: {info.value}"
    if inner:
        assert info.value.subvariant == inner, f"{info.value.subvariant!r} != {inner!r}"


def is_variant(err: object, family: type[Cbi1kitError], variant: str) -> bool:
    """``isinstance`` for a family and variant (dotted: subvariant too)."""
    if not isinstance(err, family):
        return False
    outer, _, inner = variant.partition(".")
    return err.variant == outer and (not inner or err.subvariant == inner)

"""Names beside DC ids. A DC's id is a hash of its name (``stable_dc_id``), so the wire never
carries the name; cbi1kit shows one where someone said it: its own simulators' DCs, a ``--dc
NAME``, ``CBI1KIT_DC_NAMES``, or a capture that recorded them (``docs/tables.md``). A name can
never label the wrong id: it is checked by hashing it again.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Final

from cbi1kit._text import hex_id
from cbi1kit.errors import IdentityError
from cbi1kit.hashing._pools import DcId, stable_dc_id

#: comma-separated DC names to show beside their ids (as a deployment names its DCs)
ENV_DC_NAMES: Final = "CBI1KIT_DC_NAMES"
#: the DC a simulated relay serves unless told (``cbi1kit serve --dc``)
DEFAULT_SIM_DC: Final = "dc-sim"
_SIM_DCS_NAMED: Final = 256
_ROUND_TRIP_SPACES: Final = ("standard", "eagle", "lora")

_lock = threading.Lock()


def sim_dc_name(dc: int) -> str:
    """The name of DC number ``dc`` of a simulation (its pools' ids hash it)."""
    return f"sim-dc-{dc}"


def round_trip_dc_name(space: str) -> str:
    """The name of the DC a round trip through hash space ``space`` publishes from."""
    return f"dc-{space}"


def learn_dc_names(names: Iterable[str]) -> None:
    """Show each of ``names`` beside its id from now on; a 16-hex-digit id is no name."""
    book = _book()
    with _lock:
        _enter(book, names)


def dc_name(dc_id: int) -> str | None:
    """The name said for ``dc_id``, or None."""
    return _book().get(dc_id)


def dc_names() -> dict[int, str]:
    """Every id with a name said for it."""
    book = _book()
    with _lock:
        return dict(book)


def dc_text(dc_id: int | None) -> str:
    """A DC as people read it: its 16 hex digits, then its name where one is known."""
    name = None if dc_id is None else dc_name(dc_id)
    return hex_id(dc_id) if name is None else f"{hex_id(dc_id)} ({name})"


def dc_fields(dc_id: int | None) -> dict[str, str | None]:
    """A DC in JSON: ``dc_id`` as 16 hex digits and ``dc_name`` (null where none is known)."""
    if dc_id is None:
        return {"dc_id": None, "dc_name": None}
    return {"dc_id": hex_id(dc_id), "dc_name": dc_name(dc_id)}


def said_dc_names(names: Iterable[str] = ()) -> list[str]:
    """The names a user said, ``names`` and ``CBI1KIT_DC_NAMES``, for a capture to keep."""
    env = [n.strip() for n in os.environ.get(ENV_DC_NAMES, "").split(",")]
    return list(dict.fromkeys(_named([*names, *env])))


def _named(names: Iterable[str]) -> Iterator[str]:
    """The names among ``names``: not empty, and not a DC id as it prints (``DcId.parse``)."""
    for name in names:
        try:
            DcId.parse(name)
        except (IdentityError, ValueError):
            if name:
                yield name


def _enter(book: dict[int, str], names: Iterable[str]) -> None:
    """Each name under its id, the first said for an id kept."""
    for name in _named(names):
        book.setdefault(stable_dc_id(name).value, name)


@functools.cache
def _book() -> dict[int, str]:
    """The names known before anyone says one: the simulators' and ``CBI1KIT_DC_NAMES``."""
    book: dict[int, str] = {}
    _enter(book, [DEFAULT_SIM_DC, *map(sim_dc_name, range(_SIM_DCS_NAMED))])
    _enter(book, [*map(round_trip_dc_name, _ROUND_TRIP_SPACES), *said_dc_names()])
    return book

"""Names beside DC ids. A DC's id is a hash of its name (``stable_dc_id``), so the wire never
carries the name; cbi1kit shows one where someone said it: its own simulators' DCs, a ``--dc
NAME``, ``CBI1KIT_DC_NAMES``, or a capture that recorded them (``docs/tables.md``). A name can
never label the wrong id: it is checked by hashing it again.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable
from typing import Final

from cbi1kit.hashing._pools import stable_dc_id

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
        for name in names:
            if name and not _is_hex_id(name):
                book.setdefault(stable_dc_id(name).value, name)


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
    if dc_id is None:
        return "-"
    name = dc_name(dc_id)
    return f"{dc_id:016x}" if name is None else f"{dc_id:016x} ({name})"


def dc_fields(dc_id: int | None) -> dict[str, str | None]:
    """A DC in JSON: ``dc_id`` as 16 hex digits and ``dc_name`` (null where none is known)."""
    if dc_id is None:
        return {"dc_id": None, "dc_name": None}
    return {"dc_id": f"{dc_id:016x}", "dc_name": dc_name(dc_id)}


def said_dc_names(names: Iterable[str] = ()) -> list[str]:
    """The names a user said, ``names`` and ``CBI1KIT_DC_NAMES``, for a capture to keep."""
    env = [n.strip() for n in os.environ.get(ENV_DC_NAMES, "").split(",")]
    return [n for n in dict.fromkeys([*names, *env]) if n and not _is_hex_id(n)]


def _is_hex_id(text: str) -> bool:
    return len(text) == 16 and all(c in "0123456789abcdef" for c in text)


@functools.cache
def _book() -> dict[int, str]:
    """The names known before anyone says one: the simulators' and ``CBI1KIT_DC_NAMES``."""
    known = [DEFAULT_SIM_DC, *map(sim_dc_name, range(_SIM_DCS_NAMED))]
    known += [round_trip_dc_name(s) for s in _ROUND_TRIP_SPACES]
    known += said_dc_names()
    return {stable_dc_id(n).value: n for n in reversed(known) if n and not _is_hex_id(n)}

"""The optional extras: which modules each brings, and the line a command without it gets.

The core install opens, decodes, tables, replays and charts captures; ``record``/``serve`` need
``[relay]``, ``fleet`` needs ``[fleet]``, ``report``/``demo``/``lab`` need ``[notebooks]``.
``pyproject.toml`` lists the distributions; ``tests/test_extras.py`` holds the two together.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

#: an importable top-level module -> (the distribution that provides it, the extra naming it)
EXTRAS: Final[dict[str, tuple[str, str]]] = {
    "grpc": ("grpcio", "relay"),
    "dask": ("dask", "fleet"),
    "distributed": ("distributed", "fleet"),
    "bokeh": ("bokeh", "fleet"),
    "jupyterlab": ("jupyterlab", "notebooks"),
    "ipykernel": ("ipykernel", "notebooks"),
    "jupytext": ("jupytext", "notebooks"),
    "nbclient": ("nbclient", "notebooks"),
    "papermill": ("papermill", "notebooks"),
    "vl_convert": ("vl-convert-python", "notebooks"),
    "anywidget": ("anywidget", "notebooks"),
    "ipywidgets": ("ipywidgets", "notebooks"),
}


#: the commands that need an extra whatever their arguments: checked before any work
COMMAND_EXTRAS: Final = {"record": "relay", "serve": "relay", "fleet": "fleet", "lab": "notebooks"}


def _absent(extra: str, modules: Collection[str] | None) -> list[str]:
    """The distributions of ``extra`` (of its ``modules`` alone, when given) whose modules
    cannot be imported, in ``EXTRAS`` order."""
    from importlib.util import find_spec

    dists = [
        dist
        for module, (dist, of) in EXTRAS.items()
        if of == extra and (modules is None or module in modules) and not find_spec(module)
    ]
    return list(dict.fromkeys(dists))


def missing(extra: str, modules: Collection[str] | None = None) -> str | None:
    """The line for ``extra`` when any of it is missing (any of its ``modules``, when a
    command needs those alone), naming every missing distribution at once (None: all there)."""
    if not (absent := _absent(extra, modules)):
        return None
    which = f"{absent[0]}, which is" if len(absent) == 1 else f"{', '.join(absent)}, which are"
    return f"needs {which} not installed: pip install 'cbi1kit[{extra}]'"


def require(extra: str) -> None:
    """Raise ``ModuleNotFoundError`` for the first module of ``extra`` that is missing (its
    line, from ``missing_extra``, names every one)."""
    from importlib.util import find_spec

    for module, (_dist, of) in EXTRAS.items():
        if of == extra and find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """What to install for a module an extra provides (None: not an extra's module)."""
    root = (exc.name or "").partition(".")[0]
    if root not in EXTRAS:
        return None
    dist, extra = EXTRAS[root]
    return missing(extra) or f"needs {dist}, which is not installed: pip install 'cbi1kit[{extra}]'"

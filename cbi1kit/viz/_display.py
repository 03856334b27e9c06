"""How charts display in a notebook: drawn offline in a live kernel, static SVG in report builds.

altair's default renderer and its ``JupyterChart`` widget load vega, vega-lite and vega-embed from
a CDN, and JupyterLab 4.6 renders vega-lite only up to v5 (altair 6 emits v6), so with no network
no chart draws. The widget is served instead with vl-convert's bundle of those libraries inlined
(altair's offline mode): nothing is fetched, and a brush still reaches Python.

Bundling that JavaScript costs about a second of vl-convert work per kernel, for the same bytes
every time; it is cached on disk (``offline_bundle``), keyed on what goes into it, so a kernel
after the first (and every kernel after ``make``, which warms it) reads it instead.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import altair as alt

__all__ = ["STATIC_ENV", "interactive_charts", "offline_bundle", "setup_notebook"]

#: Set (to ``svg``) by report builds: their notebooks run headless, so charts are static SVG.
STATIC_ENV = "CBI1KIT_CHART_RENDERER"


def interactive_charts() -> bool:
    """Whether charts may be live widgets: not in a static report build, and anywidget present."""
    if os.environ.get(STATIC_ENV):
        return False
    try:
        import anywidget  # noqa: F401
    except ImportError:
        return False
    return True


def setup_notebook() -> str:
    """Make every chart in this kernel draw with no network; returns altair's renderer name.

    A notebook calls it once, in its first code cell. Live (anywidget present, no report build):
    each chart is a ``JupyterChart`` whose JavaScript is inlined, so ``alt.JupyterChart`` made
    directly works offline too. Otherwise (a report build, or no anywidget): static SVG rendered
    by vl-convert, which needs no JavaScript at all.
    """
    if interactive_charts():
        _enable_offline()
        alt.renderers.enable("jupyter", offline=True)
    else:
        alt.renderers.enable("svg")
    return str(alt.renderers.active)


def _bundle_key() -> str:
    """What the offline bundle is made of: altair's widget source and version, vl-convert's
    version and the vega-lite version altair emits."""
    from importlib.metadata import version

    from altair.jupyter.jupyter_chart import load_js_src
    from altair.utils._importers import vl_version_for_vl_convert

    h = hashlib.sha256()
    parts = (version("altair"), version("vl-convert-python"), vl_version_for_vl_convert())
    for part in (*parts, load_js_src()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cbi1kit"


def offline_bundle() -> str:
    """``JupyterChart``'s JavaScript with vega, vega-lite and vega-embed inlined: from the disk
    cache when it holds this key, else bundled by altair (then cached; a cache that cannot be
    read or written is a miss, never an error)."""
    path = _cache_dir() / f"jupyterchart-{_bundle_key()}.js"
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    was = alt.JupyterChart._is_offline, alt.JupyterChart._esm
    alt.JupyterChart._is_offline = False  # bundle afresh, whatever this process did before
    alt.JupyterChart.enable_offline()
    esm = str(alt.JupyterChart._esm)
    alt.JupyterChart._is_offline, alt.JupyterChart._esm = was
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    except OSError:
        return esm
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(esm)
        os.replace(tmp, path)  # whole or not at all: a reader never sees half a bundle
    except OSError:
        Path(tmp).unlink(missing_ok=True)
    return esm


def _enable_offline() -> None:
    """altair's ``JupyterChart.enable_offline()``, with the bundle from ``offline_bundle``."""
    if alt.JupyterChart._is_offline:
        return
    alt.JupyterChart._esm = offline_bundle()
    alt.JupyterChart._is_offline = True

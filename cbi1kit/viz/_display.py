"""How charts display in a notebook: drawn offline in a live kernel, static SVG in report builds.

altair's renderers and ``JupyterChart`` load vega, vega-lite and vega-embed from a CDN, and
JupyterLab 4.6 renders vega-lite only up to v5 (altair 6 emits v6), so the widget is served with
vl-convert's bundle of them inlined: nothing is fetched, and a brush still reaches Python.
``LIVE_RENDERER`` skips altair's second full validation of the spec (0.9 s on notebook 04's churn
chart). The bundle (about a second of vl-convert per kernel) is cached on disk (``offline_bundle``),
keyed on its inputs; ``make`` warms it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any, cast

import altair as alt

#: Set (to ``svg``) by report builds: their notebooks run headless, so charts are static SVG.
STATIC_ENV = "CBI1KIT_CHART_RENDERER"

#: altair renderer ``setup_notebook`` enables in a live kernel: a ``JupyterChart``, offline.
LIVE_RENDERER = "cbi1kit-jupyter"


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
    """Make every chart in this kernel draw with no network; returns altair's renderer name. Call it
    once, in a notebook's first code cell. Live (anywidget present, no report build): each chart is
    a ``JupyterChart`` with its JavaScript inlined (``alt.JupyterChart`` made directly too);
    otherwise static SVG rendered by vl-convert."""
    if interactive_charts():
        _enable_offline()
        alt.renderers.register(LIVE_RENDERER, _live_renderer)
        alt.renderers.enable(LIVE_RENDERER)
    else:
        alt.renderers.enable("svg")
    return str(alt.renderers.active)


# Vega-Lite's top-level view kinds by their defining key (a unit spec has none of them): what
# altair's ``Chart.from_dict`` finds by validating against each class in turn.
_TOP_LEVEL: tuple[tuple[str, Any], ...] = (
    ("repeat", alt.RepeatChart),
    ("facet", alt.FacetChart),
    ("layer", alt.LayerChart),
    ("hconcat", alt.HConcatChart),
    ("vconcat", alt.VConcatChart),
    ("concat", alt.ConcatChart),
)


def chart_from_spec(spec: dict[str, Any]) -> Any:
    """The chart object of a validated spec, of the class its top-level key names."""
    kind = next((cls for key, cls in _TOP_LEVEL if key in spec), alt.Chart)
    return kind.from_dict(spec, validate=False)


def _live_renderer(spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    """altair's ``jupyter`` renderer without its second validation: ``spec`` comes from the
    chart's own ``to_dict``, which has just validated it."""
    chart = chart_from_spec(spec)
    widget = alt.JupyterChart(chart=chart, embed_options=metadata.get("embed_options"))
    return cast("dict[str, Any]", widget._repr_mimebundle_())


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

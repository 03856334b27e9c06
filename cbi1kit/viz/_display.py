"""How charts display in a notebook: drawn offline in a live kernel, static SVG in report builds.

altair's default renderer and its ``JupyterChart`` widget load vega, vega-lite and vega-embed from
a CDN, and JupyterLab 4.6 renders vega-lite only up to v5 (altair 6 emits v6), so with no network
no chart draws. The widget is served instead with vl-convert's bundle of those libraries inlined
(altair's offline mode): nothing is fetched, and a brush still reaches Python.
"""

from __future__ import annotations

import os

import altair as alt

__all__ = ["STATIC_ENV", "interactive_charts", "setup_notebook"]

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
        alt.JupyterChart.enable_offline()
        alt.renderers.enable("jupyter", offline=True)
    else:
        alt.renderers.enable("svg")
    return str(alt.renderers.active)

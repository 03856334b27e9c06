"""Fixtures several test modules share: the simulated relay and the recorder (``relayfixtures``),
and the full report; and hypothesis' profile."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

# every engine test runs the kernels, on small input too (an ``auto`` engine would run the
# reference there: docs/kernels.md); tests/test_kernel_cache.py holds the default to its word
os.environ.setdefault("CBI1KIT_SMALL_INPUT", "0")

import pytest
from hypothesis import settings
from relayfixtures import FAST, Running

from cbi1kit.data import mooncake_trace, sample_capture
from cbi1kit.relay._session import RecorderConfig
from cbi1kit.sim._hub import ServerConfig
from cbi1kit.sim._server import RelayServer
from cbi1kit.viz._report import CHART_KINDS, build_report

ROOT = Path(__file__).parents[1]

# Seeded by default, as every random generator here: the same examples on every run, so a red
# CI is a change, not a draw. ``HYPOTHESIS_PROFILE=explore make test`` searches afresh (a find
# there becomes an ``@example``, as in test_damaged_captures).
settings.register_profile("seeded", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "seeded"))


@pytest.fixture
def serve() -> Iterator[Callable[..., RelayServer]]:
    servers: list[RelayServer] = []

    def start(feed: object, config: ServerConfig = FAST, **kw: object) -> RelayServer:
        srv = RelayServer(feed, config, **kw).start()  # type: ignore[arg-type]
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop(0)


@pytest.fixture
def recorders() -> Iterator[Callable[[RecorderConfig], Running]]:
    running: list[Running] = []

    def start(config: RecorderConfig) -> Running:
        r = Running(config)
        running.append(r)
        return r

    yield start
    for r in running:
        if r.thread.is_alive():
            r.finish()


#: The notebook the report tests run headless, through papermill (the browser test runs them
#: all in JupyterLab, once, and builds its report from those runs).
HEADLESS_NOTEBOOK = "01_wire_format_tour"


@pytest.fixture(scope="session")
def full_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of the bundled capture with its trace and one notebook run by papermill,
    built once: the report tests read its files, the browser test opens them."""
    out = tmp_path_factory.mktemp("report")
    result = build_report(
        sample_capture(),
        out,
        trace=mooncake_trace(),
        notebooks_dir=ROOT / "notebooks",
        notebooks=[HEADLESS_NOTEBOOK],
    )
    assert set(result.pngs) == set(CHART_KINDS)
    assert set(result.notebooks) == {HEADLESS_NOTEBOOK}
    return out

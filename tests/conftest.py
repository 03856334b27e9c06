"""Fixtures for the tests that run the simulated relay and the recorder (``relayfixtures``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from relayfixtures import FAST, Running

from cbi1kit.relay._recorder import RecorderConfig
from cbi1kit.sim._server import RelayServer, ServerConfig


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

"""``ck.live`` against the simulated relay on loopback (#44): frames arrive, the lane shown is
replay's lane at that sequence, pause holds the dashboard still, ``stop()`` leaves no thread
and no file, plaintext and mTLS alike."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from certs import SERVER_NAME, make_pki
from relayfixtures import FAST

import cbi1kit as ck
from cbi1kit.analysis._watch import Watch
from cbi1kit.relay._transport import ClientTls, ServerTls
from cbi1kit.sim import RelayServer
from cbi1kit.viz._live import Live, state_html
from cbi1kit.viz._report import STATIC_ENV


def _wait(live: Live, frames: int, timeout: float = 30.0) -> None:
    ends = time.monotonic() + timeout
    while live.state.frames < frames and time.monotonic() < ends:
        time.sleep(0.05)
    assert live.state.frames >= frames, live


@pytest.fixture
def relay() -> Iterator[RelayServer]:
    server = RelayServer.from_simulation(ck.data.mooncake_trace(), pace=0.01, server_config=FAST)
    server.start()
    yield server
    server.stop()


def _same_as_replay(live: Live) -> int:
    sequence, words = live.watch.lane(0)
    assert sequence is not None and words is not None
    replayed = ck.replay(live.watch.path).lane_at(sequence)
    assert np.array_equal(words, replayed), sequence
    return sequence


def test_live_follows_a_relay_and_stops_every_thread(relay: RelayServer) -> None:
    before = set(threading.enumerate())
    live = ck.live(relay.address, interval=0.05, metrics="127.0.0.1:0")
    scratch = live.watch.path
    try:
        _wait(live, 40)
        first = _same_as_replay(live)
        _wait(live, live.state.frames + 20)
        assert _same_as_replay(live) > first  # it moves
        assert live.metrics is not None
        with urllib.request.urlopen(live.metrics.url, timeout=10) as response:
            assert b"cbi1kit_lane_load_factor{" in response.read()
    finally:
        live.stop()
    assert not live.running and not scratch.exists()  # the scratch recording goes with it
    time.sleep(0.2)
    left = {t for t in set(threading.enumerate()) - before if "cbi1kit-relay" not in t.name}
    assert not left, left  # a relay thread is the fixture's server's, which goes on
    live.stop()  # a second stop does nothing


def test_pause_holds_the_dashboard_and_resume_goes_on(relay: RelayServer) -> None:
    live = ck.live(relay.address, interval=0.05)
    drawn: list[int] = []
    live._listeners.append(lambda state: drawn.append(state.frames))
    try:
        _wait(live, 20)
        live.pause()
        time.sleep(0.2)
        held = len(drawn)
        _wait(live, live.state.frames + 20)  # figures go on while paused
        assert len(drawn) == held
        live.resume()
        _wait(live, live.state.frames + 5)
        time.sleep(0.2)
        assert len(drawn) > held
    finally:
        live.stop()


def test_live_over_mtls(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    tls = ServerTls.from_files(cert=pki.server_cert, key=pki.server_key, client_ca=pki.ca)
    config = replace(FAST, tls=tls)
    server = RelayServer.from_simulation(ck.data.mooncake_trace(), pace=0.01, server_config=config)
    server.start()
    client = ClientTls.from_files(ca=pki.ca, cert=pki.client_cert, key=pki.client_key)
    kept = tmp_path / "kept.kvrcap"
    live = ck.live(server.address, tls=client, authority=SERVER_NAME, output=kept, interval=0.05)
    try:
        _wait(live, 20)
        _same_as_replay(live)
    finally:
        live.stop()
        server.stop()
    assert kept.exists()  # an output named is kept


def test_the_dashboard_draws_the_state_picks_a_lane_and_stops(
    relay: RelayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("anywidget")
    monkeypatch.delenv(STATIC_ENV, raising=False)
    live = ck.live(relay.address, interval=0.05)
    try:
        _wait(live, 20)
        box = live.dashboard()
        (picker, pause, stop), board = box.children[0].children, box.children[1]
        _wait(live, live.state.frames + 10)
        time.sleep(0.2)
        lane = live.state.lanes[0]
        assert "3557a3c51c3769b5 (sim-dc-0)" in board.value
        assert [value for _, value in picker.options] == [-1, lane.dc_id]
        assert picker.label == "every lane"
        picker.value = lane.dc_id
        pause.value = True
        assert "(paused)" in board.value and pause.description == "resume"
        stop.click()
        assert not live.running and "(stopped)" in board.value
    finally:
        live.stop()


def test_without_a_live_kernel_the_dashboard_is_a_table(
    relay: RelayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STATIC_ENV, "png")
    live = ck.live(relay.address, interval=0.05)
    try:
        _wait(live, 10)
        assert live.dashboard() is live
        shown = live._repr_html_()
        assert "<table>" in shown and "sim-dc-0" in shown and shown.count("<span style") == 128
    finally:
        live.stop()
    assert "(stopped)" in live._repr_html_() and "stopped" in repr(live)


def test_state_html_lists_recent_violations() -> None:
    state = Watch(
        ck.data.sample_capture(), expected_format=ck.FilterFormat(seed=1, bucket_count=4096)
    ).poll()
    shown = state_html(state)
    assert "FormatMismatch" in shown and "<li>" in shown


def test_a_capture_it_cannot_read_on_is_said_not_hidden(
    relay: RelayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower's thread meets an unreadable capture: the dashboard says why and stops
    moving; the thread does not die silently."""
    live = ck.live(relay.address, interval=0.05)
    drawn: list[str] = []
    live._listeners.append(lambda state: drawn.append(live._status()))
    try:
        _wait(live, 5)

        def gone() -> None:
            raise FileNotFoundError(2, "No such file or directory", str(live.watch.path))

        monkeypatch.setattr(live.watch, "poll", gone)
        ends = time.monotonic() + 10
        while live.problem is None and time.monotonic() < ends:
            time.sleep(0.05)
        assert live.problem is not None and "cannot read on" in live.problem
        time.sleep(0.2)
        assert "cannot read on" in drawn[-1] and not live._poller.is_alive()
        assert "cannot read on" in live._repr_html_()
    finally:
        live.stop()


def test_a_metrics_address_it_cannot_serve_leaves_nothing_running(relay: RelayServer) -> None:
    before = set(threading.enumerate())
    with pytest.raises(ValueError, match="is no HOST:PORT"):
        ck.live(relay.address, metrics="nowhere")
    time.sleep(0.2)
    left = {t for t in set(threading.enumerate()) - before if "cbi1kit-relay" not in t.name}
    assert not left, left

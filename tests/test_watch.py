"""Watching a capture as it is written and a relay as it runs (#44): the lanes a watcher shows
are the lanes replay gives at the same sequence; counters, staleness and metrics are exact;
memory holds the lanes and a ring of violations; ``cbi1kit watch`` ends cleanly."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from certs import SERVER_NAME, make_pki
from cliutil import cli_run, one_line
from prometheus_client.parser import text_string_to_metric_families

import cbi1kit as ck
from cbi1kit.analysis._metrics import MetricsServer, WatchCollector
from cbi1kit.analysis._watch import Watch
from cbi1kit.ckf import lane_occupancy
from cbi1kit.data import sample_capture

ROOT = Path(__file__).parents[1]
SAMPLE = sample_capture()


@pytest.fixture(scope="module")
def report() -> ck.ReplayReport:
    return ck.replay(SAMPLE)


def _grow(src: Path, dst: Path, pieces: int) -> list[int]:
    """Cut points of ``src`` into ``pieces`` arbitrary byte slices (records torn between)."""
    size = src.stat().st_size
    rng = np.random.default_rng(44)
    return sorted({0, size, *rng.integers(1, size, pieces - 1).tolist()})


def test_a_growing_capture_shows_the_lane_replay_gives_at_that_sequence(
    tmp_path: Path, report: ck.ReplayReport
) -> None:
    data, path = SAMPLE.read_bytes(), tmp_path / "growing.kvrcap"
    watch = Watch(path)
    assert watch.poll().lanes == ()  # not there yet: nothing, no error
    seen = set()
    cuts = _grow(SAMPLE, path, 12)
    for start, end in itertools.pairwise(cuts):
        with path.open("ab") as f:
            f.write(data[start:end])
        state = watch.poll()
        for i, lane in enumerate(state.lanes):
            sequence, words = watch.lane(i)
            if sequence is None:
                continue
            seen.add(sequence)
            assert lane.sequence == sequence
            assert np.array_equal(words, report.lane_at(sequence)), sequence
            assert lane.occupied_buckets == int(np.count_nonzero(words))
    assert len(seen) > 5  # the lane was looked at many times on its way
    final = state.lanes[0]
    replayed = report.lanes[0]
    assert (state.frames, final.frames) == (report.frames, replayed.frames)
    assert final.deltas == replayed.counts["delta_applied"]
    assert final.images == ck.images_table(SAMPLE).height
    frames = ck.frames_table(SAMPLE).collect()
    assert final.bytes == frames["raw_len"].sum()
    slots = lane_occupancy(replayed.final_lane)
    assert final.load_factor == slots / (4 * len(replayed.final_lane))
    watch.close()


def test_a_lane_is_stale_past_the_max_age_since_its_last_message() -> None:
    last = ck.frames_table(SAMPLE).collect()["recv_time"].dt.epoch("ns").max()
    assert isinstance(last, int)
    now = [last + 9_000_000_000]
    watch = Watch(SAMPLE, max_age_s=10.0, clock=lambda: now[0])
    lane = watch.poll().lanes[0]
    assert lane.ready and not lane.stale and lane.age_s == pytest.approx(9.0, abs=1e-6)
    now[0] = last + 11_000_000_000
    lane = watch.poll().lanes[0]
    assert lane.stale and "STALE" in str(watch.poll())
    assert lane.images_per_s == 0 and lane.bytes_per_s == 0  # nothing came in between


def test_memory_holds_the_lanes_and_a_ring_of_violations(tmp_path: Path) -> None:
    """A capture that breaks rules again and again: the watch keeps the last ``recent``
    violations, the counts of all of them, and nothing else that grows."""
    data = bytearray(SAMPLE.read_bytes())
    path = tmp_path / "broken.kvrcap"
    path.write_bytes(bytes(data))
    broken = ck.replay(path, expected_format=ck.FilterFormat(seed=1, bucket_count=4096))
    assert len(broken.violations) > 2
    watch = Watch(path, recent=2, expected_format=ck.FilterFormat(seed=1, bucket_count=4096))
    state = watch.poll()
    assert len(state.recent) == 2
    assert state.recent == tuple(broken.violations[-2:])
    total = sum(sum(lane.violations.values()) for lane in state.lanes)
    assert total == len(broken.violations)
    player = watch._player
    assert not player._violations and not player._plane_log
    assert all(not p._violations for _, _, p in player.lanes())


def test_metrics_give_the_load_factor_replay_gives(report: ck.ReplayReport) -> None:
    collector = WatchCollector()
    server = MetricsServer(collector)
    try:
        collector.update(Watch(SAMPLE).poll())
        with urllib.request.urlopen(server.url, timeout=10) as response:
            text = response.read().decode()
    finally:
        server.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (load,) = families["cbi1kit_lane_load_factor"].samples
    lane = report.lanes[0]
    assert load.labels["dc"] == f"{lane.dc_id:016x}" and load.labels["dc_name"] == "sim-dc-0"
    assert load.labels["model"] == "mooncake/conversation"
    assert load.value == lane_occupancy(lane.final_lane) / (4 * len(lane.final_lane))
    (frames,) = families["cbi1kit_lane_frames"].samples
    assert frames.name == "cbi1kit_lane_frames_total" and frames.value == lane.frames
    assert families["cbi1kit_lane_stale"].samples[0].value == 1.0  # recorded in 2025


def test_watch_prints_the_last_state_as_json() -> None:
    code, out, err = cli_run("watch", str(SAMPLE), "--duration", "0.2", "--json")
    assert code == 0, err
    state = json.loads(out)
    (lane,) = state["lanes"]
    assert lane["dc_id"] == "3557a3c51c3769b5" and lane["frames"] == 5583
    assert state["source"] == str(SAMPLE)


def test_watch_text_fits_80_columns() -> None:
    code, out, err = cli_run("watch", str(SAMPLE), "--duration", "0.2")
    assert code == 0, err
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "3557a3c51c3769b5 (sim-dc-0)" in out and "STALE" in out


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["watch", "/no/such/folder/c.kvrcap", "--duration", "0.1"], 3),
        (["watch", str(SAMPLE), "--metrics", "nowhere"], 2),
        (["watch", str(SAMPLE), "--duration", "0"], 2),
    ],
)
def test_watch_refuses_with_one_line(argv: list[str], code: int) -> None:
    got, _out, err = cli_run(*argv)
    assert got == code and one_line(err), err


def test_watch_a_relay_shows_the_lane_its_recording_replays_to(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "cbi1kit", "serve", "--heartbeat", "0.2", "--duration", "60"]
    serve = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert serve.stdout is not None
        address = serve.stdout.readline().split(" on ")[1].split()[0]
        kept = tmp_path / "kept.kvrcap"
        code, out, err = cli_run("watch", address, "--duration", "2", "--json", "-o", str(kept))
    finally:
        serve.kill()
        serve.wait(10)
    assert code == 0, err
    state = json.loads(out)
    (lane,) = state["lanes"]
    assert lane["frames"] > 0 and lane["ready"] and state["source"] == address
    words = ck.replay(kept).lane_at(lane["sequence"])  # the recording, at the shown sequence
    assert lane["occupied_buckets"] == int(np.count_nonzero(words))
    assert lane["load_factor"] == lane_occupancy(words) / (4 * len(words))


def test_ctrl_c_ends_watch_with_the_last_state_and_130(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "cbi1kit", "watch", str(SAMPLE), "--json"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert json.loads(out)["frames"] == 5583
    assert b"Traceback" not in err


def test_watch_a_relay_over_mtls(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    argv = [sys.executable, "-m", "cbi1kit", "serve", "--heartbeat", "0.2", "--duration", "60"]
    argv += ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    argv += ["--client-ca", str(pki.ca)]
    serve = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert " over mTLS " in line, line
        address = line.split(" on ")[1].split()[0]
        watch = ["watch", address, "--duration", "2", "--json", "--ca-cert", str(pki.ca)]
        watch += ["--client-cert", str(pki.client_cert), "--client-key", str(pki.client_key)]
        code, out, err = cli_run(*watch, "--authority", SERVER_NAME)
    finally:
        serve.kill()
        serve.wait(10)
    assert code == 0, err
    (lane,) = json.loads(out)["lanes"]
    assert lane["frames"] > 0 and lane["ready"]


def test_each_lane_of_a_dc_serving_two_models_names_its_own_model(tmp_path: Path) -> None:
    """Models belong to pools, not DCs: one DC serving two models is two lanes, each labelled
    with the model the catalog registers on its pool (as replay's lanes and ``view`` have it)."""
    from cbi1kit.sim import FleetModel, record_fleet

    capture = tmp_path / "two.kvrcap"
    models = (FleetModel("m/a", "standard", sessions=8), FleetModel("m/b", "eagle", sessions=8))
    pools = record_fleet(models, capture, dcs=1, capacity_blocks=256)
    expected = {
        str(feed.identity.pool_id): (model,)
        for model, feeds in pools.feeds.items()
        for feed in feeds
    }
    state = Watch(capture).poll()
    assert len(state.lanes) == 2 and len({lane.dc_id for lane in state.lanes}) == 1
    assert {lane.pool: lane.models for lane in state.lanes} == expected
    collector = WatchCollector()
    collector.update(state)
    samples = [
        s for m in collector.collect() if m.name == "cbi1kit_lane_load_factor" for s in m.samples
    ]
    assert sorted(s.labels["model"] for s in samples) == ["m/a", "m/b"]
    from cbi1kit.viz._live import state_html

    shown = state_html(state)  # the dashboard's rows too, by their models
    assert "(sim-dc-0) · m/a</td>" in shown and "(sim-dc-0) · m/b</td>" in shown, shown
    text = str(state)  # the two rows of one DC, told apart by the model under each
    assert (
        "\n  model m/a" in text
        and "\n  model m/b" in text
        and max(map(len, text.split("\n")[1:])) <= 80
    )


def test_a_watch_that_reads_nothing_is_exit_3_not_an_empty_table(tmp_path: Path) -> None:
    """A capture that never appears or stays empty, and a relay that never answers, end the
    watch with one line and exit 3 (the README's missing, empty, unreachable), nothing printed."""
    empty = tmp_path / "empty.kvrcap"
    empty.touch()
    for target, says in (
        (str(tmp_path / "never.kvrcap"), "no such file after 0.5 s"),
        (str(empty), "empty input after 0.5 s"),
        ("127.0.0.1:1", "still waiting for the relay at 127.0.0.1:1"),
    ):
        code, out, err = cli_run("watch", target, "--duration", "0.5")
        assert (code, out) == (3, "") and one_line(err) and says in err, (target, err)


def test_a_long_violation_is_cut_at_a_word_in_80_columns(tmp_path: Path) -> None:
    """The text's violation lines end at a word with an ellipsis, never mid-word."""
    data = bytearray(SAMPLE.read_bytes())
    data[len(data) // 3] ^= 0xFF
    flipped = tmp_path / "flip.kvrcap"
    flipped.write_bytes(bytes(data))
    state = Watch(flipped).poll()
    lines = [line for line in str(state).split("\n") if line.startswith("  ! ")]
    assert lines and all(len(line) <= 80 for line in lines)
    for line, v in zip(lines, state.recent[-5:], strict=True):
        shown = line[4:].removesuffix(" …")
        assert v.describe().startswith(shown) and v.describe()[len(shown) : len(shown) + 1] in (
            "",
            " ",
        )

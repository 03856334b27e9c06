"""Against the real relay: Dynamo's own ``KvDcRelay`` (``ai-dynamo-runtime``, the ``oracle``
extra) on loopback in a private network namespace, a worker publishing seeded KV events, and
``cbi1kit record`` recording it (``tools/realrelay.py`` drives the three). The capture must
replay valid; every live chain must be found at full depth by ``explain`` and every evicted
one not at all; the lane's occupied slots must equal the live blocks; ``record --list`` must
show the pool with its DC's id. So the recorder, the hashing and the filter model agree with
upstream end to end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import cbi1kit as ck
from cbi1kit.data import real_capture
from cbi1kit.hashing._pools import stable_dc_id

pytestmark = [pytest.mark.oracle, pytest.mark.slow]
pytest.importorskip("dynamo._core")

from tools.realrelay import DC, MODEL  # noqa: E402

ROOT = Path(__file__).parents[1]


def _namespace_refused() -> str | None:
    """Why a private network namespace cannot be made here (None: it can)."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "-n", "true"], check=False, capture_output=True, text=True)
    if probe.returncode:
        return f"unshare -n is not allowed here: {probe.stderr.strip()}"
    return None


REFUSED = _namespace_refused()


def record_real_relay(out: Path, **spec: Any) -> list[dict[str, Any]]:
    """Run the driver in a namespace of its own; the workload it published."""
    if REFUSED is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the real relay: {REFUSED}")
        pytest.skip(REFUSED)
    options = [f"--{name.replace('_', '-')}={value}" for name, value in spec.items()]
    run = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "tools.realrelay", str(out), *options],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=float(spec["seconds"]) + 120,
        env={**os.environ, "RUST_LOG": "warn"},
    )
    # the recorder's exit: 0, or 3 (unreachable, said in one line) once the relay shut down
    assert run.returncode == (0 if spec.get("shutdown_after") is None else 3), run.stderr[-4000:]
    workload: list[dict[str, Any]] = json.loads(Path(f"{out}.workload.json").read_text())
    return workload


@pytest.mark.parametrize(
    ("expected_unique_blocks", "chunks"),
    [(4_096, 1), (2_097_152, 2)],
    ids=["one snapshot chunk", "two snapshot chunks"],
)
def test_the_real_relay_recorded_agrees_with_its_workload(
    tmp_path: Path, expected_unique_blocks: int, chunks: int
) -> None:
    out = tmp_path / "real.kvrcap"
    workload = record_real_relay(
        out, expected_blocks=expected_unique_blocks, seed=11, chains=60, evict=20, seconds=8
    )
    listed = Path(f"{out}.list.txt").read_text()  # the wire carries the DC's id, not its name
    assert MODEL in listed and f"dc={stable_dc_id(DC).value:016x}" in listed, listed
    cap = ck.open(out)
    frames = cap.frames.collect()
    snapshot = frames.filter(frames["kind"] == "SNAPSHOT_CHUNK")
    assert snapshot.height >= chunks
    assert set(snapshot["chunk_count"].to_list()) == {chunks}
    assert_agrees(cap, workload)


def assert_agrees(cap: ck.Capture, workload: list[dict[str, Any]]) -> None:
    """Replay valid; every live chain at full depth, every evicted one absent; occupied slots
    equal to the live blocks."""
    report = cap.replay()
    assert report.ok and not report.violations
    for chain in workload:
        lane = cap.explain(model=MODEL, tokens=chain["tokens"]).lanes[0]
        assert lane.ready
        assert lane.depth == (0 if chain["evicted"] else chain["blocks"]), chain
    assert cap.stats().occupied_slots == sum(c["blocks"] for c in workload if not c["evicted"])


def test_the_bundled_recording_of_the_real_relay_agrees_with_its_workload() -> None:
    """The bundled recording (``make real-sample``) holds to the same checks, without a relay."""
    capture = real_capture()
    workload = json.loads(Path(f"{capture}.workload.json").read_text())
    assert len(workload) == 200 and sum(c["evicted"] for c in workload) == 60
    assert_agrees(ck.open(capture), workload)


def plane_facts(path: Path) -> dict[str, Any]:
    """What a recording shows of a relay's ways, beyond its frames: how each RPC's first stream
    ended (status, trailers), the first readiness revision, the pool-load fields it fills."""
    from cbi1kit._proto import kvrelay_v1_pb2 as pb
    from cbi1kit.capture._file import RecordType, decode_stream_close, decode_stream_open
    from cbi1kit.capture._reader import CaptureReader

    methods: dict[int, str] = {}
    facts: dict[str, Any] = {"closes": {}}
    with CaptureReader(path) as reader:
        for record in reader.records():
            method = methods.get(record.stream_id, "")
            if record.type == RecordType.STREAM_OPEN:
                methods[record.stream_id] = decode_stream_open(record.body).method.split("/")[-1]
            elif record.type == RecordType.STREAM_CLOSE:
                close = decode_stream_close(record.body)
                trailers = tuple(k for k, _ in close.trailing_metadata if k != "date")
                facts["closes"].setdefault(method, (close.status_name, trailers))
            elif record.type == RecordType.MESSAGE and method == "SubscribeServingReadiness":
                update = pb.ServingReadinessUpdate.FromString(bytes(record.body))
                facts.setdefault("readiness_revision", update.revision)
            elif record.type == RecordType.MESSAGE and method == "SubscribeKvPoolLoad":
                for entry in pb.KvPoolLoadUpdate.FromString(bytes(record.body)).pools[:1]:
                    filled = {f.name for f, _ in entry.ListFields()} - {"producer"}
                    facts.setdefault("load_fields", filled)
    return facts


def test_the_simulated_relay_like_1_6_1_ends_and_reports_as_the_real_one(tmp_path: Path) -> None:
    """``cbi1kit serve --like 1.6.1`` and Dynamo's own relay, each recorded and then shut down
    under the recorder: the same RPC left out, the same stream ends, readiness revision and
    pool-load fields."""
    from cbi1kit.sim._feeds import ProducerFeed
    from cbi1kit.sim._hub import ServerConfig
    from cbi1kit.sim._server import RelayServer

    real = tmp_path / "real.kvrcap"
    record_real_relay(
        real, expected_blocks=4_096, seed=3, chains=10, evict=2, seconds=20, shutdown_after=2
    )
    sim = tmp_path / "sim.kvrcap"
    feed = ProducerFeed(expected_blocks=4_096, seed=3, steps=10, model=MODEL, dc=DC)
    server = RelayServer([feed], ServerConfig(like="1.6.1")).start()
    options = ["-o", str(sim), "--duration", "20", "--give-up-after", "2", "--quiet"]
    recorder = subprocess.Popen(
        [sys.executable, "-m", "cbi1kit", "record", server.address, *options]
    )
    try:
        subprocess.run([sys.executable, "-c", "import time; time.sleep(4)"], check=True)
        server.stop()
        assert recorder.wait(60) == 3  # the relay went away: unreachable, said in one line
    finally:
        recorder.kill()
    theirs, ours = plane_facts(real), plane_facts(sim)
    assert theirs["closes"]["SubscribeServingLoad"][0] == "UNIMPLEMENTED"
    assert theirs["closes"].pop("SubscribeKvPool") in SHUTDOWN_ENDS
    assert ours["closes"].pop("SubscribeKvPool") in SHUTDOWN_ENDS
    assert ours == theirs


# How 1.6.1's pool stream ends when the relay shuts down, a race seen in 6 runs: the socket
# drops first (4 of 6); the relay's own status comes first (UNAVAILABLE, its reason trailer
# PUBLICATION_UNAVAILABLE; 1 of 6); or its empty catalog does, and the recorder ends the
# withdrawn pool's call itself (CANCELLED, the trailer already in; 1 of 6).
SHUTDOWN_ENDS = {
    ("UNAVAILABLE", ()),
    ("UNAVAILABLE", ("kv-relay-error-reason",)),
    ("CANCELLED", ("kv-relay-error-reason",)),
}


def test_a_release_is_named_or_refused() -> None:
    from cbi1kit.sim._hub import RELEASES, ServerConfig

    like = ServerConfig(like="1.6.1")
    assert "SubscribeServingLoad" in like.unimplemented
    assert like.release is RELEASES["1.6.1"] and like.release.expected_blocks == 1_048_576
    assert ServerConfig().release is None
    with pytest.raises(ValueError, match=r"1\.6\.1"):
        ServerConfig(like="1.5")


def test_a_relay_restarted_under_the_recorder_is_followed(tmp_path: Path) -> None:
    """Dynamo's relay stopped and started again on its address mid-recording: the recorder
    resubscribes to the new generation; the capture holds two snapshot sessions and replays
    valid. (What the restarted relay rebuilds is its own affair: 1.6.1 fences a worker whose
    local indexer's dump it cannot replay, and serves its lane empty.)"""
    out = tmp_path / "restarted.kvrcap"
    record_real_relay(out, seed=5, chains=30, evict=10, seconds=14, restart_after=2)
    cap = ck.open(out)
    report = cap.replay()
    assert report.ok and not report.violations
    assert report.counts["snapshot_installed"] == 2
    lane = report.lanes[0]
    assert len(lane.sessions) == 2 and lane.sessions[0].producer != lane.sessions[1].producer


def catalog_history(path: Path) -> list[tuple[int, list[int]]]:
    """Each catalog update recorded: its revision and its pools' layout generations."""
    from cbi1kit._proto import kvrelay_v1_pb2 as pb
    from cbi1kit.capture._file import RecordType, decode_stream_open
    from cbi1kit.capture._reader import CaptureReader

    catalogs, history = set(), []
    with CaptureReader(path) as reader:
        for record in reader.records():
            if record.type == RecordType.STREAM_OPEN:
                if decode_stream_open(record.body).method.endswith("/WatchKvPoolCatalog"):
                    catalogs.add(record.stream_id)
            elif record.type == RecordType.MESSAGE and record.stream_id in catalogs:
                update = pb.KvPoolCatalogUpdate.FromString(bytes(record.body))
                pools = update.snapshot.pools
                history.append((update.revision, [p.producer.layout_generation for p in pools]))
    return history


def test_a_worker_that_registers_again_is_followed_to_its_new_generation(tmp_path: Path) -> None:
    """The worker's model unregistered and registered again mid-recording: the catalog
    withdraws the pool, then lists it under a new layout generation, and the recorder follows
    it there (a second snapshot session), the capture still valid."""
    out = tmp_path / "reregistered.kvrcap"
    record_real_relay(out, seed=7, chains=30, evict=10, seconds=16, reregister_after=2)
    history = catalog_history(out)
    generations = [gens for _, gens in history]
    assert generations[0] == [1] and [] in generations and generations[-1] == [2], history
    assert [rev for rev, _ in history] == sorted({rev for rev, _ in history})
    report = ck.open(out).replay()
    assert report.ok and not report.violations
    assert report.counts["snapshot_installed"] == 2


def test_serve_like_1_6_1_lists_upstreams_filter_size() -> None:
    """``cbi1kit serve --like 1.6.1`` sizes its pool's filter as the release does by default:
    1,048,576 expected blocks, 524,288 buckets (one 4 MiB snapshot chunk)."""
    serve = subprocess.Popen(
        [sys.executable, "-m", "cbi1kit", "serve", "--like", "1.6.1", "--duration", "30"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        address = serve.stdout.readline().split(" on ")[1].split()[0]  # "serving ... on HOST:PORT"
        listed = subprocess.run(
            [sys.executable, "-m", "cbi1kit", "record", address, "--list"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    finally:
        serve.kill()
        serve.wait(10)
    assert "buckets=524288" in listed, listed

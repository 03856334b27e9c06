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
from cbi1kit.hashing._identity import stable_dc_id

pytestmark = pytest.mark.oracle
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
    assert run.returncode == 0, run.stderr[-4000:]
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
        out,
        expected_blocks=expected_unique_blocks,
        seed=11,
        chains=60,
        evict=20,
        seconds=8,
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
    """``data/real.kvrcap`` (``make real-sample``) holds to the same checks, without a relay."""
    capture = ROOT / "data" / "real.kvrcap"
    workload = json.loads(Path(f"{capture}.workload.json").read_text())
    assert len(workload) == 200 and sum(c["evicted"] for c in workload) == 60
    assert_agrees(ck.open(capture), workload)

"""A real Prometheus (Debian's, installed by ``make test`` as chromium is) scrapes ``cbi1kit watch
--metrics`` on loopback, and a PromQL query through its HTTP API gives the load factor replay
gives for that lane (#44). Skipped where prometheus is missing; under CI=true that fails."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import cbi1kit as ck
from cbi1kit.ckf import lane_occupancy
from cbi1kit.data import sample_capture

ROOT = Path(__file__).parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(port: int, promql: str) -> list[dict[str, object]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


@pytest.fixture(scope="module")
def prometheus() -> str:
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("prometheus is missing under CI=true (make prometheus installs it)")
        pytest.skip("prometheus is missing: apt-get install prometheus (make test does, as root)")
    return found


def test_prometheus_scrapes_watch_and_promql_gives_replays_load(
    prometheus: str, tmp_path: Path
) -> None:
    metrics, web = _free_port(), _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: cbi1kit\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{metrics}']\n"
    )
    watch = [sys.executable, "-m", "cbi1kit", "watch", str(sample_capture())]
    watch += ["--metrics", f"127.0.0.1:{metrics}", "--duration", "60"]
    server = [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'db'}"]
    server += [f"--web.listen-address=127.0.0.1:{web}"]
    procs = [
        subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for argv in (watch, server)
    ]
    try:
        found: list[dict[str, object]] = []
        ends = time.monotonic() + 45
        while not found and time.monotonic() < ends:
            time.sleep(1)
            try:
                found = _query(web, 'cbi1kit_lane_load_factor{dc_name="sim-dc-0"}')
            except OSError:
                continue  # not listening yet
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(20)
    (series,) = found
    lane = ck.replay(sample_capture()).lanes[0]
    expected = lane_occupancy(lane.final_lane) / (4 * len(lane.final_lane))
    assert series["metric"]["dc"] == f"{lane.dc_id:016x}"  # type: ignore[index]
    assert float(series["value"][1]) == expected  # type: ignore[index]

"""One name per DC (#47 item 5): the hex id everywhere, the name a user said beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
from cliutil import cli_run
from relayfixtures import Running, recorder_config, subscriptions, wait_for

import cbi1kit as ck
from cbi1kit.analysis._dataset import export_dataset
from cbi1kit.analysis._schema import with_dc_names
from cbi1kit.hashing import dc_text, learn_dc_names, stable_dc_id
from cbi1kit.hashing._dc_names import dc_fields, dc_name, said_dc_names
from cbi1kit.relay._session import PoolSelector
from cbi1kit.sim._feeds import ProducerFeed
from cbi1kit.sim._server import RelayServer

ROOT = Path(__file__).resolve().parents[1]


def _fresh(code: str, **env: str) -> str:
    """What a new process prints: the names it knows are its own, not this test process's."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, **env},
    )
    return out.stdout.strip()


def test_a_name_is_shown_only_beside_the_id_it_hashes_to() -> None:
    named = stable_dc_id("dc-names-test-east").value
    assert dc_text(named) == f"{named:016x}" and dc_name(named) is None
    learn_dc_names(["dc-names-test-east", f"{named:016x}", ""])  # an id is no name
    assert dc_text(named) == f"{named:016x} (dc-names-test-east)"
    assert dc_fields(named) == {"dc_id": f"{named:016x}", "dc_name": "dc-names-test-east"}
    assert dc_fields(None) == {"dc_id": None, "dc_name": None} and dc_text(None) == "-"
    sim = stable_dc_id("sim-dc-3").value  # the simulator's own DCs are named from the start
    assert dc_text(sim).endswith("(sim-dc-3)")


def test_the_environment_names_dcs() -> None:
    code = "from cbi1kit.hashing import dc_text, stable_dc_id as s; print(dc_text(s('west').value))"
    shown = _fresh(code, CBI1KIT_DC_NAMES=" east , west")
    assert shown == f"{stable_dc_id('west').value:016x} (west)"
    assert said_dc_names(["a", "a", "0123456789abcdef"]) == ["a"]


def test_a_recording_keeps_the_names_it_was_told(
    tmp_path: Path, serve: Callable[..., RelayServer]
) -> None:
    srv = serve([ProducerFeed(steps=1, dc="dc-names-rec-a"), ProducerFeed(steps=1, dc="b")])
    path = tmp_path / "named.kvrcap"
    cfg = recorder_config(srv.address, path, selector=PoolSelector(dcs=("dc-names-rec-a",)))
    rec = Running(cfg)
    wait_for(lambda: rec.report.last_sequence == 1)
    rec.finish()
    assert all(s.info["dc_names"] == ["dc-names-rec-a"] for s in subscriptions(path))
    code = f"import cbi1kit as ck; print(repr(ck.open({str(path)!r}).replay()))"
    assert "(dc-names-rec-a)]" in _fresh(code)  # a new process learns it from the capture
    code, out, err = cli_run("stats", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["dc_name"] == "dc-names-rec-a"


def test_a_dataset_partition_names_its_dc_as_reports_do(tmp_path: Path) -> None:
    export_dataset([ck.data.sample_capture()], tmp_path / "ds")
    dirs = sorted(p.name for p in (tmp_path / "ds" / "frames").glob("dc=*"))
    lane = ck.open(ck.data.sample_capture()).replay().lane()
    assert dirs == [f"dc={lane.dc_id:016x}"]
    from cbi1kit.fleet import run_local

    churn = run_local("churn", tmp_path / "ds")
    assert set(churn["dc_name"].to_list()) == {dc_name(lane.dc_id)} != {None}


def test_a_table_with_dc_ids_gains_their_names() -> None:
    ids = [stable_dc_id("sim-dc-0").value, 7, None]
    got = with_dc_names(
        pl.DataFrame({"dc_id": ids, "n": [1, 2, 3]}, schema_overrides={"dc_id": pl.UInt64})
    )
    assert got.columns == ["dc_id", "dc_name", "n"]
    assert got["dc_name"].to_list() == ["sim-dc-0", None, None]

"""The simulated fleet: every model on every DC as a pool of one relay (#15)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cliutil import cli_run
from errorcheck import raises_variant

from cbi1kit.analysis import global_view, replay
from cbi1kit.errors import SimulationError
from cbi1kit.hashing import KvQueryHashFormat, resolve_lora_name
from cbi1kit.relay._messages import descriptor_from_wire
from cbi1kit.sim import FleetModel, Simulator, SimulatorConfig, record_fleet
from cbi1kit.sim._fleet import fleet_pools

MODELS = (
    FleetModel("fleet/chat", "lora", {"adapter-support": "support-bot"}, sessions=20),
    FleetModel("fleet/draft", "eagle", sessions=20, seed=1),
)


def test_every_model_on_every_dc_is_a_pool_of_its_own() -> None:
    pools = fleet_pools(MODELS, dcs=3, capacity_blocks=512)
    feeds = pools.all_feeds()
    assert len(feeds) == 6
    assert len({f.identity.pool_id for f in feeds}) == 6
    for model in MODELS:
        descs = [descriptor_from_wire(f.descriptor()) for f in pools.feeds[model.model]]
        assert len({d.producer.pool_id.dc_id for d in descs}) == 3
        assert len({d.producer.pool_id.indexer_domain for d in descs}) == 1  # one table
        expected = KvQueryHashFormat.DYNAMO_EAGLE_V1 if model.hash_space == "eagle" else None
        for d in descs:
            if expected is not None:
                assert d.query_semantics.hash_format is expected
            assert d.serves(model.model)
    chat = descriptor_from_wire(pools.feeds["fleet/chat"][0].descriptor())
    # the alias resolves to the adapter whose canonical name salts the request's blocks
    assert resolve_lora_name(chat.registrations, "support-bot") == "adapter-support"
    assert resolve_lora_name(chat.registrations, "fleet/chat") is None


def test_a_feed_played_to_its_end_holds_the_simulators_lane() -> None:
    pools = fleet_pools(MODELS[1:], dcs=2, capacity_blocks=512)
    config = SimulatorConfig(
        dcs=2, workers_per_dc=2, capacity_blocks=512, policy="ckf", model="fleet/draft"
    )
    sim = Simulator(config)
    sim.run(pools.workloads["fleet/draft"])
    for dc, feed in enumerate(pools.feeds["fleet/draft"]):
        while feed.advance() is not None:
            pass
        assert np.array_equal(feed.words(), sim.words(dc))


def test_models_must_be_distinct() -> None:
    with raises_variant(SimulationError, "Config", match="distinct models"):
        fleet_pools([MODELS[0], MODELS[0]])
    with pytest.raises(ValueError):  # the family is a ValueError too
        fleet_pools([])


def test_a_recorded_fleet_views_as_its_producers_lanes(tmp_path: Path) -> None:
    """serve → record of 2 models × 3 DCs: every lane replays cleanly and each model's view
    (by its name, and the LoRA model's by its adapter's alias) holds the producers' lanes."""
    capture = tmp_path / "fleet.kvrcap"
    pools = record_fleet(MODELS, capture, dcs=3, capacity_blocks=512)
    report = replay(capture)
    assert report.ok and len(report.lanes) == 6
    for model, asked in (("fleet/chat", "support-bot"), ("fleet/draft", "fleet/draft")):
        view = global_view(report, model=asked)
        (domain,) = view.domains
        by_dc = {lane.pool.dc_id: lane for lane in domain.lanes}
        for feed in pools.feeds[model]:
            lane = by_dc[feed.identity.pool_id.dc_id]
            assert lane.ready and lane.sequence == feed.sequence
            assert np.array_equal(domain.table.lane_words(lane.lane), feed.words())
    with raises_variant(SimulationError, "Config", match="exists"):
        record_fleet(MODELS, capture, dcs=1)


def test_a_lane_of_a_dc_serving_two_models_is_picked_by_model_or_pool_key(tmp_path: Path) -> None:
    """One DC, two models (#47): the DC alone names two lanes, so ``stats`` and ``report`` say
    to pick by pool key or model; ``--model`` and the pool key printed each pick one; ``diff``
    lists the lanes it counts."""
    capture = tmp_path / "two.kvrcap"
    record_fleet(MODELS, capture, dcs=1, capacity_blocks=512)
    lanes = replay(capture).lanes
    assert len(lanes) == 2 and lanes[0].dc_id == lanes[1].dc_id
    dc, key = f"{lanes[0].dc_id:016x}", str(lanes[1].pool)
    for argv in (["stats", str(capture)], ["stats", str(capture), "--dc", dc]):
        code, _, err = cli_run(*argv, "--no-progress")
        assert code == 2 and "2 lanes match (pool " in err and "--model" in err, err
    code, _, err = cli_run("diff", str(capture), "--dc", dc, "--no-progress")
    assert code == 2 and err.count("DC ") == 2, err  # the two it counts, not every lane
    keys = ("--dc-a", str(lanes[0].pool), "--dc-b", key)  # diff takes the pool keys too
    code, out, err = cli_run("diff", str(capture), *keys, "--no-progress")
    assert code in (0, 1) and "buckets" in out, err
    picked = {}
    for name, argv in {
        "model": ["--model", "fleet/draft"],
        "dc and model": ["--dc", dc, "--model", "fleet/chat"],
        "pool key": ["--dc", key],
        "alias": ["--model", "support-bot"],
    }.items():
        code, out, err = cli_run("stats", str(capture), *argv, "--json", "--fpr-probes", "0")
        assert code == 0, (name, err)
        picked[name] = json.loads(out)["occupied_slots"]
    assert picked["alias"] == picked["dc and model"]
    code, out, err = cli_run(
        "report", str(capture), "-o", str(tmp_path / "r"), "--no-notebooks", "--dc", key
    )
    assert code == 0, err

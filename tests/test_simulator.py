"""The KV-cache simulator: LRU caches, engine events, routing, and CKF routing accuracy.

Tests that look inside the members and producers run the reference engine, whose state is
Python objects; ``test_sim_engines.py`` holds the compiled engine to it."""

from __future__ import annotations

import numpy as np
import pytest
from errorcheck import raises_variant

from cbi1kit.ckf._stats import estimated_false_positive_rate
from cbi1kit.data import mooncake_trace
from cbi1kit.errors import SimulationError
from cbi1kit.sim._engine import Simulator
from cbi1kit.sim._simulator import ReferenceSimulator, SimulatorConfig
from cbi1kit.sim._workload import Workload, read_mooncake, synthetic_chat

TRACE = mooncake_trace()


@pytest.fixture(scope="module")
def trace() -> Workload:
    return read_mooncake(TRACE, limit=4000)


def _check_consistent(sim: ReferenceSimulator, w: Workload) -> None:
    """Caches within capacity and prefix-closed; producers hold exactly the caches' union."""
    cap = sim.config.capacity_blocks
    for m in sim.members:
        assert len(m.cache) <= cap
    for i in range(len(w)):
        seq = w.blocks(i)[1].tolist()
        for m in sim.members:
            present = [h in m.cache for h in seq]
            assert present == sorted(present, reverse=True), "cache is not prefix-closed"
    for dc, state in enumerate(sim.states):
        union = set().union(*(m.cache.keys() for m in sim.by_dc[dc]))
        assert state.owner_count() == len(union)
        if not state.capacity_failures:
            assert set(state.resident_canonicals().tolist()) == union
        assert np.array_equal(sim.table.lane_words(dc), state.words())


@pytest.mark.parametrize("policy", ["round_robin", "random", "exact", "ckf"])
def test_every_policy_keeps_producers_equal_to_caches(trace: Workload, policy: str) -> None:
    w = trace.head(600)
    sim = ReferenceSimulator(
        SimulatorConfig(dcs=2, workers_per_dc=2, dp_ranks=2, capacity_blocks=300, policy=policy)  # type: ignore[arg-type]
    )
    res = sim.run(w)
    assert res.requests == len(w) and not res.event_errors
    assert res.events["stored"] > 0 and res.events["removed"] > 0
    assert res.stored_blocks - res.evicted_blocks == sum(len(m.cache) for m in sim.members)
    assert res.hit_blocks + res.stored_blocks <= res.requested_blocks
    assert {m.dp_rank for m in sim.members if m.requests} == {0, 1}
    _check_consistent(sim, w)


def test_round_robin_balances_and_random_is_seeded(trace: Workload) -> None:
    w = trace.head(400)
    rr = Simulator(SimulatorConfig(workers_per_dc=4, policy="round_robin")).run(w)
    sims = [
        ReferenceSimulator(SimulatorConfig(workers_per_dc=4, policy="random", seed=s))
        for s in (1, 1, 2)
    ]
    for s in sims:
        s.run(w)
    counts = [[m.requests for m in s.members] for s in sims]
    assert counts[0] == counts[1] != counts[2]
    rr_sim = ReferenceSimulator(SimulatorConfig(workers_per_dc=4, policy="round_robin"))
    rr_sim.run(w)
    assert [m.requests for m in rr_sim.members] == [100] * 4
    assert rr.requests == 400


def test_prefix_aware_routing_beats_round_robin(trace: Workload) -> None:
    w = trace.head(2000)
    cfg = {"dcs": 4, "workers_per_dc": 2, "capacity_blocks": 1024}
    rr = Simulator(SimulatorConfig(**cfg, policy="round_robin")).run(w)  # type: ignore[arg-type]
    ex = Simulator(SimulatorConfig(**cfg, policy="exact")).run(w)  # type: ignore[arg-type]
    assert ex.hit_rate > rr.hit_rate + 0.05


def test_ckf_routing_false_positive_rate_matches_8_alpha(trace: Workload) -> None:
    """CKF-routed vs exact-routed on the same trace: the per-probe FPR of distinct absent items
    has 8α/65534 at the probes' loads inside its 95 % interval, and routing quality is close to
    exact."""
    cfg = {"dcs": 4, "workers_per_dc": 2, "capacity_blocks": 2048}
    ex = Simulator(SimulatorConfig(**cfg, policy="exact")).run(trace)  # type: ignore[arg-type]
    ck = Simulator(SimulatorConfig(**cfg, policy="ckf")).run(trace)  # type: ignore[arg-type]
    assert ck.absent_probes > 200_000
    # each absent (lane, item) is one trial: never more probes than distinct items per lane
    assert ck.absent_probes <= 4 * trace.unique_blocks()
    measured, estimated = ck.measured_fpr, ck.estimated_fpr
    assert measured is not None and estimated is not None and ck.mean_probe_load is not None
    assert ck.fpr is not None
    low, high = ck.fpr.interval
    assert low <= ck.expected_false_positives / ck.absent_probes <= high
    print(
        f"\nCKF routing: {ck.false_positives} false positives in {ck.absent_probes} absent "
        f"probes: measured FPR {measured:.3e}, 8α/65534 at α={ck.mean_probe_load:.3f}: "
        f"{estimated:.3e} (expected count {ck.expected_false_positives:.1f}); hit rate "
        f"ckf {ck.hit_rate:.4f} vs exact {ex.hit_rate:.4f}"
    )
    assert ck.false_positives > 0
    assert estimated / 3 <= measured <= 3 * estimated
    assert estimated == pytest.approx(estimated_false_positive_rate(ck.mean_probe_load))
    assert abs(ck.hit_rate - ex.hit_rate) < 0.01
    # the exact router's fleet publishes too: its filters are measured alike, not consulted
    assert ex.fpr is not None and ex.estimated_fpr is not None
    assert ex.fpr.interval[0] <= ex.expected_false_positives / ex.absent_probes
    assert ex.expected_false_positives / ex.absent_probes <= ex.fpr.interval[1]


def test_cleared_restarts_and_delayed_publication() -> None:
    w = synthetic_chat(60, seed=4, block_size=16)
    sim = ReferenceSimulator(
        SimulatorConfig(
            dcs=2,
            workers_per_dc=3,
            capacity_blocks=200,
            policy="ckf",
            clear_every_ms=5_000,
            publish_every_n_events=5,
            publish_delay_ms=50,
        )
    )
    res = sim.run(w)
    assert res.events["cleared"] > 0 and not res.event_errors
    assert sum(res.deltas) < res.total_events  # batches, not events
    _check_consistent(sim, w)


def test_config_validation() -> None:
    with raises_variant(SimulationError, "Config"):
        SimulatorConfig(dcs=17)
    with raises_variant(SimulationError, "Config"):
        SimulatorConfig(policy="nope")  # type: ignore[arg-type]
    with raises_variant(SimulationError, "Config"):
        SimulatorConfig(capacity_blocks=0)
    with pytest.raises(ValueError, match="max_kicks"):
        SimulatorConfig(max_kicks=0)
    cfg = SimulatorConfig(workers_per_dc=3, dp_ranks=2, capacity_blocks=100)
    assert cfg.ckf_config().expected_blocks_per_dc == 600
    sim = Simulator(cfg)
    sim.run(synthetic_chat(2, seed=0))
    with pytest.raises(RuntimeError):
        sim.run(synthetic_chat(2, seed=0))

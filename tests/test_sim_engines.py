"""The compiled simulator against the per-event reference: the same figures, logs, hooks, words
and captures, byte for byte, on the bundled trace and on generated workloads (every policy,
1-16 DCs, filters small enough that inserts fail, evictions, restarts, publication cadences
and delays, the standard, EAGLE and LoRA hash spaces)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from errorcheck import raises_variant
from hypothesis import HealthCheck, given, settings, strategies as st

from cbi1kit.data import mooncake_trace, sample_capture
from cbi1kit.errors import SimulationError
from cbi1kit.sim._engine import Simulator
from cbi1kit.sim._simrelay import RelayConfig, SimRelayConfig, sample_config, simulate_capture
from cbi1kit.sim._simulator import SimulatorConfig
from cbi1kit.sim._workload import Workload, read_mooncake, synthetic_chat

ROOT = Path(__file__).parents[1]
TRACE = mooncake_trace()


@dataclass
class Observed:
    """Everything a run shows: figures, logs, hook calls, the words left behind."""

    figures: dict[str, object]
    logs: dict[str, object]
    snapshots: list[tuple[object, ...]]
    deltas: list[tuple[object, ...]]
    progress: list[int]
    words: list[list[int]]
    lanes: list[list[int]]


def observe(engine: str, config: SimulatorConfig, workload: Workload, **run: Any) -> Observed:
    sim = Simulator(config, engine=engine)  # type: ignore[arg-type]
    assert sim.engine == engine
    snaps: list[tuple[object, ...]] = []
    deltas: list[tuple[object, ...]] = []
    progress: list[int] = []
    res = sim.run(
        workload,
        on_snapshot=lambda t, dc, s: snaps.append(
            (t, dc, s.identity, s.lease, s.sequence, s.buckets.tolist())
        ),
        on_delta=lambda t, dc, d: deltas.append(
            (t, dc, d.identity, d.lease, d.base_sequence, d.sequence, d.images())
        ),
        progress=progress.append,
        **run,
    )
    figures = res.as_dict()
    figures.pop("wall_seconds")
    logs = {
        "depth": res.depth_log,
        "health": res.health_log,
        "delta": res.delta_log,
        "fpr_by_load": res.fpr_by_load,
    }
    return Observed(
        figures,
        logs,
        snaps,
        deltas,
        progress,
        [sim.words(dc).tolist() for dc in range(config.dcs)],
        [sim.lane_words(dc).tolist() for dc in range(config.dcs)],
    )


def assert_same(config: SimulatorConfig, workload: Workload, **run: Any) -> Observed:
    ref = observe("reference", config, workload, **run)
    fast = observe("compiled", config, workload, **run)
    assert fast.figures == ref.figures
    for name in ref.logs:
        assert fast.logs[name] == ref.logs[name], name
    assert fast.snapshots == ref.snapshots
    assert len(fast.deltas) == len(ref.deltas)
    for mine, theirs in zip(fast.deltas, ref.deltas, strict=True):
        assert mine == theirs
    assert fast.progress == ref.progress
    assert fast.words == ref.words
    assert fast.lanes == ref.lanes
    return ref


@pytest.fixture(scope="module")
def trace() -> Workload:
    return read_mooncake(TRACE)


def _workload(source: str, requests: int, seed: int) -> Workload:
    if source == "mooncake":
        return read_mooncake(TRACE, limit=requests)
    return synthetic_chat(max(2, requests // 8), hash_space=source, seed=seed)  # type: ignore[arg-type]


configs = st.builds(
    SimulatorConfig,
    dcs=st.sampled_from([1, 2, 3, 5, 16]),
    workers_per_dc=st.integers(1, 3),
    dp_ranks=st.integers(1, 2),
    capacity_blocks=st.sampled_from([8, 24, 64, 256, 4096]),
    policy=st.sampled_from(["round_robin", "random", "exact", "ckf"]),
    seed=st.integers(0, 2**32),
    overlap_weight=st.sampled_from([0.0, 0.5, 1.0, 3.0]),
    decode_ms_per_token=st.sampled_from([0.0, 1.5, 20.0]),
    clear_every_ms=st.none() | st.integers(200, 30_000),
    publish_delay_ms=st.none() | st.integers(1, 5_000),
    expected_blocks_per_dc=st.sampled_from([0, 0, 16, 48, 200]),
    ckf_seed=st.integers(0, 2**64 - 1),
    max_kicks=st.sampled_from([1, 4, 64, 500]),
    verification_window=st.integers(1, 8),
    publish_every_n_events=st.sampled_from([1, 1, 2, 7]),
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    config=configs,
    source=st.sampled_from(["mooncake", "standard", "eagle", "lora"]),
    requests=st.integers(1, 160),
    seed=st.integers(0, 1000),
    every=st.sampled_from([(1, 1), (7, 5), (64, 64), (256, 0)]),
)
def test_engines_agree_on_generated_workloads(
    config: SimulatorConfig, source: str, requests: int, seed: int, every: tuple[int, int]
) -> None:
    workload = _workload(source, requests, seed)
    assert_same(config, workload, progress_every=every[0], health_every=every[1])


def test_small_filters_fail_inserts_and_restarts_clear_alike(trace: Workload) -> None:
    """The edges the generated cases reach only sometimes, every time: capacity failures,
    evictions, restarts and delayed publication in one run of 16 DCs."""
    config = SimulatorConfig(
        dcs=16,
        workers_per_dc=2,
        capacity_blocks=64,
        policy="ckf",
        expected_blocks_per_dc=40,
        max_kicks=8,
        clear_every_ms=2_000,
        publish_every_n_events=3,
        publish_delay_ms=700,
    )
    ref = assert_same(config, trace.head(400))
    figures = ref.figures
    assert sum(figures["capacity_failures"]) > 0  # type: ignore[arg-type]
    assert figures["event_errors"] and figures["evicted_blocks"]
    assert figures["events"]["cleared"] > 0  # type: ignore[index]


@pytest.mark.parametrize("policy", ["exact", "ckf"])
def test_engines_agree_on_the_bundled_trace(trace: Workload, policy: str) -> None:
    ref = assert_same(SimulatorConfig(dcs=4, workers_per_dc=2, policy=policy), trace)  # type: ignore[arg-type]
    assert ref.figures["requests"] == len(trace)
    assert ref.figures["false_positives"]  # the filter is measured under either policy


def test_the_capture_is_the_same_bytes(trace: Workload, tmp_path: Path) -> None:
    """The bundled sample's configuration, and a fleet with the catalog, forced snapshots and
    resubscriptions: both engines write the same capture."""
    fleet = SimRelayConfig(
        SimulatorConfig(dcs=3, workers_per_dc=2, capacity_blocks=128, policy="ckf", seed=4),
        RelayConfig(heartbeat_interval_ms=2_000, max_delta_images=6, resubscribe_every_ms=90_000),
    )
    for name, config, workload in (
        ("sample", sample_config(), trace),
        ("fleet", fleet, trace.head(1_500)),
    ):
        paths = {}
        for engine in ("reference", "compiled"):
            paths[engine] = tmp_path / f"{name}-{engine}.kvrcap"
            simulate_capture(workload, paths[engine], config, engine=engine)  # type: ignore[arg-type]
        assert paths["compiled"].read_bytes() == paths["reference"].read_bytes(), name
    assert (tmp_path / "sample-compiled.kvrcap").read_bytes() == (sample_capture()).read_bytes()


def test_a_workload_whose_hashes_do_not_chain_is_refused(trace: Workload) -> None:
    """The compiled engine keys the producer by the workload's sequence hashes: they must be
    the chain of its local hashes, as the producer derives them."""
    head = trace.head(20)
    seq = head.seq_hashes.copy()
    seq[int(head.offsets[3]) + 1] ^= np.uint64(1)
    broken = Workload(
        head.timestamps_ms,
        head.input_tokens,
        head.output_tokens,
        head.offsets,
        head.local_hashes,
        seq,
        head.block_size,
    )
    with pytest.raises(SimulationError, match="request 3 block 1"):
        Simulator(SimulatorConfig()).run(broken)


def test_on_event_needs_the_reference(trace: Workload) -> None:
    events: list[object] = []
    with pytest.raises(ValueError, match="engine='reference'"):
        Simulator(SimulatorConfig()).run(trace.head(5), on_event=lambda *a: events.append(a))
    Simulator(SimulatorConfig(), engine="reference").run(
        trace.head(5), on_event=lambda *a: events.append(a)
    )
    assert events
    with raises_variant(SimulationError, "Config", match="engine='fast': must be 'compiled'"):
        Simulator(SimulatorConfig(), engine="fast")  # type: ignore[arg-type]


def test_the_kernels_arrays_are_laid_out_as_their_layout_says(trace: Workload) -> None:
    """Every array the driver lays out has the dtype and dimensions the kernels' reference
    type names, field for field."""
    from cbi1kit.sim import _arrays
    from cbi1kit.sim._compiled import _lay_out

    arrays = _lay_out(SimulatorConfig(dcs=2), trace.head(10), 64)
    assert tuple(_arrays.LAYOUT) == arrays._fields
    for name, (dtype, ndim) in _arrays.LAYOUT.items():
        array = getattr(arrays, name)
        assert (array.dtype, array.ndim, array.flags.c_contiguous) == (dtype, ndim, True), name

"""Hash-space round trips: each space's pool finds its own queries and none of the others'."""

from __future__ import annotations

import numpy as np
import pytest
from errorcheck import raises_variant

from cbi1kit.errors import Cbi1kitError, LaneError
from cbi1kit.hashing._formats import KvQueryHashFormat
from cbi1kit.sim._roundtrip import HashSpace, hash_space_round_trip

SPACES = [
    HashSpace("standard"),
    HashSpace("eagle", KvQueryHashFormat.DYNAMO_EAGLE_V1),
    HashSpace("lora", lora_name="acme/support-lora"),
    HashSpace("namespace", cache_namespace="tenant-a"),
    HashSpace("lora+ns", lora_name="acme/support-lora", cache_namespace="tenant-a"),
]


def _tokens(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    initial = rng.integers(0, 2**32, 5 * 16 + 3, dtype=np.uint64).astype(np.uint32)
    return initial, np.concatenate([initial, rng.integers(0, 150_000, 64, dtype=np.uint32)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_space_finds_only_itself(seed: int) -> None:
    initial, expanded = _tokens(seed)
    trip = hash_space_round_trip(SPACES, initial, expanded)
    stages = trip.stages()
    assert stages["snapshot_matches_producer"].all()
    assert stages["delta_matches_producer"].all()
    matrix = trip.depth_matrix()
    names = [s.name for s in SPACES]
    for row in matrix.iter_rows(named=True):
        for name in names:
            expected = row["blocks"] if name == row["query"] else 0
            assert row[name] == expected, (row["query"], name)


def test_expanded_must_extend_initial() -> None:
    initial, expanded = _tokens(3)
    with pytest.raises(Cbi1kitError, match="must extend"):
        hash_space_round_trip(SPACES[:1], expanded, initial)


def test_one_table_per_indexer_domain() -> None:
    """Upstream's manifest covers one indexer domain: standard, LoRA and namespace pools share
    the standard table (a lane per DC), the EAGLE pools have their own."""
    initial, expanded = _tokens(5)
    spaces = [*SPACES, HashSpace("eagle+lora", KvQueryHashFormat.DYNAMO_EAGLE_V1, lora_name="x")]
    trip = hash_space_round_trip(spaces, initial, expanded)
    assert len(trip.tables) == 2
    by_name = {r.space.name: r for r in trip.results}
    eagle = by_name["eagle"].domain
    assert by_name["eagle+lora"].domain == eagle != by_name["standard"].domain
    for domain, table in trip.tables.items():
        members = [r for r in trip.results if r.domain == domain]
        assert sorted(table.pools) == sorted(r.lane for r in members) == list(range(len(members)))
        assert len({p.dc_id for p in table.pools.values()}) == len(members)
        assert table.indexer_domain == domain


def test_too_many_spaces_for_one_domain() -> None:
    """17 pools of one domain do not fit a 16-lane manifest: upstream's InvalidLane."""
    initial, expanded = _tokens(4)
    with raises_variant(LaneError, "Manifest.InvalidLane"):
        hash_space_round_trip(
            [HashSpace(f"s{i}", lora_name=str(i)) for i in range(17)], initial, expanded
        )

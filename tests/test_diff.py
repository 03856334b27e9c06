"""diff (#15): two lanes bucket by bucket, checked against what the test knows independently:
the images table's changes between two moments, a producer's own words, fingerprints counted
slot by slot."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from cliutil import cli_run, one_line, unwrapped
from errorcheck import raises_variant
from handfleet import MODEL, SECOND, T0, HandFleet

import cbi1kit as ck
from cbi1kit.analysis._global import format_unix_ns
from cbi1kit.analysis._schema import DIFF_SCHEMA
from cbi1kit.data import mooncake_trace
from cbi1kit.errors import CaptureError, LaneError
from cbi1kit.hashing import stable_dc_id
from cbi1kit.relay import HubSnapshot
from cbi1kit.sim import RelayConfig, SimRelayConfig, SimulatorConfig

ROOT = Path(__file__).parents[1]
TRACE = mooncake_trace()
T = list(range(101, 113))


def slots(word: int) -> list[int]:
    return [(word >> (16 * s)) & 0xFFFF for s in range(4)]


def fingerprint_changes(word_a: int, word_b: int) -> tuple[list[int], list[int]]:
    """(removed, added) as multisets of nonzero slots, by counting."""
    a, b = Counter(slots(word_a)), Counter(slots(word_b))
    a.pop(0, None)
    b.pop(0, None)
    return sorted((a - b).elements()), sorted((b - a).elements())


def assert_table_is_the_words(
    table: pl.DataFrame, words_a: np.ndarray, words_b: np.ndarray
) -> None:
    """Every differing bucket, in order, with its words and fingerprint changes."""
    assert table.schema == pl.Schema(DIFF_SCHEMA)
    differ = np.flatnonzero(words_a != words_b)
    assert table["bucket"].to_list() == differ.tolist()
    assert table["word_a"].to_numpy().tolist() == words_a[differ].tolist()
    assert table["word_b"].to_numpy().tolist() == words_b[differ].tolist()
    for _, wa, wb, removed, added in table.iter_rows():
        assert (sorted(removed), sorted(added)) == fingerprint_changes(wa, wb)


def test_fingerprints_are_counted_as_multisets() -> None:
    """A bucket holding a fingerprint twice that then holds it once lost one copy: slots drawn
    from a tiny alphabet make repeats common; each row is checked against a Counter."""
    rng = np.random.default_rng(15)
    slots_a = rng.integers(0, 4, size=(512, 4), dtype=np.uint64)
    slots_b = rng.integers(0, 4, size=(512, 4), dtype=np.uint64)
    shift = np.array([0, 16, 32, 48], dtype=np.uint64)
    words_a = np.bitwise_or.reduce(slots_a << shift, axis=1)
    words_b = np.bitwise_or.reduce(slots_b << shift, axis=1)
    words_b[::7] = words_a[::7]  # some buckets equal
    words_b[1] = words_a[1] = 0x0000_0005_0005_0007  # hand-made: 7, 5, 5
    words_b[1] = 0x0000_0000_0009_0005  # 5, 9: one 5 and the 7 removed, 9 added
    d = ck.diff(words_a, words_b)
    assert_table_is_the_words(d.table, words_a, words_b)
    assert d.table.filter(pl.col("bucket") == 1).rows() == [
        (1, 0x0000_0005_0005_0007, 0x0000_0000_0009_0005, [7, 5], [9])
    ]
    assert d.a.source == "array" and d.a.seed is None


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ck.sim.SimRelayResult]:
    """One DC's stream of a small, busy simulation: LRU evictions remove blocks as well."""
    path = tmp_path_factory.mktemp("diff") / "one.kvrcap"
    config = SimRelayConfig(
        SimulatorConfig(dcs=2, workers_per_dc=1, capacity_blocks=48, seed=5),
        RelayConfig(record_dc=0),
    )
    result = ck.simulate_capture(ck.read_mooncake(TRACE, limit=120), path, config)
    return path, result


def test_one_capture_at_two_moments_is_the_image_changes_between_them(
    simulated: tuple[Path, ck.sim.SimRelayResult],
) -> None:
    """(d) The diff between sequences s1 and s2 is exactly what the deltas in (s1, s2] changed:
    each touched bucket from the word before its first image to its last image's word, where
    they differ (images table, not the lanes)."""
    path, result = simulated
    images = ck.images_table(path)
    final = result.final_sequence[0]
    s1, s2 = final // 4, 3 * final // 4
    between = images.filter((pl.col("sequence") > s1) & (pl.col("sequence") <= s2))
    first = between.group_by("bucket").agg(pl.col("previous_word").sort_by("sequence").first())
    last = between.group_by("bucket").agg(pl.col("new_word").sort_by("sequence").last())
    expect = (
        first.join(last, on="bucket")
        .filter(pl.col("previous_word") != pl.col("new_word"))
        .sort("bucket")
    )
    d = ck.diff(path, at_a=s1, at_b=s2)
    assert d.table["bucket"].to_list() == expect["bucket"].to_list()
    assert d.table["word_a"].to_list() == expect["previous_word"].to_list()
    assert d.table["word_b"].to_list() == expect["new_word"].to_list()
    assert d.differing_buckets > 10 and d.fingerprints_removed > 0 and d.fingerprints_added > 0
    assert (d.a.sequence, d.b.sequence) == (s1, s2) and d.a.dc_id == d.b.dc_id
    words_a = ck.replay(path).lane_at(s1)
    words_b = ck.replay(path).lane_at(s2)
    assert_table_is_the_words(d.table, words_a, words_b)
    assert d.occupied_b - d.occupied_a == d.fingerprints_added - d.fingerprints_removed
    # by time: what had been received by each delta's receive time
    assert d.a.unix_ns is not None and d.b.unix_ns is not None
    timed = ck.diff(path, at_a=format_unix_ns(d.a.unix_ns), at_b=format_unix_ns(d.b.unix_ns))
    assert timed.table.equals(d.table) and (timed.a.sequence, timed.b.sequence) == (s1, s2)


def test_a_lane_against_itself_and_the_producer_against_the_consumer(
    simulated: tuple[Path, ck.sim.SimRelayResult], tmp_path: Path
) -> None:
    path, result = simulated
    same = ck.diff(path, path)
    assert same.same and same.table.height == 0 and same.fingerprints_added == 0
    assert same.occupied_a == same.occupied_b > 0
    assert "the lanes are equal" in str(same)
    producer = result.final_words[0]
    assert ck.diff(path, producer).same  # the consumer's final lane is the producer's words
    saved = tmp_path / "producer.npy"
    np.save(saved, producer)
    assert ck.diff(path, saved).same and ck.diff(saved, path).b.sequence == result.final_sequence[0]
    # the producer one image ahead: that bucket alone, its fingerprints counted slot by slot
    ahead = producer.copy()
    old = int(ahead[3])
    new = (old & 0xFFFF_FFFF) | 0xFFFF_ABCD_0000_0000  # slots 2 and 3 replaced, the high bit set
    ahead[3] = new
    d = ck.diff(path, ahead)
    ((bucket, word_a, word_b, removed, added),) = d.table.rows()
    assert (bucket, word_a, word_b) == (3, old, new) and word_b >= 1 << 63
    assert (sorted(removed), sorted(added)) == fingerprint_changes(old, new)
    assert 0xABCD in added and 0xFFFF in added
    assert d.table["word_b"].dtype == pl.UInt64


def test_a_hand_built_producer_a_snapshot_and_a_simulator(tmp_path: Path) -> None:
    f = HandFleet(tmp_path / "h.kvrcap")
    f.store(0, T)
    f.open()
    f.store(0, list(range(300, 308)))
    f.publish(0, T0 + 2 * SECOND)
    f.close()
    producer = f.dcs[0].state
    assert ck.diff(f.path, producer, dc_a="sim-dc-0").same
    f.store(0, list(range(600, 604)))  # stored, not published: the producer is ahead
    ahead = ck.diff(f.path, producer, dc_a="sim-dc-0")
    assert ahead.fingerprints_added == 1 and ahead.fingerprints_removed == 0
    seq = f.canonical(list(range(600, 604)))[0]
    fp, a, b = ck.CkfAddressing(seed=producer.format.seed, bucket_count=32).prepare_ints(seq)
    ((bucket, _, _, removed, added),) = ahead.table.rows()
    assert bucket in (a, b) and (removed, added) == ([], [fp])
    assert ahead.b.seed == producer.format.seed and ahead.b.source == "producer"
    snap = HubSnapshot(f.dcs[1].identity, 0, f.words(1))  # type: ignore[arg-type]
    assert ck.diff(snap, f.path, dc_b="sim-dc-1").same
    sim = ck.Simulator(ck.SimulatorConfig(dcs=2, workers_per_dc=1, capacity_blocks=32))
    sim.run(ck.read_mooncake(TRACE, limit=30))
    consumer = sim.lane_words(1)
    assert ck.diff(sim, consumer, dc=1).same  # every tail published: lanes equal producers
    assert not ck.diff(sim, sim.lane_words(0), dc=1).same
    with raises_variant(LaneError, "NoSuchLane"):
        ck.diff(sim, consumer, dc=5)


def test_two_lanes_of_one_capture_and_the_errors(tmp_path: Path) -> None:
    f = HandFleet(tmp_path / "two.kvrcap")
    f.store(0, T)
    f.store(1, T[:4])
    f.open()
    f.close()
    d = ck.diff(f.path, dc_a="sim-dc-0", dc_b="sim-dc-1", model=MODEL)
    assert_table_is_the_words(d.table, f.words(0), f.words(1))
    assert d.fingerprints_removed == 2 and d.fingerprints_added == 0  # blocks 1 and 2
    with raises_variant(LaneError, "SeveralLanes"):
        ck.diff(f.path)
    with raises_variant(LaneError, "NoSuchLane", match="sim-dc-9|no lane matches"):
        ck.diff(f.path, dc="sim-dc-9")
    with raises_variant(LaneError, "NotReady", match="was not replayed"):
        ck.diff(f.path, dc="sim-dc-0", at=5)
    with raises_variant(LaneError, "NoCatalog"):
        ck.diff(f.path, dc="sim-dc-0", model=MODEL, at=format_unix_ns(T0 - 1))
    other = HandFleet(tmp_path / "big.kvrcap", expected_blocks=128)  # 64 buckets
    other.open()
    other.close()
    with raises_variant(LaneError, "DifferentFormats", match="64 buckets"):
        ck.diff(f.path, other.path, dc="sim-dc-0")
    reseeded = HandFleet(tmp_path / "seed.kvrcap", seed=1)
    reseeded.open()
    reseeded.close()
    with raises_variant(LaneError, "DifferentFormats", match="seed 0x1,"):
        ck.diff(f.path, reseeded.path, dc="sim-dc-0")
    with pytest.raises(ValueError):  # the builtin it also is
        ck.diff(f.path, np.zeros(16, dtype=np.uint64), dc="sim-dc-0")
    with raises_variant(LaneError, "NotALane", match="float64"):
        ck.diff(f.path, np.zeros(32), dc="sim-dc-0")
    with raises_variant(LaneError, "NotALane", match="1-D"):
        ck.diff(np.zeros((4, 8), dtype=np.uint64), np.zeros(32, dtype=np.uint64))
    garbage = tmp_path / "g.npy"
    garbage.write_bytes(b"not numpy at all")
    with raises_variant(CaptureError, "Npy"):
        ck.diff(garbage, f.path, dc="sim-dc-0")


# ------------------------------------------------------------------------------------ CLI


def test_cli_diff(tmp_path: Path) -> None:
    f = HandFleet(tmp_path / "c.kvrcap")
    f.store(0, T)
    f.store(1, T[:4])
    f.open()
    f.remove(0, T, [0])
    seq = f.publish(0, T0 + 3 * SECOND)
    f.close()
    code, out, err = cli_run(
        "diff", str(f.path), "--dc", "sim-dc-0", "--at-a", "0", "--at-b", str(seq)
    )
    assert code == 0, err
    assert "1 bucket(s) differ: 0 fingerprint(s) added, 1 removed" in out
    assert f"sequence {seq}, {format_unix_ns(T0 + 3 * SECOND)}" in "\n".join(unwrapped(out))
    assert f"DC {stable_dc_id('sim-dc-0').value:016x} (sim-dc-0)" in out
    code, out, _ = cli_run(
        "diff",
        str(f.path),
        str(f.path),
        "--dc-a",
        "sim-dc-0",
        "--dc-b",
        "sim-dc-1",
        "--json",
        "--limit",
        "1",
    )
    shown = json.loads(out)
    want = ck.diff(f.path, dc_a="sim-dc-0", dc_b="sim-dc-1")
    assert code == 0 and shown["differing_buckets"] == want.differing_buckets >= 1
    assert shown["shown"] == len(shown["buckets"]) == 1 and shown["ok"] is True
    (row,) = shown["buckets"]
    first = want.table.row(0)
    assert row == {
        "bucket": first[0],
        "word_a": f"0x{first[1]:016x}",
        "word_b": f"0x{first[2]:016x}",
        "removed": [f"0x{x:04x}" for x in first[3]],
        "added": [f"0x{x:04x}" for x in first[4]],
    }
    assert shown["a"]["dc_id"] != shown["b"]["dc_id"] and shown["a"]["source"] == "c.kvrcap"
    np.save(tmp_path / "w.npy", f.words(1))
    code, out, _ = cli_run("diff", str(f.path), str(tmp_path / "w.npy"), "--dc", "sim-dc-1")
    assert code == 0 and "the lanes are equal" in out
    np.save(tmp_path / "f.npy", np.zeros(32))
    (tmp_path / "g.npy").write_bytes(b"junk")
    np.save(tmp_path / "small.npy", np.zeros(16, dtype=np.uint64))
    cases = [
        ([str(f.path)], 2, "pick one by its DC"),
        ([str(f.path), "--dc", "sim-dc-0", "--at", "9"], 2, "was not replayed"),
        ([str(f.path), "--dc", "sim-dc-9"], 2, "no lane matches"),
        ([str(f.path), str(tmp_path / "f.npy"), "--dc", "sim-dc-0"], 1, "float64"),
        ([str(f.path), str(tmp_path / "small.npy"), "--dc", "sim-dc-0"], 1, "different formats"),
        ([str(tmp_path / "g.npy"), str(f.path)], 3, "g.npy"),
        ([str(tmp_path / "missing.kvrcap")], 3, "missing.kvrcap"),
        ([str(f.path), "--at-a", "noon"], 2, "--at-a"),
        ([str(f.path), "--limit", "-1"], 2, "--limit"),
    ]
    for argv, want_code, why in cases:
        code, _, err = cli_run("diff", *argv)
        assert code == want_code and one_line(err) and why in err, (argv, code, err)


def test_lane_and_moment_options_on_two_npy_lanes_are_a_usage_error(tmp_path: Path) -> None:
    """Two .npy lanes hold no lane to pick and no moment: --dc or --at there was ignored."""
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(a, np.zeros(64, dtype=np.uint64))
    np.save(b, np.ones(64, dtype=np.uint64))
    assert cli_run("diff", str(a), str(b))[0] == 0
    code, _, err = cli_run("diff", str(a), str(b), "--at", "5")
    assert code == 2 and one_line(err) and "--at" in err, err


def test_the_repr_is_one_line_of_key_figures() -> None:
    """``repr`` of a diff was the dataclass: 2,364 characters."""
    a = np.zeros(1024, dtype=np.uint64)
    b = a.copy()
    b[[3, 700]] = [0x0000_0000_0000_0009, 0x0000_0000_0005_0007]
    d = ck.diff(a, b)
    text = repr(d)
    assert "\n" not in text and len(text) < 200, text
    assert "2 of 1,024 buckets differ, 0 fingerprint(s) removed, 3 added>" in text

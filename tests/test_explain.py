"""explain (#15): a request step by step against hand-built fleets whose answers are known.

Every expectation here comes from the test's own construction (what each DC stored, removed and
published, and when) or from an independent reading of the spec (xxh3 through python-xxhash,
upstream's tie rank re-derived), never from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import xxhash
from cliutil import cli_run, one_line
from errorcheck import raises_variant
from handfleet import MODEL, SECOND, T0, HandFleet

import cbi1kit as ck
from cbi1kit._json import exact
from cbi1kit.analysis._explain import stable_pool_rank
from cbi1kit.analysis._explain_lane import Change, Truth
from cbi1kit.analysis._global import format_unix_ns
from cbi1kit.errors import HashingError, IdentityError, LaneError
from cbi1kit.hashing import CanonicalModelRegistration, ModelTarget, stable_dc_id
from cbi1kit.sim import read_mooncake
from cbi1kit.sim._workload import mooncake_local_hashes

T = list(range(101, 113))  # three blocks of four tokens
ALT_DOMAIN = 0x9E3779B97F4A7C15
U64 = (1 << 64) - 1


# ----------------------------------------------------------------- the spec, read on its own


def block_hashes(tokens: list[int], bs: int, seed: int = 1337) -> list[int]:
    """hashing.md §2: each complete window of u32 LE tokens, xxh3 with the (salted) seed."""
    return [
        xxhash.xxh3_64_intdigest(
            b"".join(t.to_bytes(4, "little") for t in tokens[i : i + bs]), seed
        )
        for i in range(0, len(tokens) - bs + 1, bs)
    ]


def chain(local: list[int]) -> list[int]:
    """hashing.md §3: seq[0] = local[0]; seq[i] = xxh3(le(seq[i-1]) ‖ le(local[i]), 1337)."""
    out: list[int] = []
    for h in local:
        out.append(
            h
            if not out
            else xxhash.xxh3_64_intdigest(
                out[-1].to_bytes(8, "little") + h.to_bytes(8, "little"), 1337
            )
        )
    return out


def address(h: int, seed: int, buckets: int) -> tuple[int, int, int]:
    """ckf.md §1.3: (fingerprint, bucket a, bucket b)."""
    mixed = xxhash.xxh3_64_intdigest(h.to_bytes(8, "little"), seed)
    fp = (mixed & 0xFFFF) or 1
    a = (mixed >> 16) & (buckets - 1)
    d = xxhash.xxh3_64_intdigest(fp.to_bytes(2, "little"), seed ^ ALT_DOMAIN) & (buckets - 1)
    return fp, a, a ^ (d or 1)


def holds(word: int, fp: int) -> bool:
    return any((word >> (16 * s)) & 0xFFFF == fp for s in range(4))


def fnv_rank(key: int, pool: object) -> int:
    """The gateway's stable_pool_rank, from its source: FNV-1a 64 keyed by xor."""
    domain = pool.indexer_domain  # type: ignore[attr-defined]
    src = {"default_derived": 0, "explicit": 1}
    data = (
        domain.cache_semantics.digest
        + bytes([src[domain.cache_semantics.source.value]])
        + domain.routing_scope.digest
        + bytes([src[domain.routing_scope.source.value]])
        + pool.dc_id.value.to_bytes(8, "big")  # type: ignore[attr-defined]
    )
    h = 0xCBF29CE484222325 ^ key
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & U64
    return h


SEED = 0x5EED5EED
BUCKETS = 32  # HandFleet's 64 expected blocks


# --------------------------------------------------------------------------------- steps


def test_every_step_from_the_catalog_to_the_preferred_dc(tmp_path: Path) -> None:
    f = HandFleet(tmp_path / "f.kvrcap")
    f.store(0, T)
    f.store(1, T[:8])
    f.open()
    late = list(range(700, 704))
    f.store(0, late)
    s1 = f.publish(0, T0 + 4 * SECOND)
    f.close()
    e = ck.explain(f.path, model=MODEL, tokens=[*T, 9, 9])  # a trailing partial block
    assert e.registration == CanonicalModelRegistration.new(MODEL) and e.lora_name is None
    assert (e.semantics.kv_block_size, e.catalog_revision, e.tokens) == (4, 1, 14)
    assert (e.format.seed, e.format.bucket_count) == (SEED, BUCKETS)
    local = block_hashes(T, 4)
    seq = chain(local)
    assert [(b.local_hash, b.sequence_hash) for b in e.blocks] == list(zip(local, seq, strict=True))
    assert [(b.fingerprint, b.bucket_a, b.bucket_b) for b in e.blocks] == [
        address(h, SEED, BUCKETS) for h in seq
    ]
    for lane, stored in zip(e.lanes, (3, 2), strict=True):
        words = f.words(lane.lane)
        assert lane.ready and lane.dc_id == stable_dc_id(f"sim-dc-{lane.lane}")
        for blk, at in zip(e.blocks, lane.blocks, strict=True):
            expect = holds(int(words[blk.bucket_a]), blk.fingerprint) or holds(
                int(words[blk.bucket_b]), blk.fingerprint
            )
            assert at.held == expect == (blk.index < stored)
            if at.held:
                assert at.bucket == (blk.bucket_a if at.side == "a" else blk.bucket_b)
                assert (int(words[at.bucket]) >> (16 * at.slot)) & 0xFFFF == blk.fingerprint  # type: ignore[operator]
                assert at.since == Change("snapshot", 0, T0, f.dcs[lane.lane].stream)  # type: ignore[arg-type]
            assert at.truth is Truth.UNKNOWN
        assert lane.depth == stored and lane.first_missing == (None if stored == 3 else 2)
        assert lane.removed is None
    assert e.lanes[0].sequence == s1 and e.lanes[0].unix_ns == T0 + 4 * SECOND
    assert e.lanes[1].sequence == 0 and e.lanes[1].unix_ns == T0
    assert e.ranking == (0, 1) and e.preferred is e.lanes[0] and e.tied == (e.lanes[0],)
    # the late block: written by the delta, received 4 s after the snapshot
    (mine,) = ck.explain(f.path, model=MODEL, tokens=late).lane(0).blocks
    assert mine.held and mine.since == Change("delta", s1, T0 + 4 * SECOND, f.dcs[0].stream)
    assert not ck.explain(f.path, model=MODEL, tokens=late, at=0).lane(0).blocks[0].held


def test_a_prefix_absent_because_of_a_removal_names_the_delta_and_the_block(tmp_path: Path) -> None:
    """(a) The chain breaks where a delta took a block away: that delta's sequence and time."""
    f = HandFleet(tmp_path / "a.kvrcap", dcs=1)
    tokens = list(range(1, 17))  # four blocks
    f.store(0, tokens)
    f.open()
    f.store(0, list(range(500, 508)))
    f.publish(0, T0 + 5 * SECOND)
    f.remove(0, tokens, [2])
    removed = f.publish(0, T0 + 9 * SECOND)
    f.store(0, list(range(900, 904)))
    f.publish(0, T0 + 12 * SECOND)
    f.close()
    e = ck.explain(f.path, model=MODEL, tokens=tokens)
    (lane,) = e.lanes
    assert [b.held for b in lane.blocks] == [True, True, False, True]
    assert lane.first_missing == 2
    assert lane.removed == Change("delta", removed, T0 + 9 * SECOND, f.dcs[0].stream)
    # exponential probe 1 hits, 2 misses; the verification window (2) holds 0 and 1
    assert lane.depth == 2
    text = str(e)
    assert "the chain breaks at block 2" in text
    assert f"delta {removed} ({format_unix_ns(T0 + 9 * SECOND)})" in text
    before = ck.explain(f.path, model=MODEL, tokens=tokens, at=f"+{9 * SECOND - 1}ns")
    assert before.lanes[0].first_missing is None and before.lanes[0].depth == 4


def test_a_removal_between_sessions_is_the_next_snapshot(tmp_path: Path) -> None:
    """A block the producer dropped while the consumer resubscribed: the new session's
    snapshot is where it left, the old session held it to its end."""
    f = HandFleet(tmp_path / "r.kvrcap", dcs=1)
    f.store(0, T)
    f.open()
    f.remove(0, T, [1])
    stream = f.subscribe(0, T0 + 20 * SECOND)
    f.close()
    (lane,) = ck.explain(f.path, model=MODEL, tokens=T).lanes
    assert lane.first_missing == 1 and lane.stream_id == stream
    assert lane.removed == Change("snapshot", 0, T0 + 20 * SECOND, stream)
    (never,) = ck.explain(f.path, model=MODEL, tokens=[7] * 8).lanes
    assert never.first_missing == 0 and never.removed is None and never.depth == 0


def _colliding(f: HandFleet, root: int, stored: int, *, tries: int = 1 << 22) -> int:
    """A token x for which the chain [root, x] (block size 1) has the fingerprint and the
    buckets of [root, stored]: a false positive by construction."""
    (root_hash,) = block_hashes([root], 1)
    target = address(chain([root_hash, block_hashes([stored], 1)[0]])[1], SEED, BUCKETS)
    step = 1 << 18
    for lo in range(0, tries, step):
        xs = np.arange(lo, lo + step, dtype=np.uint32)
        local = ck.compute_block_hash_for_seq(xs, 1)
        pairs = np.stack([np.full(step, root_hash, dtype=np.uint64), local], axis=1)
        seq = ck.hashing.compute_seq_hash_batch(pairs)[:, 1]
        fp, a, _ = ck.CkfAddressing(seed=SEED, bucket_count=BUCKETS).prepare_many(seq)
        hit = (fp == target[0]) & ((a == target[1]) | (a == target[2])) & (xs != stored)
        if hit.any():
            return int(xs[np.flatnonzero(hit)[0]])
    raise AssertionError("no colliding token found")


def test_a_block_held_only_as_a_false_positive(tmp_path: Path) -> None:
    """(b) [root, x] was never stored, but its fingerprint and buckets are [root, y]'s: the
    consumer sees it held; only the producer's holdings tell it is a false positive."""
    f = HandFleet(tmp_path / "b.kvrcap", dcs=1, block_size=1)
    root, stored = 7, 11
    f.store(0, [root, stored])
    f.open()
    f.close()
    x = _colliding(f, root, stored)
    e = ck.explain(f.path, model=MODEL, tokens=[root, x])
    (lane,) = e.lanes
    fp, a, b = address(e.blocks[1].sequence_hash, SEED, BUCKETS)
    y_fp, y_a, y_b = address(chain(block_hashes([root, stored], 1))[1], SEED, BUCKETS)
    assert (fp, {a, b}) == (y_fp, {y_a, y_b})  # the collision the test built
    assert [blk.held for blk in lane.blocks] == [True, True] and lane.depth == 2
    assert lane.blocks[1].bucket in (a, b)
    assert (int(f.words(0)[lane.blocks[1].bucket]) >> (16 * lane.blocks[1].slot)) & 0xFFFF == fp  # type: ignore[operator]
    assert e.blocks[1].sequence_hash not in set(f.dcs[0].state.resident_canonicals().tolist())
    assert [blk.truth for blk in lane.blocks] == [Truth.UNKNOWN] * 2
    assert "cannot be told" in str(e)
    known = ck.explain(f.path, model=MODEL, tokens=[root, x], truth=f.dcs[0].state)
    assert [blk.truth for blk in known.lanes[0].blocks] == [
        Truth.TRUE_POSITIVE,
        Truth.FALSE_POSITIVE,
    ]
    assert "false positive" in str(known) and "cannot be told" not in str(known)
    by_dc = ck.explain(
        f.path, model=MODEL, tokens=[root, x, 3], truth={"sim-dc-0": chain(block_hashes([root], 1))}
    )
    assert [blk.truth for blk in by_dc.lanes[0].blocks] == [
        Truth.TRUE_POSITIVE,
        Truth.FALSE_POSITIVE,
        Truth.TRUE_NEGATIVE,
    ]
    producer = set(chain(block_hashes([root, 3], 1)))  # as if the producer held [root, 3]
    hole = ck.explain(f.path, model=MODEL, tokens=[root, 3], truth={"sim-dc-0": producer})
    assert hole.lanes[0].blocks[1].truth is Truth.FALSE_NEGATIVE  # held by "the producer" only


def test_the_preferred_dc_is_the_deepest_then_upstreams_tie_rule(tmp_path: Path) -> None:
    """(c) The deeper lane wins; at a tie the local DC, then the lowest stable rank for the
    request's tie key, then the lowest pool id (the same domain: the lower DC id)."""
    f = HandFleet(tmp_path / "c.kvrcap", dcs=3)
    f.store(0, T[:4])
    f.store(1, T)
    f.store(2, T)
    f.open()
    f.close()
    e = ck.explain(f.path, model=MODEL, tokens=T)
    assert [n.depth for n in e.lanes] == [1, 3, 3]
    pools = {n.lane: n.pool for n in e.lanes}
    lowest = min((1, 2), key=lambda i: pools[i].dc_id.value)
    assert e.tied == (e.lane(lowest), e.lane(3 - lowest))
    assert e.preferred is e.lane(lowest) and e.ranking[-1] == 0
    assert "lowest pool id" in e.tie_rule()
    other = 3 - lowest
    local = ck.explain(f.path, model=MODEL, tokens=T, local_dc=f"sim-dc-{other}")
    assert local.preferred is not None and local.preferred.lane == other
    # the local DC by its hex, in either case (a user copies it from anywhere)
    hex_id = f"{pools[other].dc_id.value:016x}"
    for text in (hex_id, hex_id.upper()):
        by_hex = ck.explain(f.path, model=MODEL, tokens=T, local_dc=text)
        assert by_hex.preferred is not None and by_hex.preferred.lane == other
        assert "no tied lane" not in by_hex.tie_rule()
    # a local DC no tied lane is in breaks nothing, and the rule says so
    elsewhere = ck.explain(f.path, model=MODEL, tokens=T, local_dc="sim-dc-9")
    assert elsewhere.preferred is not None and elsewhere.preferred.lane == lowest
    assert (
        "the local DC" in elsewhere.tie_rule() and "no tied lane is in it" in elsewhere.tie_rule()
    )
    # a tie key whose rank prefers the higher DC id: the rank, not the pool id, decides
    key = next(k for k in range(1000) if fnv_rank(k, pools[other]) < fnv_rank(k, pools[lowest]))
    assert stable_pool_rank(key, pools[other]) == fnv_rank(key, pools[other])
    ranked = ck.explain(f.path, model=MODEL, tokens=T, tie_key=key)
    assert ranked.preferred is not None and ranked.preferred.lane == other
    assert "stable rank" in ranked.tie_rule()
    both = ck.explain(f.path, model=MODEL, tokens=T, tie_key=key, local_dc=f"sim-dc-{lowest}")
    assert both.preferred is not None and both.preferred.lane == lowest  # local comes first
    deeper = ck.explain(f.path, model=MODEL, tokens=T[:4], local_dc="sim-dc-0", tie_key=key)
    assert [n.depth for n in deeper.lanes] == [1, 1, 1] and deeper.preferred.lane == 0  # type: ignore[union-attr]


def test_a_lora_alias_salts_the_hashes_with_its_canonical_adapter(tmp_path: Path) -> None:
    lora = CanonicalModelRegistration.with_target(
        "hand/model-a", ModelTarget.lora(MODEL, "adapter-a"), ["tenant-a"]
    )
    f = HandFleet(
        tmp_path / "l.kvrcap", dcs=1, registrations=(CanonicalModelRegistration.new(MODEL), lora)
    )
    f.store(0, T, lora="adapter-a")
    f.open()
    f.close()
    salted = ck.explain(f.path, model=MODEL, lora="tenant-a", tokens=T)
    assert salted.lora_name == "adapter-a" and salted.registration == lora
    seed = (1337 + xxhash.xxh3_64_intdigest(b"adapter-a", 0)) & U64
    assert [b.local_hash for b in salted.blocks] == block_hashes(T, 4, seed)
    assert salted.lanes[0].depth == 3
    assert ck.explain(f.path, model="hand/model-a", tokens=T).lanes[0].depth == 3  # by name
    assert ck.explain(f.path, model=MODEL, tokens=T).lanes[0].depth == 0  # base: unsalted
    with raises_variant(IdentityError, "NotALora"):
        ck.explain(f.path, model=MODEL, lora=MODEL, tokens=T)
    with raises_variant(IdentityError, "UnknownModel", match="tenant-b"):
        ck.explain(f.path, model=MODEL, lora="tenant-b", tokens=T)


def test_a_trace_request_is_looked_up_by_its_hash_ids(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    lines = [
        {"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 9, "input_length": 1536, "output_length": 5, "hash_ids": [1, 2, 3]},
    ]
    trace.write_text("\n".join(json.dumps(x) for x in lines))
    lora = CanonicalModelRegistration.with_target("m-a", ModelTarget.lora(MODEL, "ad"), ["al"])
    regs = (CanonicalModelRegistration.new(MODEL), lora)
    f = HandFleet(tmp_path / "t.kvrcap", dcs=1, block_size=512, registrations=regs)
    f.store_hashes(0, mooncake_local_hashes([1, 2]).tolist())
    f.store_hashes(0, mooncake_local_hashes([1, 2, 3], lora_name="ad").tolist())
    f.open()
    f.close()
    request = read_mooncake(trace).request(1)
    base = ck.explain(f.path, model=MODEL, request=request)
    assert [b.local_hash for b in base.blocks] == [
        xxhash.xxh3_64_intdigest(i.to_bytes(8, "little"), 1337) for i in (1, 2, 3)
    ]
    assert base.tokens is None and base.lanes[0].depth == 2 and base.lanes[0].first_missing == 2
    assert ck.explain(f.path, model=MODEL, lora="al", request=request).lanes[0].depth == 3
    small = HandFleet(tmp_path / "s.kvrcap", dcs=1)
    small.open()
    small.close()
    with raises_variant(IdentityError, "QuerySemantics", match="512"):
        ck.explain(small.path, model=MODEL, request=request)


def test_errors_are_typed(tmp_path: Path) -> None:
    f = HandFleet(tmp_path / "e.kvrcap")
    f.store(0, T)
    f.open()
    f.close()
    with raises_variant(IdentityError, "UnknownModel", match=MODEL):
        ck.explain(f.path, model="no/such", tokens=T)
    with raises_variant(LaneError, "NoCatalog", match="received by"):
        ck.explain(f.path, model=MODEL, tokens=T, at=format_unix_ns(T0 - 1))
    with raises_variant(HashingError, "TooFewTokens", match="needs 4 tokens"):
        ck.explain(f.path, model=MODEL, tokens=T[:3])
    with raises_variant(HashingError, "BlockHashArgument"):
        ck.explain(f.path, model=MODEL)
    with pytest.raises(TypeError):  # the builtin it also is
        ck.explain(f.path, model=MODEL, tokens=T, request=object())  # type: ignore[arg-type]
    with raises_variant(LaneError, "Manifest.InvalidVerificationWindow"):
        ck.explain(f.path, model=MODEL, tokens=T, verification_window=9)
    with raises_variant(LaneError, "SeveralLanes"):
        ck.explain(f.path, model=MODEL, tokens=T, truth={1, 2})
    with raises_variant(LaneError, "NoSuchLane", match="sim-dc-7"):
        ck.explain(f.path, model=MODEL, tokens=T, truth={"sim-dc-7": [1]})
    with raises_variant(HashingError, "BlockHashArgument"):
        ck.explain(f.path, model=MODEL, tokens=T, truth={"sim-dc-0": [1.5]})
    bare = HandFleet(tmp_path / "bare.kvrcap", dcs=1)
    bare.open(catalog=False)
    bare.close()
    with raises_variant(LaneError, "NoCatalog", match="no catalog stream"):
        ck.explain(bare.path, model=MODEL, tokens=T)


def test_no_lane_ready_is_no_answer(tmp_path: Path) -> None:
    f = HandFleet(tmp_path / "n.kvrcap")
    f.open(subscribe_at=T0 + 3 * SECOND)
    f.close()
    e = ck.explain(f.path, model=MODEL, tokens=T, at=format_unix_ns(T0 + SECOND))
    assert not any(n.ready for n in e.lanes) and e.preferred is None and e.ranking == ()
    assert all("no snapshot installed" in n.why for n in e.lanes)
    assert "Unavailable" in str(e)
    later = ck.explain(f.path, model=MODEL, tokens=T, at="+3s")
    assert all(n.ready and n.depth == 0 for n in later.lanes)


def test_the_json_form_keeps_u64_exact(tmp_path: Path) -> None:
    f = HandFleet(tmp_path / "j.kvrcap")
    f.store(0, T)
    f.open()
    f.close()
    e = ck.explain(f.path, model=MODEL, tokens=T)
    shown = json.loads(json.dumps(e.to_dict()))
    assert [int(b["sequence_hash"], 16) for b in shown["blocks"]] == chain(block_hashes(T, 4))
    assert shown["preferred"] == {
        "lane": 0,
        "dc_id": f"{stable_dc_id('sim-dc-0').value:016x}",
        "dc_name": "sim-dc-0",  # the simulator's name, shown back
        "depth": 3,
    }
    assert shown["lanes"][0]["blocks"][0]["since"]["time"] == format_unix_ns(T0)
    assert shown["truth"] == "unknown" and shown["query_semantics"]["kv_block_size"] == 4


# ------------------------------------------------------------------------------------ CLI


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    f = HandFleet(tmp_path / "cli.kvrcap")
    f.store(0, T)
    f.store(1, T[:4])
    f.open()
    f.remove(0, T, [2])
    f.publish(0, T0 + 7 * SECOND)
    return f.close()


def test_cli_explain_prints_every_step(fleet: Path, tmp_path: Path) -> None:
    tokens = ",".join(map(str, T))
    code, out, err = cli_run("explain", str(fleet), "--model", MODEL, "--tokens", tokens)
    assert code == 0, err
    for step in ("1. catalog revision 1", "2. 12 tokens → 3 block(s)", "3. each DC lane (2)"):
        assert step in out
    prose = " ".join(out.split())  # wrapped to the terminal: read as one line
    assert "the chain breaks at block 2: its fingerprint left both buckets with delta 1" in prose
    assert f"4. the router prefers DC {stable_dc_id('sim-dc-0')}" in out
    code, out, _ = cli_run("explain", str(fleet), "--model", MODEL, "--tokens", tokens, "--json")
    shown = json.loads(out)
    want = exact(ck.explain(fleet, model=MODEL, tokens=T).to_dict())  # times past 2^53: text
    assert {k: v for k, v in shown.items() if k not in ("capture", "ok")} == want
    assert shown["ok"] is True and shown["lanes"][0]["removed"]["sequence"] == 1
    listed = tmp_path / "tokens.txt"
    listed.write_text("[" + ", ".join(map(str, T)) + "]\n")
    code, out, _ = cli_run(
        "explain", str(fleet), "--model", MODEL, "--tokens-file", str(listed), "--at", "0", "--json"
    )
    assert code == 0 and [n["depth"] for n in json.loads(out)["lanes"]] == [3, 1]


def test_cli_explain_a_trace_request(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        json.dumps({"timestamp": 0, "input_length": 9, "output_length": 1, "hash_ids": [4, 5]})
    )
    f = HandFleet(tmp_path / "t.kvrcap", dcs=1, block_size=512)
    f.store_hashes(0, mooncake_local_hashes([4, 5]).tolist())
    f.open()
    f.close()
    argv = ["explain", str(f.path), "--model", MODEL, "--trace", str(trace)]
    code, out, err = cli_run(*argv, "--request", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["lanes"][0]["depth"] == 2
    code, _, err = cli_run(*argv, "--request", "1")
    assert code == 2 and one_line(err) and "outside" in err
    code, _, err = cli_run(*argv)
    assert code == 2 and one_line(err) and "--request" in err


def test_cli_explain_exit_codes(fleet: Path, tmp_path: Path) -> None:
    tokens = ",".join(map(str, T))
    cases = [
        (["--model", "no/such", "--tokens", tokens], 2, "hand/model"),
        (["--model", MODEL, "--tokens", "1,2,3"], 1, "needs 4 tokens"),
        (["--model", MODEL, "--tokens", "1,x"], 2, "--tokens"),
        (["--model", MODEL, "--tokens", tokens, "--lora", MODEL], 2, "not a LoRA"),
        (["--model", MODEL, "--tokens", tokens, "--at", "2020-01-01T00:00:00Z"], 2, "catalog"),
        (["--model", MODEL, "--tokens", tokens, "--request", "1"], 2, "--trace"),
        (["--model", MODEL, "--tokens", tokens, "--verification-window", "9"], 2, "window"),
    ]
    for extra, want, why in cases:
        code, _, err = cli_run("explain", str(fleet), *extra)
        assert code == want and one_line(err) and why in err, (extra, code, err)
    bad = tmp_path / "bad.txt"
    bad.write_text("1 2 three")
    code, _, err = cli_run("explain", str(fleet), "--model", MODEL, "--tokens-file", str(bad))
    assert code == 1 and one_line(err) and "token 2" in err and str(bad) in err
    code, _, err = cli_run(
        "explain", str(tmp_path / "none.kvrcap"), "--model", MODEL, "--tokens", tokens
    )
    assert code == 3 and one_line(err)


def test_a_stale_lane_is_searched_but_not_ranked(fleet: Path) -> None:
    """scorer.rs (6b5411d5): past ``overlap_max_age`` since its last message a lane gets no
    score. DC 1's last message is its snapshot at T0, DC 0 published a delta at T0 + 7 s, the
    capture's end: with max_age 5 s only DC 0 is ranked."""
    e = ck.explain(fleet, model=MODEL, tokens=T, max_age=5)
    assert (e.lane(0).stale, e.lane(1).stale) == (False, True)
    assert e.lane(1).depth == 1 and e.ranking == (0,)
    assert e.lane(1).touched_unix_ns == T0 and e.lane(0).touched_unix_ns == T0 + 7 * SECOND
    assert "the scorer gives it no score" in str(e)
    assert ck.explain(fleet, model=MODEL, tokens=T, max_age=7).ranking == (0, 1)  # 7 s: fresh
    code, out, err = cli_run("view", str(fleet), "--max-age", "5")
    assert code == 0, err
    assert "stale: last message 7.0 s before" in out
    code, out, _ = cli_run("view", str(fleet), "--max-age", "5", "--json")
    lanes = json.loads(out)["domains"][0]["lanes"]
    assert [n["stale"] for n in lanes] == [False, True]
    code, _, err = cli_run(
        "explain", str(fleet), "--model", MODEL, "--tokens", "1", "--max-age", "0"
    )
    assert code == 2 and "--max-age" in err


def test_the_repr_is_one_line_of_key_figures(tmp_path: Path) -> None:
    """``repr`` of an explanation was the dataclass: 12,537 characters of raw digests."""
    f = HandFleet(tmp_path / "f.kvrcap")
    f.store(0, T)
    f.open()
    f.close()
    e = ck.explain(f.path, model=MODEL, tokens=T)
    text = repr(e)
    assert "\n" not in text and len(text) < 200, text
    assert text.startswith(f"<Explanation {MODEL!r}: {len(e.blocks)} block(s), ")
    best = e.preferred
    assert best is not None and f"preferred lane {best.lane}" in text
    assert f"at depth {best.depth}>" in text


def test_a_lane_table_shows_a_run_of_alike_blocks_as_one_row() -> None:
    """Misses in a row, or blocks held in the same side since the same change, are one row;
    the truth column only where the truth is known (#46)."""
    from cbi1kit.analysis._explain import _block_rows, _plain
    from cbi1kit.analysis._explain_lane import LaneBlock, Truth

    held = [LaneBlock(i, True, "a", 10 + i, 0) for i in range(3)]
    missed = [LaneBlock(i, False) for i in range(3, 8)]
    lane = SimpleNamespace(
        blocks=[*held, LaneBlock(8, True, "b", 99, 2), *missed], truth_known=False
    )
    lines = _plain(_block_rows(lane)).splitlines()  # type: ignore[arg-type]
    assert [line.split()[:3] for line in lines] == [
        ["block", "held", "bucket"],
        ["0-2", "yes", "a"],
        ["8", "yes", "b"],
        ["3-7", "no", "-"],
    ]
    assert "truth" not in lines[0] and "×3" in lines[1] and " 99 " in lines[2]
    lane.truth_known = True
    lane.blocks = [LaneBlock(0, True, "a", 1, 0, truth=Truth.TRUE_POSITIVE)]
    assert "truth" in _plain(_block_rows(lane)).splitlines()[0]  # type: ignore[arg-type]

"""Workloads: Mooncake traces and synthetic chats become exact local and canonical hashes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xxhash
from errorcheck import raises_variant

from cbi1kit.data import mooncake_trace
from cbi1kit.errors import SimulationError
from cbi1kit.hashing._blocks import block_hash_seed, compute_seq_hash_for_block
from cbi1kit.hashing._formats import KvQueryHashFormat
from cbi1kit.sim._workload import (
    MOONCAKE_BLOCK_SIZE,
    concat,
    mooncake_local_hashes,
    read_mooncake,
    synthetic_chat,
)

TRACE = mooncake_trace()


def _chains_ok(w: object) -> None:
    for i in range(len(w)):  # type: ignore[arg-type]
        local, seq = w.blocks(i)  # type: ignore[attr-defined]
        assert np.array_equal(seq, compute_seq_hash_for_block(local))


def test_mooncake_prefix_hashes_are_exact() -> None:
    w = read_mooncake(TRACE, limit=300)
    assert len(w) == 300 and w.block_size == MOONCAKE_BLOCK_SIZE
    lines = [json.loads(x) for x in TRACE.read_text().splitlines()[:300]]
    assert w.timestamps_ms.tolist() == [d["timestamp"] for d in lines]
    assert w.hash_ids is not None
    assert w.hash_ids.tolist() == [h for d in lines for h in d["hash_ids"]]
    # scalar reference for the local hash of a few ids
    for hid, local in list(zip(w.hash_ids.tolist(), w.local_hashes.tolist(), strict=True))[:50]:
        assert local == xxhash.xxh3_64_intdigest(hid.to_bytes(8, "little"), 1337)
    _chains_ok(w)
    # equal id prefixes give equal canonical prefixes
    a, b = lines[0]["hash_ids"], lines[1]["hash_ids"]
    k = next(i for i in range(min(len(a), len(b))) if a[i] != b[i])
    sa, sb = w.blocks(0)[1], w.blocks(1)[1]
    assert np.array_equal(sa[:k], sb[:k]) and sa[k] != sb[k]


def test_mooncake_salts_and_head() -> None:
    base = read_mooncake(TRACE, limit=50)
    lora = read_mooncake(TRACE, limit=50, lora_name="adapter")
    assert not np.intersect1d(base.seq_hashes, lora.seq_hashes).size
    ids = np.array([0, 1, 2**40], dtype=np.int64)
    seed = block_hash_seed("adapter", "ns")
    got = mooncake_local_hashes(ids, lora_name="adapter", cache_namespace="ns")
    assert got.tolist() == [
        xxhash.xxh3_64_intdigest(int(i).to_bytes(8, "little"), seed) for i in ids
    ]
    head = base.head(7)
    assert len(head) == 7 and head.total_blocks == int(base.offsets[7])
    assert np.array_equal(head.seq_hashes, base.seq_hashes[: head.total_blocks])
    assert base.summary()["requests"] == 50


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        (
            '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}\nnope\n',
            2,
            None,
        ),
        (
            '{"timestamp": 5, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n'
            '{"timestamp": 4, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n',
            2,
            "timestamp",
        ),
        (
            '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [-1]}\n',
            1,
            "hash_ids",
        ),
        (
            '{"timestamp": 0, "input_length": 1.5, "output_length": 1, "hash_ids": []}\n',
            1,
            "input_length",
        ),
    ],
)
def test_bad_traces_name_line_and_field(
    tmp_path: Path, text: str, line: int, field: str | None
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with raises_variant(SimulationError, "Workload") as err:
        read_mooncake(path)
    assert err.value.line == line and err.value.field == field


def test_missing_and_empty_traces(tmp_path: Path) -> None:
    with raises_variant(SimulationError, "Workload", match="cannot read"):
        read_mooncake(tmp_path / "missing.jsonl")
    (tmp_path / "e.jsonl").write_text("\n")
    with raises_variant(SimulationError, "Workload", match="no requests"):
        read_mooncake(tmp_path / "e.jsonl")


def test_synthetic_chat_hash_spaces() -> None:
    std = synthetic_chat(30, hash_space="standard", seed=3, n_system_prompts=3)
    eagle = synthetic_chat(30, hash_space="eagle", seed=3, n_system_prompts=3)
    lora = synthetic_chat(30, hash_space="lora", seed=3, n_system_prompts=3)
    assert std.hash_format is KvQueryHashFormat.DYNAMO_STANDARD_V1
    assert eagle.hash_format is KvQueryHashFormat.DYNAMO_EAGLE_V1
    for w in (std, eagle, lora):
        _chains_ok(w)
        assert np.all(np.diff(w.timestamps_ms) >= 0)
    roots = {int(w.blocks(i)[1][0]) for w in (std,) for i in range(len(w))}
    assert len(roots) <= 3  # sessions share system prompts
    # EAGLE windows differ from standard ones over the same tokens
    assert not np.intersect1d(std.seq_hashes, eagle.seq_hashes).size
    # LoRA sessions are salted apart from base sessions
    assert {None} < set(lora.lora_names)
    lora_roots = {int(lora.blocks(i)[1][0]) for i in range(len(lora))}
    assert 3 < len(lora_roots) <= 9
    # later turns of a session extend earlier ones: many requests share long prefixes
    assert std.unique_blocks() < std.total_blocks


def test_synthetic_chat_is_seeded_and_concat_keeps_chains() -> None:
    a = synthetic_chat(10, seed=1)
    b = synthetic_chat(10, seed=1)
    assert np.array_equal(a.seq_hashes, b.seq_hashes)
    assert np.array_equal(a.timestamps_ms, b.timestamps_ms)
    c = synthetic_chat(10, seed=2)
    m = concat([a, c])
    assert len(m) == len(a) + len(c) and np.all(np.diff(m.timestamps_ms) >= 0)
    _chains_ok(m)
    with raises_variant(SimulationError, "Workload"):
        concat([a, synthetic_chat(5, hash_space="eagle")])
    with raises_variant(SimulationError, "Workload"):
        synthetic_chat(0)

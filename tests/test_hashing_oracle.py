"""Differential tests: our block hashing against the compiled upstream binding.

``dynamo._core`` (PyPI ``ai-dynamo-runtime``, the ``oracle`` extra) is the real Rust
implementation; every seeded random case must give the same hashes, or, where the binding
raises, an error that is an instance of the binding's exception class.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from errorcheck import raises_variant

import cbi1kit.hashing._blocks as blocks_module
from cbi1kit.errors import HashingError
from cbi1kit.hashing._blocks import (
    compute_block_hash_for_seq,
    compute_seq_hash_for_block,
    lora_name_to_id,
)
from cbi1kit.hashing._formats import KvQueryHashFormat, KvQuerySemantics
from cbi1kit.hashing._models import (
    CanonicalModelId,
    CanonicalModelRegistration,
    ModelAlias,
    ModelTarget,
    resolve_lora_name,
)

core = pytest.importorskip(
    "dynamo._core", reason="dynamo._core (ai-dynamo-runtime, the `oracle` extra) is not importable"
)

pytestmark = pytest.mark.oracle

U32_EDGES = [0, 1, 2, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1]
U64_EDGES = [0, 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1]
NAMES = [
    None,
    "",
    "a",
    "adapter-a",
    "tenant-a",
    "Llama 3 LoRA",
    "адаптер",
    "日本語-ñ",
    "🦙x",
    " sp ",
]
LARGE_BLOCK_SIZES = [65, 100, 127, 128, 256, 512, 1000, 4096, 2**31]


def _tokens(rng: np.random.Generator, n: int) -> list[int]:
    mode = rng.integers(0, 4)
    if mode == 0:
        vals = rng.integers(0, 2**32, n, dtype=np.uint64)
    elif mode == 1:
        vals = rng.integers(0, 50_000, n, dtype=np.uint64)
    elif mode == 2:
        vals = np.asarray(U32_EDGES, dtype=np.uint64)[rng.integers(0, len(U32_EDGES), n)]
    else:
        vals = rng.integers(0, 4, n, dtype=np.uint64)  # many repeated windows
    return [int(v) for v in vals]


def _mm_object(rng: np.random.Generator, pool: list[int]) -> dict[str, Any]:
    r = rng.random()
    if r < 0.3 and pool:
        h = pool[int(rng.integers(0, len(pool)))]  # duplicates across and within blocks
    elif r < 0.5:
        h = U64_EDGES[int(rng.integers(0, len(U64_EDGES)))]
    else:
        h = int(rng.integers(0, 2**63, dtype=np.uint64)) * 2 + int(rng.integers(0, 2))
    pool.append(h)
    n_off = int(rng.integers(0, 3))
    offsets = [[int(rng.integers(0, 1000)), int(rng.integers(0, 1000))] for _ in range(n_off)]
    obj: dict[str, Any] = {"mm_hash": h, "offsets": offsets}
    if rng.random() < 0.1:
        obj["extra"] = "ignored"
    return obj


def _mm_infos(rng: np.random.Generator, n_blocks: int) -> list[dict[str, Any] | None] | None:
    if rng.random() < 0.5:
        return None
    length = int(rng.integers(0, n_blocks + 4))  # shorter and longer than the block count
    pool: list[int] = []
    infos: list[dict[str, Any] | None] = []
    for _ in range(length):
        r = rng.random()
        if r < 0.35:
            infos.append(None)
        elif r < 0.45:
            infos.append({"mm_objects": []})
        else:
            k = int(rng.integers(1, 4))
            infos.append({"mm_objects": [_mm_object(rng, pool) for _ in range(k)]})
    return infos


def _corrupt(rng: np.random.Generator, case: dict[str, Any]) -> None:
    """Turn a valid case into one the binding rejects (about 3% of cases)."""
    kind = int(rng.integers(0, 9))
    tokens = list(case["tokens"]) or [0]
    if kind == 0:
        tokens[int(rng.integers(0, len(tokens)))] = -1
    elif kind == 1:
        tokens[int(rng.integers(0, len(tokens)))] = 2**32
    elif kind == 2:
        tokens[int(rng.integers(0, len(tokens)))] = 1.5
    elif kind == 3:
        case["kv_block_size"] = 0
    elif kind == 4:
        case["kv_block_size"] = -int(rng.integers(1, 5))
    elif kind == 5:
        case["block_mm_infos"] = [None, {"mm_objects": [{"mm_hash": 1}]}]
    elif kind == 6:
        case["block_mm_infos"] = [{"mm_objects": [{"mm_hash": -1, "offsets": []}]}]
    elif kind == 7:
        case["block_mm_infos"] = [{"mm_objects": [{"mm_hash": 2**64, "offsets": []}]}]
    else:
        case["block_mm_infos"] = [{"mm_objects": [{"mm_hash": 3, "offsets": [[1, 2, 3]]}]}, {}]
    case["tokens"] = tokens


def _case(rng: np.random.Generator) -> dict[str, Any]:
    r = rng.random()
    bs = (
        int(LARGE_BLOCK_SIZES[int(rng.integers(0, len(LARGE_BLOCK_SIZES)))])
        if r < 0.08
        else int(rng.integers(1, 65))
    )
    n = int(rng.integers(0, 301))
    tokens: Any = _tokens(rng, n)
    eagle = [None, False, True][int(rng.integers(0, 3))]
    n_blocks = n // bs if not eagle else max(0, (n - 1) // bs)
    case: dict[str, Any] = {
        "tokens": tokens,
        "kv_block_size": bs,
        "block_mm_infos": _mm_infos(rng, n_blocks),
        "lora_name": NAMES[int(rng.integers(0, len(NAMES)))],
        "is_eagle": eagle,
        "cache_namespace": NAMES[int(rng.integers(0, len(NAMES)))],
    }
    if rng.random() < 0.03:
        _corrupt(rng, case)
    else:
        form = int(rng.integers(0, 5))
        if form == 1:
            case["tokens"] = tuple(tokens)
        elif form == 2:
            case["tokens"] = np.asarray(tokens, dtype=np.uint32)
        elif form == 3:
            case["tokens"] = np.asarray(tokens, dtype=np.int64)
        elif form == 4:
            case["tokens"] = np.asarray(tokens, dtype=np.uint64)
    return case


def _run(fn: Any, case: dict[str, Any]) -> tuple[str, Any]:
    try:
        result = fn(
            case["tokens"],
            case["kv_block_size"],
            case["block_mm_infos"],
            case["lora_name"],
            case["is_eagle"],
            case["cache_namespace"],
        )
    except Exception as exc:
        return "error", exc
    return "ok", [int(h) for h in result]


@pytest.mark.parametrize("path", ["as called", "compiled"])
def test_block_hashes_match_oracle_on_20000_seeded_cases(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compiled``: every call, however few its blocks, through hashing/_compiled's kernel."""
    if path == "compiled":
        monkeypatch.setattr(blocks_module, "COMPILED_MIN_BLOCKS", 1)
    rng = np.random.default_rng(20_240_603)
    n_cases = 20_000
    n_hashes = n_errors = n_mm = n_eagle = 0
    for i in range(n_cases):
        case = _case(rng)
        want_kind, want = _run(core.compute_block_hash_for_seq, case)
        got_kind, got = _run(compute_block_hash_for_seq, case)
        if want_kind == "error":
            n_errors += 1
            assert got_kind == "error", f"case {i}: oracle raised {want!r}, we returned {got}"
            assert isinstance(got, type(want)), f"case {i}: {got!r} is not a {type(want)}"
        else:
            assert got_kind == "ok", f"case {i}: we raised {got!r}, oracle returned {want}"
            assert got == want, f"case {i}: {case}"
            n_hashes += len(want)
            n_mm += case["block_mm_infos"] is not None
            n_eagle += bool(case["is_eagle"])
    # The generator must actually exercise every dimension, or the equality above is hollow.
    assert n_hashes > 150_000
    assert 300 < n_errors < 1_500
    assert n_mm > 5_000
    assert n_eagle > 5_000


@pytest.mark.parametrize(
    ("tokens", "bs", "kwargs"),
    [
        ([], 4, {}),
        ([1, 2, 3], 4, {}),
        ([1, 2, 3, 4], 4, {"is_eagle": True}),
        ([1, 2, 3, 4, 5], 4, {"is_eagle": True}),
        ([1, 2, 3, 4], 4, {"block_mm_infos": [{"mm_objects": []}]}),
        ([1, 2, 3, 4], 4, {"lora_name": "", "cache_namespace": ""}),
        ([True, 2], 1, {}),
        (range(10), 3, {}),
    ],
)
def test_edge_cases_match_oracle(tokens: Any, bs: int, kwargs: dict[str, Any]) -> None:
    want = core.compute_block_hash_for_seq(list(tokens), bs, **kwargs)
    assert compute_block_hash_for_seq(tokens, bs, **kwargs).tolist() == want


@pytest.mark.parametrize("bs", [0, -1, 2**64])
def test_block_size_errors_match_oracle_class(bs: int) -> None:
    with pytest.raises(Exception) as want:
        core.compute_block_hash_for_seq([1, 2, 3, 4], bs)
    with pytest.raises(type(want.value)) as got:
        compute_block_hash_for_seq([1, 2, 3, 4], bs)
    assert isinstance(got.value, HashingError)
    assert got.value.variant in {"BlockSize", "BlockSizeRange"}
    assert got.value.kv_block_size == bs


def test_block_size_beyond_u32_is_refused_where_the_binding_truncates() -> None:
    # The binding casts `as u32`: 2**32 + 4 hashes like 4 and 2**32 like 0 (no error). We
    # refuse both rather than hash under a block size nobody asked for.
    assert core.compute_block_hash_for_seq(list(range(8)), 2**32 + 4) == (
        core.compute_block_hash_for_seq(list(range(8)), 4)
    )
    assert core.compute_block_hash_for_seq(list(range(8)), 2**32) == []
    for bs in (2**32, 2**32 + 4):
        with raises_variant(HashingError, "BlockSizeRange"):
            compute_block_hash_for_seq(list(range(8)), bs)


def _names(rng: np.random.Generator, n: int) -> list[str]:
    alphabet = list("abcdefghijklmnopqrstuvwxyz0123456789-_./:") + list("äßñéж日本語🦙") + [" "]
    names = ["", "x", "test_lora", "adapter-a"]
    while len(names) < n:
        k = int(rng.integers(1, 40))
        names.append("".join(alphabet[int(j)] for j in rng.integers(0, len(alphabet), k)))
    return names


def test_lora_name_to_id_matches_oracle_on_1200_names() -> None:
    rng = np.random.default_rng(7)
    names = _names(rng, 1200)
    ours = [lora_name_to_id(n) for n in names]
    assert ours == [core.lora_name_to_id(n) for n in names]
    assert all(1 <= v <= 2**31 - 1 for v in ours)


@pytest.mark.parametrize("hash_format", list(KvQueryHashFormat))
def test_seed_scenario_lora_alias_hashes_with_canonical_adapter_per_oracle(
    hash_format: KvQueryHashFormat,
) -> None:
    registration = CanonicalModelRegistration.with_target(
        CanonicalModelId("tenant-a"),
        ModelTarget.lora("llama", "tenant-a"),
        [ModelAlias("tenant-chat")],
    )
    semantics = KvQuerySemantics(4, hash_format)
    lora = resolve_lora_name([registration], "tenant-chat")
    ours = semantics.block_hashes(list(range(21)), lora_name=lora, cache_namespace="tenant-ns")
    want = core.compute_block_hash_for_seq(
        list(range(21)),
        4,
        lora_name="tenant-a",
        is_eagle=hash_format.is_eagle,
        cache_namespace="tenant-ns",
    )
    assert ours.tolist() == want
    via_alias = core.compute_block_hash_for_seq(
        list(range(21)),
        4,
        lora_name="tenant-chat",
        is_eagle=hash_format.is_eagle,
        cache_namespace="tenant-ns",
    )
    assert ours.tolist() != via_alias


def test_chain_over_oracle_block_hashes_follows_the_spec_formula() -> None:
    # The binding exposes no chain; check ours over its block hashes against the formula.
    import xxhash

    blocks = core.compute_block_hash_for_seq(list(range(200)), 8, lora_name="x")
    seq = compute_seq_hash_for_block(blocks).tolist()
    expected = [blocks[0]]
    for b in blocks[1:]:
        expected.append(xxhash.xxh3_64_intdigest(struct.pack("<QQ", expected[-1], b), seed=1337))
    assert seq == expected

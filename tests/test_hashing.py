"""Block hashes, salts and sequence-hash chains: pinned vectors, edge cases, properties."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
import xxhash
from errorcheck import raises_variant
from hypothesis import given, settings, strategies as st

import cbi1kit.hashing._blocks as blocks_module
from cbi1kit.errors import HashingError
from cbi1kit.hashing._blocks import (
    block_count,
    block_hash_seed,
    cache_namespace_salt,
    compute_block_hash_for_seq,
    compute_seq_hash_batch,
    compute_seq_hash_for_block,
    compute_seq_hash_ragged,
    hash_mm_identifier,
    lora_name_to_id,
    lora_salt,
    pad_value_for_mm_hash,
)

T12 = list(range(12))
u32s = st.integers(0, 2**32 - 1)
u64s = st.integers(0, 2**64 - 1)
names = st.text(min_size=1, max_size=20)


def _ref_chain(blocks: list[int]) -> list[int]:
    out: list[int] = []
    for b in blocks:
        out.append(
            b if not out else xxhash.xxh3_64_intdigest(struct.pack("<QQ", out[-1], b), seed=1337)
        )
    return out


# ---------------------------------------------------------------- pinned vectors (hashing.md)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, [9143094415614847814, 12124091508212882195, 1088361764653601668]),
        ({"is_eagle": True}, [14562210786876287112, 15916330181359808192]),
        (
            {"lora_name": "adapter-a"},
            [6665157333201000639, 11721812545976571723, 14488077642866817317],
        ),
        (
            {"cache_namespace": "tenant-a"},
            [17009624042690211646, 10000672136415158886, 13984174126468215255],
        ),
        (
            {"lora_name": "adapter-a", "cache_namespace": "tenant-a"},
            [8269515957840517240, 11937877779520612889, 14954360957602452228],
        ),
        (
            {"block_mm_infos": [{"mm_objects": [{"mm_hash": 42, "offsets": []}]}]},
            [18280081842874931122, 12124091508212882195, 1088361764653601668],
        ),
    ],
)
def test_pinned_block_hash_vectors(kwargs: dict[str, Any], expected: list[int]) -> None:
    got = compute_block_hash_for_seq(T12, 4, **kwargs)
    assert got.dtype == np.uint64
    assert got.tolist() == expected
    assert compute_block_hash_for_seq(np.arange(12, dtype=np.uint32), 4, **kwargs).tolist() == (
        expected
    )


def test_pinned_stub_example() -> None:
    assert compute_block_hash_for_seq([1, 2, 3, 4] * 8, 32).tolist() == [15883719750896736839]


def test_pinned_salts() -> None:
    assert block_hash_seed() == 1337
    assert block_hash_seed(lora_name="adapter-a") == 8842669519798868182
    assert block_hash_seed(cache_namespace="tenant-a") == 1948188790972764086
    assert block_hash_seed("adapter-a", "tenant-a") == 10790858310771630931


def test_pinned_chain_vectors() -> None:
    std = compute_block_hash_for_seq(T12, 4)
    assert compute_seq_hash_for_block(std).tolist() == [
        9143094415614847814,
        9510318385840434533,
        16998148715716822651,
    ]
    eagle = compute_block_hash_for_seq(T12, 4, is_eagle=True)
    assert compute_seq_hash_for_block(eagle).tolist() == [
        14562210786876287112,
        11643125693293304894,
    ]


@pytest.mark.parametrize(
    ("name", "expected"), [("x", 1987615332), ("test_lora", 1983627077), ("", 1979294118)]
)
def test_pinned_lora_ids(name: str, expected: int) -> None:
    assert lora_name_to_id(name) == expected


# ---------------------------------------------------------------- edge cases


def test_empty_and_short_inputs_give_empty_uint64() -> None:
    for tokens, bs, eagle in [([], 4, None), ([1, 2, 3], 4, False), ([1, 2, 3, 4], 4, True)]:
        got = compute_block_hash_for_seq(tokens, bs, is_eagle=eagle)
        assert got.dtype == np.uint64
        assert got.shape == (0,)
    assert compute_block_hash_for_seq([1, 2, 3, 4, 5], 4, is_eagle=True).shape == (1,)


def test_block_count_matches_windows() -> None:
    assert block_count(0, 4) == 0
    assert block_count(11, 4) == 2
    assert block_count(12, 4, True) == 2
    assert block_count(13, 4, True) == 3
    assert block_count(4, 4, True) == 0


def test_zero_block_size_is_a_clear_error() -> None:
    with raises_variant(HashingError, "BlockSize", match="kv_block_size cannot be 0") as err:
        compute_block_hash_for_seq([1, 2], 0)
    assert isinstance(err.value, ValueError)
    assert err.value.kv_block_size == 0


@pytest.mark.parametrize("bs", [-1, 2**32, 2**64])
def test_block_size_outside_u32_is_refused(bs: int) -> None:
    with raises_variant(HashingError, "BlockSizeRange") as err:
        compute_block_hash_for_seq([1, 2], bs)
    assert isinstance(err.value, OverflowError)
    assert err.value.kv_block_size == bs


@pytest.mark.parametrize(
    ("tokens", "index", "value"),
    [
        ([1, 2, -1], 2, -1),
        ([2**32, 0], 0, 2**32),
        (np.array([5, -3], dtype=np.int64), 1, -3),
        (np.array([2**32 + 1], dtype=np.uint64), 0, 2**32 + 1),
    ],
)
def test_token_outside_u32_is_a_clear_error(tokens: Any, index: int, value: int) -> None:
    with raises_variant(HashingError, "TokenRange") as err:
        compute_block_hash_for_seq(tokens, 1)
    assert isinstance(err.value, OverflowError)
    assert (err.value.index, err.value.value) == (index, value)
    assert str(index) in str(err.value)


@pytest.mark.parametrize(
    "tokens", [[1.0, 2], np.array([1.0]), "abc", [None], np.zeros((2, 2), np.uint32)]
)
def test_non_integer_tokens_are_type_errors(tokens: Any) -> None:
    with raises_variant(HashingError, "TokenType"):
        compute_block_hash_for_seq(tokens, 1)


@pytest.mark.parametrize(
    "kwargs", [{"lora_name": 5}, {"cache_namespace": b"x"}, {"is_eagle": 1}, {"kv_block_size": 1.0}]
)
def test_wrongly_typed_options_are_type_errors(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"tokens": [1, 2], "kv_block_size": 1, **kwargs}
    with raises_variant(HashingError, "BlockHashArgument") as err:
        compute_block_hash_for_seq(**args)
    assert isinstance(err.value, TypeError)
    assert err.value.field == next(iter(kwargs))


@pytest.mark.parametrize(
    ("infos", "error"),
    [
        ([{}], "MultimodalInfo"),
        ([None, None, {}], "MultimodalInfo"),  # validated even past the last block
        ([{"mm_objects": [{"mm_hash": 1}]}], "MultimodalInfo"),
        ([{"mm_objects": [{"offsets": []}]}], "MultimodalInfo"),
        ([{"mm_objects": [{"mm_hash": 1, "offsets": [[1]]}]}], "MultimodalInfo"),
        ([{"mm_objects": [{"mm_hash": 1.0, "offsets": []}]}], "MultimodalInfo"),
        ([{"mm_objects": None}], "MultimodalInfo"),
        ({"a": 1}, "MultimodalInfo"),
        ([{"mm_objects": [{"mm_hash": -1, "offsets": []}]}], "MmHashRange"),
        ([{"mm_objects": [{"mm_hash": 2**64, "offsets": []}]}], "MmHashRange"),
        ([{"mm_objects": [{"mm_hash": 1, "offsets": [[-1, 2]]}]}], "MmHashRange"),
    ],
)
def test_bad_multimodal_infos(infos: Any, error: str) -> None:
    with raises_variant(HashingError, error):
        compute_block_hash_for_seq([1, 2], 1, block_mm_infos=infos)


def test_input_forms_agree() -> None:
    rng = np.random.default_rng(1)
    toks = rng.integers(0, 2**32, 100, dtype=np.uint64)
    want = compute_block_hash_for_seq(toks.tolist(), 7).tolist()
    for form in (
        tuple(toks.tolist()),
        toks,
        toks.astype(np.uint32),
        toks.astype(np.int64),
        iter(toks.tolist()),
        np.array(toks.tolist(), dtype=object),
    ):
        assert compute_block_hash_for_seq(form, 7).tolist() == want


def test_mm_helpers() -> None:
    assert hash_mm_identifier("") is None
    digest = "0123456789abcdef" + "f" * 48
    assert hash_mm_identifier(digest) == 0x0123456789ABCDEF
    assert hash_mm_identifier("img-1") == xxhash.xxh3_64_intdigest(b"img-1", seed=0)
    assert pad_value_for_mm_hash(0) == 1_000_000
    assert pad_value_for_mm_hash(2**64 - 1) == 1_000_000 + (2**30 - 1)


# ---------------------------------------------------------------- chains, exact vs xxhash


def test_single_chain_matches_xxhash_reference() -> None:
    rng = np.random.default_rng(3)
    blocks = rng.integers(0, 2**64, 500, dtype=np.uint64)
    assert compute_seq_hash_for_block(blocks).tolist() == _ref_chain(blocks.tolist())
    assert compute_seq_hash_for_block([]).dtype == np.uint64
    assert compute_seq_hash_for_block([]).shape == (0,)


def test_batch_chain_matches_xxhash_reference() -> None:
    rng = np.random.default_rng(4)
    blocks = rng.integers(0, 2**64, (300, 17), dtype=np.uint64)
    blocks[0, :] = 2**64 - 1
    blocks[1, :] = 0
    got = compute_seq_hash_batch(blocks)
    assert got.dtype == np.uint64
    for row, want in zip(got.tolist(), blocks.tolist(), strict=True):
        assert row == _ref_chain(want)
    assert compute_seq_hash_batch(np.zeros((3, 0), np.uint64)).shape == (3, 0)


def test_ragged_chain_matches_xxhash_reference() -> None:
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 40, 250)
    flat = rng.integers(0, 2**64, int(lengths.sum()), dtype=np.uint64)
    got = compute_seq_hash_ragged(flat, lengths).tolist()
    start = 0
    for n in lengths.tolist():
        assert got[start : start + n] == _ref_chain(flat[start : start + n].tolist())
        start += n


def test_chain_input_errors() -> None:
    with raises_variant(HashingError, "SequenceHashInput"):
        compute_seq_hash_for_block([1, -2])
    with raises_variant(HashingError, "SequenceHashInput"):
        compute_seq_hash_for_block([1.5])
    with raises_variant(HashingError, "SequenceHashInput"):
        compute_seq_hash_for_block(np.array([1, -1], dtype=np.int64))
    with raises_variant(HashingError, "SequenceHashInput"):
        compute_seq_hash_batch(np.zeros(3, np.uint64))
    with raises_variant(HashingError, "SequenceHashInput", match="sum to 3"):
        compute_seq_hash_ragged(np.zeros(4, np.uint64), [1, 2])
    with raises_variant(HashingError, "SequenceHashInput"):
        compute_seq_hash_ragged(np.zeros(1, np.uint64), [2, -1])


def test_chain_is_exact_for_python_ints_above_2_63() -> None:
    blocks = [2**64 - 1, 5, 2**63]
    assert compute_seq_hash_for_block(blocks).tolist() == _ref_chain(blocks)


# ---------------------------------------------------------------- properties (hypothesis)


@settings(max_examples=150, deadline=None)
@given(st.lists(u32s, min_size=2, max_size=80), st.integers(1, 40), st.none() | names)
def test_eagle_block_zero_equals_standard_block_zero_of_next_size(
    tokens: list[int], bs: int, lora: str | None
) -> None:
    if len(tokens) < bs + 1:
        return
    eagle = compute_block_hash_for_seq(tokens, bs, lora_name=lora, is_eagle=True)
    standard = compute_block_hash_for_seq(tokens, bs + 1, lora_name=lora)
    assert eagle[0] == standard[0]


@settings(max_examples=150, deadline=None)
@given(st.lists(u32s, min_size=1, max_size=40), u64s, st.none() | names)
def test_mm_hash_equals_two_extra_tokens(tokens: list[int], h: int, ns: str | None) -> None:
    bs = len(tokens)
    infos = [{"mm_objects": [{"mm_hash": h, "offsets": [[0, 1]]}]}]
    with_mm = compute_block_hash_for_seq(tokens, bs, infos, cache_namespace=ns)
    padded = compute_block_hash_for_seq(
        [*tokens, h & 0xFFFFFFFF, h >> 32], bs + 2, cache_namespace=ns
    )
    assert with_mm[0] == padded[0]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(u32s, min_size=4, max_size=40), st.lists(u64s, min_size=1, max_size=5), st.randoms()
)
def test_mm_object_order_does_not_matter(tokens: list[int], hashes: list[int], rnd: Any) -> None:
    objs = [{"mm_hash": h, "offsets": []} for h in hashes]
    shuffled = objs[:]
    rnd.shuffle(shuffled)
    a = compute_block_hash_for_seq(tokens, 4, [{"mm_objects": objs}])
    b = compute_block_hash_for_seq(tokens, 4, [{"mm_objects": shuffled}])
    plain = compute_block_hash_for_seq(tokens, 4, [{"mm_objects": []}, None])
    assert a.tolist() == b.tolist()
    assert plain.tolist() == compute_block_hash_for_seq(tokens, 4).tolist()


@settings(max_examples=200, deadline=None)
@given(st.none() | st.text(max_size=10), st.none() | st.text(max_size=10))
def test_salts_add_commutatively_and_independently(lora: str | None, ns: str | None) -> None:
    expected = (1337 + lora_salt(lora) + cache_namespace_salt(ns)) % 2**64
    assert block_hash_seed(lora, ns) == expected
    assert (
        block_hash_seed(lora, ns)
        == (block_hash_seed(lora) + block_hash_seed(cache_namespace=ns) - 1337) % 2**64
    )
    assert lora_salt(lora or None) == lora_salt(lora)  # "" and None are both absent
    if lora:
        assert lora_salt(lora) == xxhash.xxh3_64_intdigest(lora.encode(), seed=0)
        # The same string as a namespace lands elsewhere (inner seeds 0 and 1).
        assert block_hash_seed(lora_name=lora) != block_hash_seed(cache_namespace=lora)


@settings(max_examples=100, deadline=None)
@given(st.lists(u32s, min_size=1, max_size=30), names, names)
def test_salt_reaches_hashes_only_through_the_seed(tokens: list[int], lora: str, ns: str) -> None:
    seed = block_hash_seed(lora, ns)
    got = compute_block_hash_for_seq(tokens, 1, lora_name=lora, cache_namespace=ns)
    want = [xxhash.xxh3_64_intdigest(struct.pack("<I", t), seed=seed) for t in tokens]
    assert got.tolist() == want


@settings(max_examples=150, deadline=None)
@given(
    st.lists(u32s, max_size=120),
    st.integers(0, 120),
    st.integers(1, 16),
    st.booleans(),
    st.none() | names,
)
def test_prefix_property(
    tokens: list[int], cut: int, bs: int, eagle: bool, lora: str | None
) -> None:
    initial = tokens[:cut]
    short = compute_block_hash_for_seq(initial, bs, lora_name=lora, is_eagle=eagle)
    full = compute_block_hash_for_seq(tokens, bs, lora_name=lora, is_eagle=eagle)
    assert full[: len(short)].tolist() == short.tolist()
    seq_short = compute_seq_hash_for_block(short)
    seq_full = compute_seq_hash_for_block(full)
    assert seq_full[: len(seq_short)].tolist() == seq_short.tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(u64s, max_size=12), max_size=12))
def test_ragged_and_batch_agree_with_single_chains(seqs: list[list[int]]) -> None:
    flat = np.array([h for s in seqs for h in s], dtype=np.uint64)
    got = compute_seq_hash_ragged(flat, [len(s) for s in seqs]).tolist()
    assert got == [h for s in seqs for h in compute_seq_hash_for_block(s).tolist()]
    if seqs and all(len(s) == len(seqs[0]) for s in seqs):
        batch = compute_seq_hash_batch(np.array(seqs, dtype=np.uint64).reshape(len(seqs), -1))
        assert batch.tolist() == [compute_seq_hash_for_block(s).tolist() for s in seqs]


# ------------------------------------------------- the compiled loops against the Python ones
# From COMPILED_MIN_BLOCKS blocks on, block and sequence hashes run hashing/_compiled's kernels;
# below, the Python loops. Each test runs both with the threshold moved so that every call takes
# the one path, then the other, and requires the same bits (and the same errors).


def _both_paths(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` through the Python loops and through the kernels: equal."""
    saved = blocks_module.COMPILED_MIN_BLOCKS
    results = []
    try:
        for threshold in (2**62, 1):
            blocks_module.COMPILED_MIN_BLOCKS = threshold
            try:
                got = fn(*args, **kwargs)
            except HashingError as exc:
                results.append(("error", exc.variant, str(exc)))
            else:
                assert got.dtype == np.uint64
                results.append(("ok", got.shape, got.tolist()))
    finally:
        blocks_module.COMPILED_MIN_BLOCKS = saved
    assert results[0] == results[1]
    return results[1]


def test_the_kernels_load_and_their_constants_are_xxh3s() -> None:
    from cbi1kit.hashing import _compiled
    from cbi1kit.hashing._xxh3 import SECRET

    assert blocks_module._kernels() is _compiled
    words = [int.from_bytes(SECRET[o : o + 8], "little") for o in (24, 32, 40, 48)]
    assert list(_compiled._SECRET_24_56) == words
    assert _compiled._CHAIN_SEED == 1337 == blocks_module.CHAIN_XXH3_SEED


mm_infos = st.none() | st.lists(
    st.none()
    | st.fixed_dictionaries(
        {"mm_objects": st.lists(st.fixed_dictionaries({"mm_hash": u64s, "offsets": st.just([])}))}
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(u32s, max_size=300),
    bs=st.integers(1, 70),
    lora=st.none() | names,
    eagle=st.none() | st.booleans(),
    ns=st.none() | names,
    mm=mm_infos,
    as_array=st.booleans(),
)
def test_compiled_block_hashes_equal_the_python_loop(
    tokens: list[int],
    bs: int,
    lora: str | None,
    eagle: bool | None,
    ns: str | None,
    mm: Any,
    as_array: bool,
) -> None:
    """Every hash space (standard, EAGLE windows, LoRA and namespace salts, multimodal blocks)
    and block sizes across XXH3's length classes (4 bytes to 284)."""
    arg = np.array(tokens, dtype=np.uint32) if as_array else tokens
    _both_paths(
        compute_block_hash_for_seq,
        arg,
        bs,
        block_mm_infos=mm,
        lora_name=lora,
        is_eagle=eagle,
        cache_namespace=ns,
    )


@pytest.mark.parametrize("bs", [1, 3, 4, 16, 32, 33, 59, 60, 64, 128, 512, 1024])
@pytest.mark.parametrize("eagle", [False, True])
def test_compiled_block_hashes_match_xxhash_per_window(bs: int, eagle: bool) -> None:
    """Long inputs, each window checked against python-xxhash itself."""
    rng = np.random.default_rng(bs)
    tokens = rng.integers(0, 2**32, 40 * bs + 7, dtype=np.uint64).astype(np.uint32)
    seed = block_hash_seed("adapter-a", "tenant")
    got = _both_paths(
        compute_block_hash_for_seq,
        tokens,
        bs,
        lora_name="adapter-a",
        is_eagle=eagle,
        cache_namespace="tenant",
    )
    raw = tokens.astype("<u4").tobytes()
    width = 4 * (bs + 1 if eagle else bs)
    n = block_count(tokens.size, bs, eagle)
    want = [xxhash.xxh3_64_intdigest(raw[4 * bs * i : 4 * bs * i + width], seed) for i in range(n)]
    assert got == ("ok", (n,), want)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(u64s, max_size=40), max_size=12))
def test_compiled_chains_equal_the_python_loops(seqs: list[list[int]]) -> None:
    flat = np.array([h for s in seqs for h in s], dtype=np.uint64)
    lengths = [len(s) for s in seqs]
    ragged = _both_paths(compute_seq_hash_ragged, flat, lengths)
    assert ragged[2] == [h for s in seqs for h in _ref_chain(s)]
    for s in seqs:
        assert _both_paths(compute_seq_hash_for_block, s)[2] == _ref_chain(s)
    if seqs and all(len(s) == len(seqs[0]) for s in seqs):
        batch = np.array(seqs, dtype=np.uint64).reshape(len(seqs), -1)
        assert _both_paths(compute_seq_hash_batch, batch)[2] == [_ref_chain(s) for s in seqs]
        _both_paths(compute_seq_hash_batch, batch.T)  # a non-contiguous view


def test_compiled_chains_on_mooncake_shaped_batches() -> None:
    """100 chains of 3,200 blocks (and a ragged batch of such lengths), edge values included."""
    rng = np.random.default_rng(17)
    batch = rng.integers(0, 2**64, (100, 3200), dtype=np.uint64)
    batch[0] = 2**64 - 1
    batch[1] = 0
    got = _both_paths(compute_seq_hash_batch, batch)
    for r in (0, 1, 57):
        assert got[2][r] == _ref_chain(batch[r].tolist())
    lengths = rng.integers(0, 3200, 100)
    flat = rng.integers(0, 2**64, int(lengths.sum()), dtype=np.uint64)
    _both_paths(compute_seq_hash_ragged, flat, lengths)


def test_compiled_paths_raise_what_the_python_paths_raise() -> None:
    _both_paths(compute_block_hash_for_seq, [1, 2**32], 1)
    _both_paths(compute_block_hash_for_seq, list(range(100)), 0)
    _both_paths(compute_seq_hash_ragged, np.zeros(100, np.uint64), [50, 51])
    _both_paths(compute_seq_hash_for_block, [1] * 70 + [-1])

"""Dynamo's KV block hashes and rolling sequence hashes, bit-exact with upstream.

A CKF stores *sequence* hashes, chained from *local block* hashes of token windows under a seed
salted by LoRA name and cache namespace. Follows ``lib/kv-router/src/protocols.rs`` (windows,
multimodal bytes), ``lib/kv-hashing/src/salt.rs`` (salts) and ``dynamo_tokens`` (the chain);
tested against ``dynamo._core.compute_block_hash_for_seq``. Every hash is an unsigned 64-bit
value (numpy ``uint64`` or ``int``). See docs/spec/hashing.md.
"""

from __future__ import annotations

import array
import functools
import operator
import struct
import sys
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any

import blake3
import numpy as np
import numpy.typing as npt
import xxhash

from cbi1kit.errors import HashingError, HashingVariant
from cbi1kit.hashing._xxh3 import xxh3_64_u64_pair

U64Array = npt.NDArray[np.uint64]

XXH3_SEED = 1337
"""Block-hash seed when neither a LoRA name nor a cache namespace salts it."""
CHAIN_XXH3_SEED = 1337
"""Seed of the rolling sequence-hash chain (``parent ‖ block``)."""
LORA_SALT_SEED = 0
"""Inner seed of ``xxh3(utf8(lora_name))``; not the namespace's, so the two never collide."""
CACHE_NAMESPACE_SALT_SEED = 1
"""Inner seed of ``xxh3(utf8(cache_namespace))``."""
MM_PAD_SHIFT_VALUE = 1_000_000
MM_PAD_HASH_MASK = (1 << 30) - 1

_U64_MASK = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1
_xxh3 = xxhash.xxh3_64_intdigest
_PAIR = struct.Struct("<QQ").pack
_BIG_ENDIAN_HOST = sys.byteorder == "big"
_U32_TYPECODE = "I" if array.array("I").itemsize == 4 else "L"


# --------------------------------------------------------------------------------------------
# Errors: each is also the builtin the compiled binding raises in the same situation, so code
# written against ``dynamo._core`` keeps catching what it caught.


def _block_size_error(
    kv_block_size: Any,
    detail: str = "kv_block_size cannot be 0",
    *,
    variant: HashingVariant = HashingVariant.BlockSize,
) -> HashingError:
    """``BlockSize``: 0 (the binding's ValueError); ``BlockSizeRange``: outside ``u32``.

    The binding raises OverflowError outside ``usize`` and silently truncates ``as u32`` in
    between (``2**32`` acts as 0 and returns ``[]``); a truncated block size is never what a
    caller meant, so we refuse all of it.
    """
    return HashingError(
        variant,
        message=f"{detail} (got {kv_block_size!r})",
        field="kv_block_size",
        actual=kv_block_size,
        kv_block_size=kv_block_size,
    )


def _token_range_error(index: int, value: Any) -> HashingError:
    """``TokenRange``: a token outside ``0..=u32::MAX`` (the binding's OverflowError)."""
    return HashingError(
        HashingVariant.TokenRange,
        message=f"token at index {index} is {value!r}, outside the u32 range 0..=4294967295",
        field=f"tokens[{index}]",
        actual=value,
        index=index,
        value=value,
    )


def _token_type_error(detail: str, *, index: int | None = None, value: Any = None) -> HashingError:
    """``TokenType``: tokens that are not integers (the binding's TypeError)."""
    return HashingError(
        HashingVariant.TokenType,
        message=f"tokens must be integers: {detail}",
        field="tokens" if index is None else f"tokens[{index}]",
        actual=value,
        index=index,
        value=value,
    )


def _argument_error(field: str, value: Any, expected: str) -> HashingError:
    """``BlockHashArgument``: a wrongly typed option (``lora_name``, ``is_eagle``, ...)."""
    return HashingError(
        HashingVariant.BlockHashArgument,
        message=f"{field} must be {expected}, got {type(value).__name__} {value!r}",
        field=field,
        expected=expected,
        actual=value,
    )


def _mm_info_error(
    field: str,
    detail: str,
    value: Any = None,
    *,
    variant: HashingVariant = HashingVariant.MultimodalInfo,
) -> HashingError:
    """``block_mm_infos`` the binding's deserializer rejects; ``MmHashRange`` for a number
    outside its unsigned range."""
    return HashingError(
        variant, message=f"invalid block_mm_infos at {field}: {detail}", field=field, actual=value
    )


def _sequence_input_error(field: str, detail: str, value: Any = None) -> HashingError:
    """``SequenceHashInput``: hashes that are not a u64 vector / matrix, or ragged lengths."""
    return HashingError(
        HashingVariant.SequenceHashInput, message=f"{field}: {detail}", field=field, actual=value
    )


# --------------------------------------------------------------------------------------------
# Salts


def _check_optional_str(field: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _argument_error(field, value, "a str or None")


def lora_salt(lora_name: str | None) -> int:
    """``xxh3(utf8(lora_name), seed=0)``, or 0 when absent (``None`` and ``""`` alike)."""
    name = _check_optional_str("lora_name", lora_name)
    return _xxh3(name.encode("utf-8"), LORA_SALT_SEED) if name else 0


def cache_namespace_salt(cache_namespace: str | None) -> int:
    """``xxh3(utf8(cache_namespace), seed=1)``, or 0 when absent (``None`` and ``""`` alike)."""
    ns = _check_optional_str("cache_namespace", cache_namespace)
    return _xxh3(ns.encode("utf-8"), CACHE_NAMESPACE_SALT_SEED) if ns else 0


def block_hash_seed(lora_name: str | None = None, cache_namespace: str | None = None) -> int:
    """The block-hash seed: ``1337 + lora_salt + namespace_salt (mod 2**64)``.

    Addition commutes, so the two salts have no order; the chain never re-applies them.
    """
    return (XXH3_SEED + lora_salt(lora_name) + cache_namespace_salt(cache_namespace)) & _U64_MASK


# --------------------------------------------------------------------------------------------
# Input normalisation


def _as_index(value: Any) -> int:
    return operator.index(value)


def _block_size(kv_block_size: Any) -> int:
    if isinstance(kv_block_size, (np.integer, int)):
        bs = int(kv_block_size)
    else:
        try:
            bs = _as_index(kv_block_size)
        except TypeError:
            raise _argument_error("kv_block_size", kv_block_size, "an integer") from None
    if not 0 <= bs <= _U32_MAX:
        raise _block_size_error(
            bs, "kv_block_size is outside u32", variant=HashingVariant.BlockSizeRange
        )
    return bs


def _bad_token(values: Iterable[Any]) -> tuple[int, Any, bool]:
    """Error path only: the first token that is not an integer (True) or not a u32 (False)."""
    for i, v in enumerate(values):
        try:
            n = _as_index(v)
        except TypeError:
            return i, v, True
        if not 0 <= n <= _U32_MAX:
            return i, v, False
    raise AssertionError("no offending token found")  # pragma: no cover


def _token_bytes(tokens: Any) -> tuple[bytes, int]:
    """Tokens as one little-endian u32 buffer (and their count), without per-token Python."""
    if isinstance(tokens, np.ndarray):
        if tokens.ndim != 1:
            raise _token_type_error(f"expected a 1-D array, got shape {tokens.shape}")
        if tokens.dtype.kind != "O":
            return _array_token_bytes(tokens)
        tokens = tokens.tolist()
    elif isinstance(tokens, str):
        raise _token_type_error("a str is not a token sequence", value=tokens)
    if not isinstance(tokens, (list, tuple)):
        try:
            tokens = list(tokens)
        except TypeError:
            raise _token_type_error(f"{type(tokens).__name__} is not a sequence") from None
    return _listed_token_bytes(tokens)


def _array_token_bytes(tokens: npt.NDArray[Any]) -> tuple[bytes, int]:
    """A 1-D array of numbers: integral, and every value a u32 (checked in one pass)."""
    kind = tokens.dtype.kind
    if kind not in "biu":
        raise _token_type_error(f"array of dtype {tokens.dtype} is not integral")
    if tokens.size and kind != "b" and not (kind == "u" and tokens.dtype.itemsize <= 4):
        bad = (tokens < 0) | (tokens > _U32_MAX)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _token_range_error(i, tokens[i].item())
    return tokens.astype("<u4", copy=False).tobytes(), int(tokens.size)


def _listed_token_bytes(tokens: list[Any] | tuple[Any, ...]) -> tuple[bytes, int]:
    """A list or tuple packed by ``array``, which names no index: ``_bad_token`` finds it."""
    try:
        buf = array.array(_U32_TYPECODE, tokens)
    except OverflowError:
        i, v, _ = _bad_token(tokens)
        raise _token_range_error(i, v) from None
    except TypeError:
        i, v, not_int = _bad_token(tokens)
        if not not_int:  # pragma: no cover - array only raises TypeError for non-integers
            raise _token_range_error(i, v) from None
        raise _token_type_error(
            f"token at index {i} is {type(v).__name__} {v!r}", index=i, value=v
        ) from None
    if _BIG_ENDIAN_HOST:  # pragma: no cover - upstream forces LE bytes on every host
        buf.byteswap()
    return buf.tobytes(), len(buf)


def _u64_field(value: Any, field: str) -> int:
    if isinstance(value, (float, str, bytes)):
        raise _mm_info_error(field, f"{type(value).__name__} is not an integer", value)
    try:
        n = _as_index(value)
    except TypeError:
        raise _mm_info_error(field, f"{type(value).__name__} is not an integer", value) from None
    if not 0 <= n <= _U64_MASK:
        raise _mm_info_error(
            field, f"{n} is outside 0..=2**64-1", value, variant=HashingVariant.MmHashRange
        )
    return n


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray, Mapping))


def _parse_mm_infos(block_mm_infos: Any) -> list[tuple[int, list[int]]]:
    """Validate every entry as the binding's deserializer does; return (block, hashes) pairs.

    Offsets are required and checked but never hashed. Entries with no objects hash like no
    entry, so only blocks with at least one mm hash are returned.
    """
    if block_mm_infos is None:
        return []
    if not _is_sequence(block_mm_infos):
        raise _mm_info_error(
            "block_mm_infos", f"{type(block_mm_infos).__name__} is not a sequence", block_mm_infos
        )
    out: list[tuple[int, list[int]]] = []
    for i, entry in enumerate(block_mm_infos):
        where = f"block_mm_infos[{i}]"
        if entry is None:
            continue
        if not isinstance(entry, Mapping):
            raise _mm_info_error(where, f"{type(entry).__name__} is not a mapping", entry)
        if "mm_objects" not in entry:
            raise _mm_info_error(where, "missing field `mm_objects`", entry)
        objects = entry["mm_objects"]
        if not _is_sequence(objects):
            raise _mm_info_error(
                f"{where}.mm_objects", f"{type(objects).__name__} is not a sequence", objects
            )
        hashes = [_mm_object_hash(obj, f"{where}.mm_objects[{j}]") for j, obj in enumerate(objects)]
        if hashes:
            hashes.sort()  # Python ints sort as unsigned u64, as upstream's sort_unstable
            out.append((i, hashes))
    return out


def _mm_object_hash(obj: Any, at: str) -> int:
    """One ``mm_objects`` entry checked (``at``: its path): its ``mm_hash``; its ``offsets``
    must be pairs of u64 but are never hashed."""
    if not isinstance(obj, Mapping):
        raise _mm_info_error(at, f"{type(obj).__name__} is not a mapping", obj)
    if "mm_hash" not in obj:
        raise _mm_info_error(at, "missing field `mm_hash`", obj)
    if "offsets" not in obj:
        raise _mm_info_error(at, "missing field `offsets`", obj)
    mm_hash = _u64_field(obj["mm_hash"], f"{at}.mm_hash")
    offsets = obj["offsets"]
    if not _is_sequence(offsets):
        raise _mm_info_error(f"{at}.offsets", "not a sequence of pairs", offsets)
    for k, pair in enumerate(offsets):
        if not _is_sequence(pair) or len(pair) != 2:
            raise _mm_info_error(f"{at}.offsets[{k}]", "expected a pair", pair)
        for end in pair:
            _u64_field(end, f"{at}.offsets[{k}]")
    return mm_hash


def block_count(n_tokens: int, kv_block_size: int, is_eagle: bool | None = None) -> int:
    """How many complete windows ``n_tokens`` yield (a trailing partial window is dropped)."""
    window = kv_block_size + 1 if is_eagle else kv_block_size
    if kv_block_size <= 0 or n_tokens < window:
        return 0
    return (n_tokens - window) // kv_block_size + 1


# --------------------------------------------------------------------------------------------
# The compiled loops

#: Calls with fewer blocks than this run the Python loops (microseconds at that size), so a
#: small call never loads numba; larger ones run ``cbi1kit.hashing._compiled``.
COMPILED_MIN_BLOCKS = 64


@functools.cache
def _kernels() -> Any:
    """``cbi1kit.hashing._compiled`` (compiled on its first call, then cached on disk), or
    ``None`` where numba cannot load (one warning): the Python loops give the same values."""
    from cbi1kit._lazy import compiled

    return compiled("cbi1kit.hashing._compiled")


# --------------------------------------------------------------------------------------------
# Local block hashes


def compute_block_hash_for_seq(
    tokens: npt.ArrayLike | Sequence[int],
    kv_block_size: int,
    block_mm_infos: Sequence[Mapping[str, Any] | None] | None = None,
    lora_name: str | None = None,
    is_eagle: bool | None = None,
    cache_namespace: str | None = None,
) -> U64Array:
    """Local block hashes (``LocalBlockHash``, an event's ``tokens_hash``) of a token sequence.

    Same signature and values as ``dynamo._core.compute_block_hash_for_seq``, as ``uint64``;
    rules in docs/spec/hashing.md §2. From ``COMPILED_MIN_BLOCKS`` blocks on, windows hash in
    a compiled loop (``cbi1kit.hashing._compiled``); below, one ``xxhash`` call per window.
    """
    buf, n_tokens = _token_bytes(tokens)
    bs = _block_size(kv_block_size)
    _check_optional_str("lora_name", lora_name)
    if is_eagle is not None and not isinstance(is_eagle, (bool, np.bool_)):
        raise _argument_error("is_eagle", is_eagle, "a bool or None")
    _check_optional_str("cache_namespace", cache_namespace)
    if bs == 0:
        raise _block_size_error(kv_block_size)
    mm = _parse_mm_infos(block_mm_infos)
    seed = block_hash_seed(lora_name, cache_namespace)
    n = block_count(n_tokens, bs, bool(is_eagle))
    stride = bs * 4
    width = stride + 4 if is_eagle else stride
    kernels = _kernels() if n >= COMPILED_MIN_BLOCKS else None
    if kernels is not None:
        out: U64Array = kernels.block_hashes(buf, n, stride, width, seed)
    else:
        windows = [buf[s : s + width] for s in range(0, n * stride, stride)]
        out = np.fromiter(map(_xxh3, windows, repeat(seed, n)), dtype=np.uint64, count=n)
    for i, hashes in mm:
        if i >= n:
            break
        window = buf[i * stride : i * stride + width]
        out[i] = _xxh3(window + struct.pack(f"<{len(hashes)}Q", *hashes), seed)
    return out


# --------------------------------------------------------------------------------------------
# Rolling sequence hashes


def _u64_blocks(block_hashes: Any, field: str) -> U64Array:
    """Block hashes as uint64, exactly: never through float, never wrapping a negative."""
    arr = block_hashes if isinstance(block_hashes, np.ndarray) else None
    if arr is not None and arr.dtype == np.uint64:
        return arr
    if arr is not None and arr.dtype.kind == "u":
        return arr.astype(np.uint64)
    if arr is not None and arr.dtype.kind == "i":
        if arr.size and int(arr.min()) < 0:
            i = int(np.flatnonzero(arr.ravel() < 0)[0])
            v = arr.ravel()[i].item()
            raise _sequence_input_error(field, f"{v} at flat index {i} is not a u64 hash", v)
        return arr.astype(np.uint64)
    if arr is not None and arr.dtype.kind != "O":
        raise _sequence_input_error(field, f"dtype {arr.dtype} is not an integer dtype")
    # Python sequences (or object arrays): check every value as an int, then convert.
    obj = np.empty(0, dtype=object) if arr is None and len(block_hashes) == 0 else None
    obj = obj if obj is not None else np.asarray(block_hashes, dtype=object)
    flat = obj.ravel().tolist()
    for v in flat:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v <= _U64_MASK:
            raise _sequence_input_error(field, f"{v!r} is not a u64 hash", v)
    return np.array(flat, dtype=np.uint64).reshape(obj.shape)


def compute_seq_hash_for_block(block_hashes: npt.ArrayLike | Sequence[int]) -> U64Array:
    """The rolling chain over one sequence's local block hashes.

    ``seq[0] = block[0]``; ``seq[i] = xxh3_64(u64_le(seq[i-1]) ‖ u64_le(block[i]), seed=1337)``.
    Inherently serial: from ``COMPILED_MIN_BLOCKS`` blocks on, a compiled loop
    (``cbi1kit.hashing._compiled``); below, one ``xxhash`` call per block.
    """
    arr = _u64_blocks(block_hashes, "block_hashes")
    if arr.ndim != 1:
        raise _sequence_input_error("block_hashes", f"expected a 1-D vector, got {arr.shape}")
    kernels = _kernels() if arr.size >= COMPILED_MIN_BLOCKS else None
    if kernels is not None:
        chain: U64Array = kernels.seq_hash_chains(
            arr, np.zeros(1, np.int64), np.full(1, arr.size, np.int64)
        )
        return chain
    values = arr.tolist()
    if not values:
        return np.empty(0, dtype=np.uint64)
    out = [0] * len(values)
    parent = out[0] = values[0]
    for i in range(1, len(values)):
        parent = out[i] = _xxh3(_PAIR(parent, values[i]), CHAIN_XXH3_SEED)
    return np.array(out, dtype=np.uint64)


def compute_seq_hash_batch(block_hashes: npt.ArrayLike) -> U64Array:
    """Chains of equal length at once: row ``r`` of the ``(n_seqs, n_blocks)`` result is
    :func:`compute_seq_hash_for_block` of row ``r``. Compiled (every chain in turn) from
    ``COMPILED_MIN_BLOCKS`` blocks on; below, vectorised across sequences."""
    arr = _u64_blocks(block_hashes, "block_hashes")
    if arr.ndim != 2:
        raise _sequence_input_error("block_hashes", f"expected (n_seqs, n_blocks), got {arr.shape}")
    if arr.shape[1] == 0 or arr.shape[0] == 0:
        return np.empty(arr.shape, dtype=np.uint64)
    kernels = _kernels() if arr.size >= COMPILED_MIN_BLOCKS else None
    if kernels is not None:
        rows, cols = arr.shape
        flat = kernels.seq_hash_chains(
            arr.reshape(-1),
            np.arange(rows, dtype=np.int64) * cols,
            np.full(rows, cols, dtype=np.int64),
        )
        result: U64Array = flat.reshape(arr.shape)
        return result
    out = np.empty(arr.shape, dtype=np.uint64)
    out[:, 0] = arr[:, 0]
    for j in range(1, arr.shape[1]):
        out[:, j] = xxh3_64_u64_pair(out[:, j - 1], arr[:, j], CHAIN_XXH3_SEED)
    return out


def compute_seq_hash_ragged(block_hashes: npt.ArrayLike, lengths: npt.ArrayLike) -> U64Array:
    """Chains of different lengths laid end to end in one flat vector.

    ``lengths[k]`` blocks of sequence ``k`` follow those of sequence ``k-1``; the result has the
    same layout. Compiled from ``COMPILED_MIN_BLOCKS`` blocks on (a chain is serial);
    below, a numpy loop stepping all sequences one block position at a time.
    """
    flat = _u64_blocks(block_hashes, "block_hashes")
    if flat.ndim != 1:
        raise _sequence_input_error("block_hashes", f"expected a flat vector, got {flat.shape}")
    lens = np.asarray(lengths)
    if lens.ndim != 1 or (lens.size and lens.dtype.kind not in "ui"):
        raise _sequence_input_error("lengths", "expected a 1-D integer vector", lengths)
    lens = lens.astype(np.int64)
    if lens.size and int(lens.min()) < 0:
        raise _sequence_input_error("lengths", "lengths must be non-negative", lengths)
    total = int(lens.sum())
    if total != flat.size:
        raise _sequence_input_error(
            "lengths", f"sum to {total} but there are {flat.size} block hashes", lengths
        )
    if lens.size and total >= COMPILED_MIN_BLOCKS and (kernels := _kernels()) is not None:
        chains: U64Array = kernels.seq_hash_chains(flat, np.cumsum(lens) - lens, lens)
        return chains
    out = flat.copy()
    if not lens.size or total == 0:
        return out
    starts = np.cumsum(lens) - lens
    order = np.argsort(-lens, kind="stable")
    starts_sorted = starts[order]
    lens_sorted = lens[order]
    max_len = int(lens_sorted[0])
    # n_longer[j] = how many sequences have more than j blocks (a prefix of the sorted order).
    n_longer = np.searchsorted(-lens_sorted, -np.arange(max_len), side="left")
    for j in range(1, max_len):
        idx = starts_sorted[: int(n_longer[j])] + j
        out[idx] = xxh3_64_u64_pair(out[idx - 1], flat[idx], CHAIN_XXH3_SEED)
    return out


# --------------------------------------------------------------------------------------------
# Other helpers


def lora_name_to_id(name: str) -> int:
    """Dynamo's LoRA integer id: ``u64_be(blake3(name)[:8]) & 0x7FFFFFFF``, never 0.

    Not used in block hashing (that salts with the *name*), but engines report it.
    """
    if not isinstance(name, str):
        raise _argument_error("name", name, "a str")
    value = int.from_bytes(blake3.blake3(name.encode("utf-8")).digest()[:8], "big") & 0x7FFFFFFF
    return value or 1


def hash_mm_identifier(identifier: str) -> int | None:
    """A multimodal item's u64 hash from its engine identifier (source-only upstream helper).

    ``""`` → None; a 64-char hex digest (vLLM) → its first 16 hex digits; else ``xxh3(s, 0)``.
    """
    if not identifier:
        return None
    if len(identifier) == 64 and all(c in "0123456789abcdefABCDEF" for c in identifier):
        return int(identifier[:16], 16)
    return _xxh3(identifier.encode("utf-8"), 0)


def pad_value_for_mm_hash(mm_hash: int) -> int:
    """The u32 placeholder token an engine writes for a multimodal item (source-only helper)."""
    return (MM_PAD_SHIFT_VALUE + (mm_hash & MM_PAD_HASH_MASK)) & _U32_MAX

"""Workloads: request streams as canonical sequence hashes, from real traces or token-level chats.

A :class:`Workload` lays requests end to end in flat ``uint64`` arrays: arrival time (ms), token
counts, the blocks' *local* hashes (an engine's ``tokens_hash``) and *canonical sequence* hashes
(what a CKF stores, ckf.md §1.2; :func:`cbi1kit.hashing._blocks.compute_seq_hash_ragged`).
:func:`read_mooncake` reads a Mooncake JSONL trace (``timestamp`` ms, ``input_length``,
``output_length``, ``hash_ids``; block size 512): ids are remapped prefix block ids (equal ids ⇔
equal prefix), tokens unreleased, so each id is one block of local hash
``xxh3_64(u64_le(id), seed)``, ``seed`` = ``block_hash_seed(lora_name, cache_namespace)`` (1337
unsalted). :func:`synthetic_chat` hashes real token windows (:func:`compute_block_hash_for_seq`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from cbi1kit.errors import SimulationError, SimulationVariant
from cbi1kit.hashing._blocks import (
    block_count,
    block_hash_seed,
    compute_block_hash_for_seq,
    compute_seq_hash_ragged,
)
from cbi1kit.hashing._formats import KvQueryHashFormat
from cbi1kit.hashing._xxh3 import xxh3_64_u64

MOONCAKE_BLOCK_SIZE = 512
"""Tokens per ``hash_ids`` entry in the Mooncake FAST'25 traces."""

#: What JSON counts as whitespace (RFC 8259): a line of only these is blank.
_JSON_WHITESPACE = " \t\r\n"

HashSpaceName = Literal["standard", "eagle", "lora"]
U64Array = npt.NDArray[np.uint64]
I64Array = npt.NDArray[np.int64]


def _workload_error(
    reason: str, *, source: str, line: int | None = None, field: str | None = None
) -> SimulationError:
    """``Workload``: a trace that cannot be read (``source``, ``line`` 1-based, ``field``)."""
    where = source + (f":{line}" if line is not None else "")
    what = f" field {field}" if field else ""
    return SimulationError(
        SimulationVariant.Workload,
        reason,
        message=f"{where}{what}: {reason}",
        field=field,
        source=source,
        line=line,
        reason=reason,
    )


@dataclass(frozen=True, slots=True, eq=False)
class TraceRequest:
    """One request of a workload, as ``ck.explain(request=...)`` takes it: its blocks' local
    hashes, the block size and hash format they were cut with, the adapter that salted them,
    and a Mooncake request's ``hash_ids`` (None for token-level requests)."""

    index: int
    timestamp_ms: int
    block_size: int
    hash_format: KvQueryHashFormat
    local_hashes: U64Array
    lora_name: str | None = None
    cache_namespace: str | None = None
    hash_ids: I64Array | None = None

    def block_hashes(self, lora_name: str | None) -> U64Array:
        """The local hashes under adapter ``lora_name``: a Mooncake request's ids are hashed
        again with that salt; a token-level request has only the salt it was built with."""
        if (lora_name or None) == (self.lora_name or None):
            return self.local_hashes
        if self.hash_ids is None:
            raise _workload_error(
                f"request {self.index} was hashed with adapter {self.lora_name!r}, not "
                f"{lora_name!r}, and keeps no hash ids to hash again",
                source="request",
            )
        return mooncake_local_hashes(
            self.hash_ids, lora_name=lora_name, cache_namespace=self.cache_namespace
        )


@dataclass(frozen=True, slots=True, eq=False)
class Workload:
    """Requests in arrival order, blocks laid end to end.

    Request ``i`` owns blocks ``offsets[i]:offsets[i+1]`` of ``local_hashes`` / ``seq_hashes``
    (and of ``hash_ids`` for a Mooncake trace). ``lora_names[i]`` is the adapter a request was
    hashed under (None for base-model requests).
    """

    timestamps_ms: I64Array
    input_tokens: I64Array
    output_tokens: I64Array
    offsets: I64Array
    local_hashes: U64Array
    seq_hashes: U64Array
    block_size: int
    hash_format: KvQueryHashFormat = KvQueryHashFormat.DYNAMO_STANDARD_V1
    hash_ids: I64Array | None = None
    lora_names: tuple[str | None, ...] = ()
    source: str = ""
    meta: dict[str, object] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.timestamps_ms.size)

    @property
    def block_counts(self) -> I64Array:
        """Blocks per request (``int64``), from ``offsets``."""
        return np.diff(self.offsets)

    @property
    def total_blocks(self) -> int:
        """Blocks over every request (``offsets[-1]``)."""
        return int(self.offsets[-1])

    def blocks(self, i: int) -> tuple[U64Array, U64Array]:
        """``(local_hashes, seq_hashes)`` of request ``i`` (views)."""
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.local_hashes[s:e], self.seq_hashes[s:e]

    def request(self, i: int) -> TraceRequest:
        """Request ``i`` on its own (what ``ck.explain(request=...)`` looks up)."""
        if not 0 <= i < len(self):
            raise _workload_error(
                f"request {i} is outside the workload's {len(self)} requests",
                source=self.source or "workload",
                field="request",
            )
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        ns = self.meta.get("cache_namespace")
        return TraceRequest(
            i,
            int(self.timestamps_ms[i]),
            self.block_size,
            self.hash_format,
            self.local_hashes[s:e],
            self.lora_names[i] if self.lora_names else None,
            ns if isinstance(ns, str) else None,
            None if self.hash_ids is None else self.hash_ids[s:e],
        )

    def head(self, n: int) -> Workload:
        """The first ``n`` requests (a trace prefix, for tests and quick runs)."""
        n = max(0, min(n, len(self)))
        end = int(self.offsets[n])
        return Workload(
            timestamps_ms=self.timestamps_ms[:n],
            input_tokens=self.input_tokens[:n],
            output_tokens=self.output_tokens[:n],
            offsets=self.offsets[: n + 1],
            local_hashes=self.local_hashes[:end],
            seq_hashes=self.seq_hashes[:end],
            block_size=self.block_size,
            hash_format=self.hash_format,
            hash_ids=None if self.hash_ids is None else self.hash_ids[:end],
            lora_names=self.lora_names[:n],
            source=self.source,
            meta=dict(self.meta),
        )

    def unique_blocks(self) -> int:
        """Distinct sequence hashes in the workload."""
        return int(np.unique(self.seq_hashes).size)

    def summary(self) -> dict[str, object]:
        """Headline figures: requests, blocks (unique too), block size, format, duration."""
        counts = self.block_counts
        return {
            "requests": len(self),
            "blocks": self.total_blocks,
            "unique_blocks": self.unique_blocks(),
            "block_size": self.block_size,
            "hash_format": self.hash_format.serde_name,
            "duration_ms": int(self.timestamps_ms[-1] - self.timestamps_ms[0]) if len(self) else 0,
            "mean_blocks_per_request": float(counts.mean()) if counts.size else 0.0,
        }


def mooncake_local_hashes(
    hash_ids: npt.ArrayLike, *, lora_name: str | None = None, cache_namespace: str | None = None
) -> U64Array:
    """Stable local block hashes for Mooncake ``hash_ids``: ``xxh3_64(u64_le(id), seed)``.

    ``seed`` is the block-hash seed of the hash space, so LoRA and namespace salts separate
    workloads exactly as they separate token blocks. Negative ids are refused.
    """
    ids = np.asarray(hash_ids)
    if ids.size and (ids.dtype.kind not in "iu" or int(ids.min()) < 0):
        raise _workload_error("hash ids must be non-negative integers", source="hash_ids")
    return xxh3_64_u64(ids.astype(np.uint64), block_hash_seed(lora_name, cache_namespace))


#: the simulated clock's halves: the epoch (``RelayConfig.epoch_unix_ns``) and a trace's time
#: each at most this many ns, so that their sum, every receive time, stays an i64 of ns
SIM_NS_MAX: Final = (1 << 62) - 1
#: the largest value each integer field of a trace line may hold: a timestamp (ms) within
#: ``SIM_NS_MAX``; token counts a u32; hash ids an i64 (larger ones were a traceback deep in
#: numpy, not a bad line)
TRACE_FIELD_MAX: Final = {
    "timestamp": SIM_NS_MAX // 1_000_000,
    "input_length": (1 << 32) - 1,
    "output_length": (1 << 32) - 1,
    "hash_ids": (1 << 63) - 1,
}


def _int_field(obj: dict[str, object], key: str, source: str, line: int) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _workload_error(
            f"expected a non-negative integer, got {value!r}", source=source, line=line, field=key
        )
    if value > TRACE_FIELD_MAX[key]:
        raise _workload_error(
            f"{value} is above {TRACE_FIELD_MAX[key]}", source=source, line=line, field=key
        )
    return value


def read_mooncake(
    path: str | os.PathLike[str],
    *,
    limit: int | None = None,
    lora_name: str | None = None,
    cache_namespace: str | None = None,
    block_size: int = MOONCAKE_BLOCK_SIZE,
) -> Workload:
    """A Mooncake JSONL trace as a :class:`Workload` (the first ``limit`` requests if given).

    Requests are kept in file order; timestamps must not decrease. Raises
    :class:`~cbi1kit.errors.SimulationError` naming the line and field of the first bad record.
    """
    source = str(path)
    ts, inp, out, lens, ids = _read_trace(path, source, limit)
    hash_ids = np.array(ids, dtype=np.int64)
    lengths = np.array(lens, dtype=np.int64)
    # Hash each distinct id once, then scatter (the trace repeats shared prefixes a lot).
    uniq, inverse = np.unique(hash_ids, return_inverse=True)
    local = mooncake_local_hashes(uniq, lora_name=lora_name, cache_namespace=cache_namespace)[
        inverse
    ]
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Workload(
        timestamps_ms=np.array(ts, dtype=np.int64),
        input_tokens=np.array(inp, dtype=np.int64),
        output_tokens=np.array(out, dtype=np.int64),
        offsets=offsets,
        local_hashes=local,
        seq_hashes=compute_seq_hash_ragged(local, lengths),
        block_size=block_size,
        hash_ids=hash_ids,
        lora_names=(lora_name,) * len(ts),
        source=source,
        meta={"kind": "mooncake", "lora_name": lora_name, "cache_namespace": cache_namespace},
    )


def _read_trace(
    path: str | os.PathLike[str], source: str, limit: int | None
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """The trace's columns: timestamps, input and output lengths, and each request's count of
    hash ids with all the ids laid end to end."""
    ts: list[int] = []
    inp: list[int] = []
    out: list[int] = []
    lens: list[int] = []
    ids: list[int] = []
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise _workload_error(f"cannot read: {exc.strerror or exc}", source=source) from None
    with fh:
        for lineno, raw in enumerate(fh, 1):
            if limit is not None and len(ts) >= limit:
                break
            obj = _json_object(raw, source, lineno, first=not ts)
            if obj is None:
                continue
            t = _int_field(obj, "timestamp", source, lineno)
            if ts and t < ts[-1]:
                raise _workload_error(
                    f"timestamp {t} is before the previous {ts[-1]}",
                    source=source,
                    line=lineno,
                    field="timestamp",
                )
            hid = _hash_ids(obj, source, lineno)
            ts.append(t)
            inp.append(_int_field(obj, "input_length", source, lineno))
            out.append(_int_field(obj, "output_length", source, lineno))
            lens.append(len(hid))
            ids.extend(hid)
    if not ts:
        raise _workload_error("no requests", source=source)
    return ts, inp, out, lens, ids


def _json_object(
    raw: bytes, source: str, lineno: int, *, first: bool = False
) -> dict[str, object] | None:
    """A trace line as its JSON object; None for a blank line. A ``first`` line that is no text,
    no JSON or no object is a file of another format (no line: the CLI's exit 3), not a bad
    trace line; a value the parser refuses (a huge integer, deep nesting) is a bad line."""

    def foreign(why: str) -> SimulationError:
        if first:
            return _workload_error(
                f"not a Mooncake .jsonl trace (line {lineno}: {why})", source=source
            )
        return _workload_error(why, source=source, line=lineno)

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise foreign(f"not UTF-8 text ({exc.reason} at byte {exc.start} of the line)") from None
    if not text.strip(_JSON_WHITESPACE):  # not str.strip(): "\x1c" is no JSON blank
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise foreign(f"not JSON: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # a huge integer, nesting too deep
        raise _workload_error(
            f"a JSON value the parser refuses ({type(exc).__name__})", source=source, line=lineno
        ) from None
    if not isinstance(obj, dict):
        raise foreign("not a JSON object")
    return obj


def _hash_ids(obj: dict[str, object], source: str, lineno: int) -> list[int]:
    hid = obj.get("hash_ids")
    if not isinstance(hid, list) or any(
        isinstance(h, bool) or not isinstance(h, int) or not 0 <= h <= TRACE_FIELD_MAX["hash_ids"]
        for h in hid
    ):
        raise _workload_error(
            f"expected a list of integers in 0..={TRACE_FIELD_MAX['hash_ids']}",
            source=source,
            line=lineno,
            field="hash_ids",
        )
    return hid


def _hash_space(space: HashSpaceName) -> KvQueryHashFormat:
    if space == "eagle":
        return KvQueryHashFormat.DYNAMO_EAGLE_V1
    if space in ("standard", "lora"):
        return KvQueryHashFormat.DYNAMO_STANDARD_V1
    raise _workload_error(f"unknown hash space {space!r}", source="synthetic_chat")


def synthetic_chat(
    n_sessions: int,
    *,
    hash_space: HashSpaceName = "standard",
    block_size: int = 16,
    n_system_prompts: int = 4,
    system_prompt_tokens: int = 256,
    turns: tuple[int, int] = (1, 6),
    user_tokens: tuple[int, int] = (16, 128),
    assistant_tokens: tuple[int, int] = (16, 256),
    vocab_size: int = 32_000,
    lora_names: Sequence[str] = ("adapter-a", "adapter-b"),
    lora_fraction: float = 0.5,
    session_rate_per_s: float = 2.0,
    think_time_ms: tuple[int, int] = (1_000, 20_000),
    seed: int = 0,
) -> Workload:
    """Token-level chat sessions sharing ``n_system_prompts`` system prompts. Each runs ``turns``
    turns, each request the whole conversation so far (later turns extend earlier ones block for
    block); sessions start as a Poisson process (``session_rate_per_s``), turns after a think time.
    ``"lora"``: a ``lora_fraction`` of sessions runs under one of ``lora_names`` (salted apart from
    the base model); ``"eagle"`` hashes ``block_size + 1``-token windows. Ranges are inclusive
    ``(low, high)``; fully seeded."""
    fmt = _hash_space(hash_space)
    if n_sessions < 1 or n_system_prompts < 1 or block_size < 1:
        raise _workload_error(
            "n_sessions, n_system_prompts and block_size must be >= 1", source="synthetic_chat"
        )
    rng = np.random.default_rng(seed)
    eagle = fmt.is_eagle
    shape = _ChatShape(turns, user_tokens, assistant_tokens, think_time_ms, vocab_size)
    prompts = [
        rng.integers(0, vocab_size, size=system_prompt_tokens, dtype=np.uint32)
        for _ in range(n_system_prompts)
    ]
    starts = np.cumsum(rng.exponential(1000.0 / session_rate_per_s, size=n_sessions))
    # (time, session, turn, n_tokens, output) rows, then each session's hashes once.
    rows: list[tuple[int, int, int, int, int]] = []
    session_hashes: list[U64Array] = []
    session_lora: list[str | None] = []
    for s in range(n_sessions):
        prompt = prompts[int(rng.integers(0, n_system_prompts))]
        lora = None
        if hash_space == "lora" and lora_names and rng.random() < lora_fraction:
            lora = lora_names[int(rng.integers(0, len(lora_names)))]
        tokens = shape.session(rng, prompt, float(starts[s]), s, rows)
        session_hashes.append(
            compute_block_hash_for_seq(tokens, block_size, lora_name=lora, is_eagle=eagle)
        )
        session_lora.append(lora)
    return _chat_workload(rows, session_hashes, session_lora, block_size, hash_space, seed)


@dataclass(frozen=True, slots=True)
class _ChatShape:
    """A chat session's shape, ranges inclusive: its turns, the tokens of each user and
    assistant message, the think time before the next turn; the vocabulary drawn from."""

    turns: tuple[int, int]
    user_tokens: tuple[int, int]
    assistant_tokens: tuple[int, int]
    think_time_ms: tuple[int, int]
    vocab_size: int

    def session(
        self,
        rng: np.random.Generator,
        prompt: npt.NDArray[np.uint32],
        start: float,
        s: int,
        rows: list[tuple[int, int, int, int, int]],
    ) -> npt.NDArray[np.uint32]:
        """Session ``s``'s tokens after ``prompt``, each turn's request appended to ``rows``
        as ``(time, session, turn, n_tokens, output)``: the conversation so far."""
        parts = [prompt]
        t = start
        length = prompt.size
        for k in range(_draw(rng, self.turns)):
            user = rng.integers(0, self.vocab_size, _draw(rng, self.user_tokens), np.uint32)
            answer = rng.integers(0, self.vocab_size, _draw(rng, self.assistant_tokens), np.uint32)
            parts.append(user)
            length += user.size
            rows.append((round(t), s, k, length, int(answer.size)))
            parts.append(answer)
            length += answer.size
            t += _draw(rng, self.think_time_ms)
        return np.concatenate(parts)


def _chat_workload(
    rows: list[tuple[int, int, int, int, int]],
    session_hashes: list[U64Array],
    session_lora: list[str | None],
    block_size: int,
    hash_space: HashSpaceName,
    seed: int,
) -> Workload:
    """:func:`synthetic_chat`'s requests ``rows`` (``(time, session, turn, n_tokens, output)``)
    in arrival order (ties by session, then turn), each one's blocks the first of its
    session's hashes."""
    fmt = _hash_space(hash_space)
    order = sorted(range(len(rows)), key=lambda i: (rows[i][0], rows[i][1], rows[i][2]))
    lengths = np.array([block_count(rows[i][3], block_size, fmt.is_eagle) for i in order], np.int64)
    local = np.concatenate(
        [session_hashes[rows[i][1]][:n] for i, n in zip(order, lengths.tolist(), strict=True)]
        or [np.empty(0, dtype=np.uint64)]
    )
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Workload(
        timestamps_ms=np.array([rows[i][0] for i in order], dtype=np.int64),
        input_tokens=np.array([rows[i][3] for i in order], dtype=np.int64),
        output_tokens=np.array([rows[i][4] for i in order], dtype=np.int64),
        offsets=offsets,
        local_hashes=local.astype(np.uint64, copy=False),
        seq_hashes=compute_seq_hash_ragged(local, lengths),
        block_size=block_size,
        hash_format=fmt,
        lora_names=tuple(session_lora[rows[i][1]] for i in order),
        source=f"synthetic_chat(seed={seed}, space={hash_space})",
        meta={"kind": "synthetic_chat", "hash_space": hash_space, "seed": seed},
    )


def _draw(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    return int(rng.integers(bounds[0], bounds[1] + 1, dtype=np.int64))


def concat(workloads: Iterable[Workload]) -> Workload:
    """Merge workloads of one block size and hash format, re-sorted by arrival (stable)."""
    items = list(workloads)
    if not items:
        raise _workload_error("nothing to merge", source="concat")
    first = items[0]
    for w in items[1:]:
        if w.block_size != first.block_size or w.hash_format != first.hash_format:
            raise _workload_error("block size or hash format differ", source="concat")
    ts = np.concatenate([w.timestamps_ms for w in items])
    order = np.argsort(ts, kind="stable")
    counts = np.concatenate([w.block_counts for w in items])
    starts = np.concatenate(
        [w.offsets[:-1] + sum(int(v.offsets[-1]) for v in items[:k]) for k, w in enumerate(items)]
    )
    local_all = np.concatenate([w.local_hashes for w in items])
    seq_all = np.concatenate([w.seq_hashes for w in items])
    idx = np.concatenate(
        [np.arange(starts[i], starts[i] + counts[i], dtype=np.int64) for i in order.tolist()]
        or [np.empty(0, dtype=np.int64)]
    )
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(counts[order], out=offsets[1:])
    loras = [name for w in items for name in (w.lora_names or (None,) * len(w))]
    return Workload(
        timestamps_ms=ts[order],
        input_tokens=np.concatenate([w.input_tokens for w in items])[order],
        output_tokens=np.concatenate([w.output_tokens for w in items])[order],
        offsets=offsets,
        local_hashes=local_all[idx],
        seq_hashes=seq_all[idx],
        block_size=first.block_size,
        hash_format=first.hash_format,
        lora_names=tuple(loras[i] for i in order.tolist()),
        source="+".join(w.source for w in items),
    )


def read_workload(path: str | os.PathLike[str], *, limit: int | None = None) -> Workload:
    """A trace file by extension (``.jsonl`` Mooncake); a convenience for the CLI."""
    p = Path(path)
    if p.suffix not in (".jsonl", ".json"):
        raise _workload_error("expected a Mooncake .jsonl trace", source=str(p))
    return read_mooncake(p, limit=limit)

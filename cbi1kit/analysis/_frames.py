"""The ``frames`` table: one row per message, the consumer's verdict on each.

One compiled pass per span of frames (:func:`cbi1kit.analysis._kernels.frame_columns`) writes
the final column buffers: the envelope, the CBI1 header, the body checksum, the first failing
rule, and which producer and relay each row carries. Those sub-messages are parsed once each
(their bytes repeat on every row of a stream) and spread to the rows as dimensions, strings as
categoricals. The schema is :mod:`cbi1kit.analysis._schema`'s (``docs/tables.md``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from cbi1kit._lazy import kernels_for
from cbi1kit.analysis._reference import (
    _ERROR,
    _MALFORMED,
    _NO_PRODUCER,
    _PRODUCER_COLS,
    _RELAY_COLS,
    _UNSUPPORTED,
    HEADER_COLUMNS,
    _producer_summary,
    _relay_summary,
)
from cbi1kit.analysis._replayer import check_engine
from cbi1kit.analysis._schema import _KIND_ENUM, FRAMES_SCHEMA, arrow_schema
from cbi1kit.capture._items import FrameDamage, FrameSpan, SourceError, is_plane_update_damage
from cbi1kit.errors import error_name
from cbi1kit.wire._rules import RULES

FRAME_BATCH_ROWS: Final = 65536


class _Dims:
    """The producer and relay sub-messages met so far, each parsed once: their bytes back to
    back (what the kernel compares a row's with) and their columns."""

    def __init__(self) -> None:
        from cbi1kit.analysis._kernels import PRODUCER_U32, PRODUCER_U64, RELAY_U64

        self.pool = bytearray()
        self.producers: list[tuple[int, int, tuple[Any, ...]]] = []  # at, length, summary
        self.relays: list[tuple[int, int, tuple[Any, ...]]] = []
        # the kernel's arrays, grown by doubling (a capture may carry a producer per session)
        head = [(np.int64, 1), (np.int64, 1), (np.uint8, 1)]  # at, length, verdict
        u64 = (np.uint64, 1)
        self._p = _Columns(
            [*head, u64, u64, u64, (np.uint64, len(PRODUCER_U64)), (np.uint32, len(PRODUCER_U32))]
        )
        self._r = _Columns([*head, (np.uint64, len(RELAY_U64))])
        self._args: tuple[npt.NDArray[Any], ...] | None = None
        self._strings: dict[str, tuple[list[str], npt.NDArray[np.bool_]]] | None = None

    def add(self, which: int, raw: bytes) -> None:
        from cbi1kit.analysis._kernels import (
            DIM_INVALID,
            DIM_MALFORMED,
            DIM_UNSUPPORTED,
            NEED_PRODUCER,
            PRODUCER_U32,
            PRODUCER_U64,
            RELAY_U64,
        )

        at, n = len(self.pool), len(raw)
        self.pool += raw
        if which == NEED_PRODUCER:
            s = _producer_summary(raw)
            self.producers.append((at, n, s))
            bad = (DIM_INVALID if s[_ERROR] else 0) | (DIM_MALFORMED if s[_MALFORMED] else 0)
            bad |= DIM_UNSUPPORTED if s[_UNSUPPORTED] else 0
            u64 = [s[_PRODUCER_COLS.index(c)] or 0 for c in PRODUCER_U64]
            u32 = [s[_PRODUCER_COLS.index(c)] or 0 for c in PRODUCER_U32]
            self._p.add([at, n, bad, s[9] or 0, s[10] or 0, s[5] or 0, u64, u32])
        else:
            r = _relay_summary(raw)
            self.relays.append((at, n, r))
            u64 = [r[_RELAY_COLS.index(c)] or 0 for c in RELAY_U64]
            self._r.add([at, n, DIM_MALFORMED if r[2] else 0, u64])
        self._args = None
        self._strings = None

    def args(self) -> tuple[npt.NDArray[Any], ...]:
        """The kernel's ``dims`` argument."""
        if self._args is None:
            p_at, p_len, p_bad, p_seed, p_buckets, p_dc, pv64, pv32 = self._p.views()
            r_at, r_len, r_bad, rv64 = self._r.views()
            pool = np.frombuffer(bytes(self.pool) or b"\0", np.uint8)
            self._args = (pool, p_at, p_len, p_bad, p_seed, p_buckets, p_dc, r_at, r_len, r_bad)
            self._args += (pv64, pv32, rv64)
        return self._args

    def strings(self) -> dict[str, tuple[list[str], npt.NDArray[np.bool_]]]:
        """The producers' string columns: a value per producer and a last one for rows without
        (empty where null), and which are set."""
        if self._strings is None:
            rows = [s for _a, _n, s in self.producers] + [_NO_PRODUCER]
            self._strings = {}
            for name in _PRODUCER_STRINGS:
                got = [r[_PRODUCER_COLS.index(name)] for r in rows]
                has = np.array([v is not None for v in got], dtype=np.bool_)
                self._strings[name] = ([v or "" for v in got], has)
        return self._strings

    def valid(self) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """Per producer and per relay, whether it parsed (its columns are there), and a last
        False for rows without one."""
        p = [s[_MALFORMED] is None for _a, _n, s in self.producers]
        r = [s[-1] is None for _a, _n, s in self.relays]
        return np.array([*p, False], dtype=np.bool_), np.array([*r, False], dtype=np.bool_)


class _Batch:
    """Rows gathered for one DataFrame: the kernel's column blocks."""

    def __init__(self, cap: int) -> None:
        from cbi1kit.analysis._kernels import C8, C16, C32, C64

        self.cap, self.rows = cap, 0
        self.blocks = (  # a row's values side by side: the kernel writes a row at a time
            np.empty((cap, len(C64)), np.uint64),
            np.empty((cap, len(C32)), np.uint32),
            np.empty((cap, len(C16)), np.uint16),
            np.empty((cap, len(C8)), np.uint8),
        )


_PRODUCER_STRINGS: Final = (
    "cache_semantics",
    "cache_semantics_source",
    "routing_scope",
    "routing_scope_source",
    "producer_key",
)


class _Columns:
    """Arrays that grow a row at a time by doubling: ``(dtype, width)`` each, a width above one
    a ``(width, rows)`` block."""

    def __init__(self, kinds: list[tuple[Any, int]]) -> None:
        self.kinds, self.n = kinds, 0
        self.arrays = [np.zeros((w, 8) if w > 1 else 8, dtype=t) for t, w in kinds]

    def add(self, row: list[Any]) -> None:
        if self.n == self.arrays[0].shape[-1]:
            self.arrays = [np.concatenate([a, np.zeros_like(a)], axis=-1) for a in self.arrays]
        for a, v in zip(self.arrays, row, strict=True):
            a[..., self.n] = v
        self.n += 1

    def views(self) -> list[npt.NDArray[Any]]:
        """Each array's rows so far (a block keeps one column when empty: numba needs a shape)."""
        return [a[..., : self.n] if a.ndim == 1 else a[:, : max(1, self.n)] for a in self.arrays]


_ARROW: Final = arrow_schema(FRAMES_SCHEMA)  # polars' own Arrow form of the table


def _bits(valid: npt.NDArray[np.bool_]) -> pa.Buffer:
    """A validity (or boolean) bitmap, Arrow's bit order."""
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _array(name: str, values: npt.NDArray[Any], bits: pa.Buffer | None) -> pa.Array:
    """Column ``name`` over ``values``' own buffer (no copy; ``bits``: which rows are set)."""
    kind = _ARROW.field(name).type
    data = _bits(values.view(np.bool_)) if kind == pa.bool_() else pa.py_buffer(values)
    return pa.Array.from_buffers(kind, len(values), [bits, data])


def _coded(
    name: str, codes: npt.NDArray[Any], values: list[str], bits: pa.Buffer | None
) -> pa.Array:
    """The string column ``name`` as ``values[codes]`` (null where ``bits`` says so)."""
    kind = _ARROW.field(name).type
    index = codes.astype(kind.index_type.to_pandas_dtype())
    indices = pa.Array.from_buffers(kind.index_type, len(codes), [bits, pa.py_buffer(index)])
    return pa.DictionaryArray.from_arrays(indices, pa.array(values, kind.value_type))


_MESSAGES: Final = [r.message for r in RULES]
_RULE_IDS: Final = [r.id for r in RULES]


def _verdicts(
    rule: npt.NDArray[np.uint8], pdim: npt.NDArray[np.uint32], dims: _Dims
) -> dict[str, pa.Array]:
    """``validation_error`` and ``validation_rule`` from the rule codes (0: valid; else the
    rule's index + 1); the producer rule shows the producer's own error."""
    from cbi1kit.analysis._kernels import PRODUCER_RULE, UNSUPPORTED_RULE

    bits = _bits(rule != 0)
    at = rule.astype(np.uint32) - 1  # wraps where valid: those rows are null
    producer = (rule == PRODUCER_RULE + 1) | (rule == UNSUPPORTED_RULE + 1)
    at[producer] = len(_MESSAGES) + pdim[producer]
    errors = [s[_ERROR] or "" for _a, _n, s in dims.producers]
    return {
        "validation_error": _coded("validation_error", at, [*_MESSAGES, *errors], bits),
        "validation_rule": _coded("validation_rule", rule - 1, _RULE_IDS, bits),
    }


def _frame(batch: _Batch, dims: _Dims) -> pl.DataFrame:
    """The DataFrame of a batch's rows (``FRAMES_SCHEMA``), its columns over the kernel's
    buffers, the validity bitmaps shared by the columns that share a rule."""
    from cbi1kit.analysis._kernels import (
        C8,
        C16,
        C32,
        C64,
        NO_DIM,
        PRODUCER_U32,
        PRODUCER_U64,
        RELAY_U64,
    )

    n = batch.rows
    o64, o32, o16, o8 = (np.ascontiguousarray(b[:n].T) for b in batch.blocks)
    col = {name: o64[k] for k, name in enumerate(C64)}
    col.update({name: o32[k] for k, name in enumerate(C32)})
    col.update({name: o16[k] for k, name in enumerate(C16)})
    col.update({name: o8[k] for k, name in enumerate(C8)})
    plen, flags, send = col["payload_len"], col["cbi1_flags"], col["send_ts_us"]
    is_pb, timed = col["_pb"].view(np.bool_), col["_timed"].view(np.bool_)
    head = plen >= 48
    pdim, rdim = col["_producer"], col["_relay"]
    p_at = np.where(pdim == NO_DIM, len(dims.producers), pdim)
    p_ok, r_ok = dims.valid()
    p_valid = p_ok[p_at]
    bits = {  # which rows each column has, by the rule that says so
        "timed": _bits(timed),
        "pb": _bits(is_pb),
        "head": _bits(head),
        "pb_head": _bits(is_pb | head),
        "chunk": _bits(head & (flags == 1) & (plen >= 64)),
        "delta": _bits(head & (flags == 2) & (plen >= 60)),
        "producer": _bits(p_valid),
        "relay": _bits(r_ok[np.where(rdim == NO_DIM, len(dims.relays), rdim)]),
        "send_time": _bits(is_pb & (send < 2**62)),
    }
    arrays = {
        name: _array(name, col[name], None if rule is None else bits[rule])
        for name, rule in _COLUMN_RULES.items()
    }
    for names, rule in (
        (PRODUCER_U64, "producer"),
        (PRODUCER_U32, "producer"),
        (RELAY_U64, "relay"),
    ):
        for name in names:
            arrays[name] = _array(name, col[name], bits[rule])
    arrays["recv_time"] = _array("recv_time", col["recv_time"], bits["timed"])
    arrays["send_time"] = _array("send_time", send, bits["send_time"])
    arrays["kind"] = _coded("kind", col["_kind"], list(_KIND_ENUM.categories), None)
    arrays.update(_verdicts(col["_rule"], pdim, dims))
    for name, (values, has) in dims.strings().items():
        arrays[name] = _coded(name, p_at, values, _bits(p_valid & has[p_at]))
    df = pl.from_arrow(pa.Table.from_arrays([arrays[f.name] for f in _ARROW], schema=_ARROW))
    assert isinstance(df, pl.DataFrame)
    return df


_CHUNK_FIELDS: Final = ("chunk_index", "chunk_count", "bucket_offset")
_DELTA_FIELDS: Final = ("base_epoch", "image_count")
#: the kernel's columns as the table has them, and which rows have each (None: all)
_COLUMN_RULES: Final[dict[str, str | None]] = {
    "frame_index": None,
    "stream_id": None,
    "source_offset": None,
    "raw_len": None,
    "recv_mono_ns": "timed",
    "send_ts_us": "pb",
    "kind_raw": None,
    "base_sequence": "pb_head",
    "sequence": "pb_head",
    "protocol_version": "pb",
    "contract_marker": "pb",
    "payload_len": None,
    "has_unknown_fields": None,
    "cbi1_checksum_ok": "head",
    "word_count": "chunk",
    **dict.fromkeys(HEADER_COLUMNS, "head"),
    **dict.fromkeys(_CHUNK_FIELDS, "chunk"),
    **dict.fromkeys(_DELTA_FIELDS, "delta"),
}


def _damage_df(error: BaseException, index: int) -> pl.DataFrame:
    row: dict[str, Any] = dict.fromkeys(FRAMES_SCHEMA)
    row["frame_index"] = index
    row["source_offset"] = getattr(error, "offset", None)
    row["kind"] = "SOURCE_ERROR"
    row["validation_error"] = f"{error_name(error)}: {error}"
    return pl.DataFrame([row], schema=FRAMES_SCHEMA)


_KERNELS: Final = "cbi1kit.analysis._kernels"


class FramesEngine:
    """The frames table of a stream of scan items, batch by batch: ``feed`` each item, take
    the DataFrames it hands back, ``finish`` for the last."""

    def __init__(
        self, *, batch_rows: int = FRAME_BATCH_ROWS, engine: str = "auto", size: int | None = None
    ) -> None:
        self.batch_rows = batch_rows
        #: ``reference``: each span's rows message by message, in Python (the oracle); the
        #: compiled kernel otherwise, where it loads (``auto``: where ``size`` bytes pay for it)
        self.reference = kernels_for(_KERNELS, check_engine(engine), size) is None
        self.dims = _Dims()
        self._batch = _Batch(batch_rows)
        self._last = np.full(2, -1, np.int64)

    def feed(self, item: object) -> Iterator[pl.DataFrame]:
        if isinstance(item, FrameSpan):
            yield from self._span(item)
        elif isinstance(item, SourceError) or (
            isinstance(item, FrameDamage) and not is_plane_update_damage(item)
        ):  # an update of the catalog that does not decode is the catalog's, not the frames'
            yield from self.finish()
            yield _damage_df(item.error, item.index)

    def finish(self) -> Iterator[pl.DataFrame]:
        if self._batch.rows:
            yield _frame(self._batch, self.dims)
            self._batch = _Batch(self.batch_rows)

    def _span(self, span: FrameSpan) -> Iterator[pl.DataFrame]:
        if self.reference:
            from cbi1kit.analysis._reference import reference_frames

            yield reference_frames(span)
            return
        from cbi1kit.analysis._kernels import frame_columns

        lo, n = 0, len(span)
        own = (span.stream, span.offset, span.wall, span.mono, span.has_time)
        while lo < n:
            batch = self._batch
            hi = min(n, lo + batch.cap - batch.rows)
            i = lo
            while i < hi:
                row0 = batch.rows + i - lo
                i, need = frame_columns(
                    span.buf, span.start, span.length, span.is_pb, i, hi, row0, own,
                    span.index, batch.blocks, self.dims.args(), self._last,
                )  # fmt: skip
                if need:
                    self.dims.add(need, _sub_message(span.raw(i), need))
            batch.rows += hi - lo
            lo = hi
            if batch.rows == batch.cap:
                yield from self.finish()


def _sub_message(raw: bytes, need: int) -> bytes:
    """The relay or producer sub-message's bytes of one message (its last occurrence)."""
    from cbi1kit.analysis._kernels import NEED_PRODUCER
    from cbi1kit.analysis._reference import walk_filter_update

    _values, spans, _bad, _unknown = walk_filter_update(raw)
    return spans[3 if need == NEED_PRODUCER else 2]

"""The ``frames`` table: one row per message, the consumer's verdict on each.

Built batch by batch and column-wise from :mod:`cbi1kit.analysis._sources` (a capture's groups
of blocks, checked and scanned by the compiled envelope kernel of
:mod:`cbi1kit.analysis._kernels` on a worker thread while they are in cache): this module
applies the rulebook (a second compiled pass, or :mod:`cbi1kit.analysis._reference` per
message), parses relay and producer sub-messages once per run of identical bytes and builds
the columns. Memory stays at about one batch; ``frames_table`` returns a ``LazyFrame`` whose
batches are produced as polars pulls them, so ``sink_parquet`` and streaming ``collect`` work
on captures larger than memory. Every 64-bit value is ``pl.UInt64``; digests are hex strings;
the schema is :mod:`cbi1kit.analysis._schema`'s, documented in ``docs/tables.md``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._schema import (
    _KIND_ENUM,
    _PA,
    _SOURCES,
    _U8,
    _U16,
    _U32,
    _U64,
    FRAMES_SCHEMA,
    I64,
    KINDS,
    Bool,
    _Scanned,
)
from cbi1kit.analysis._sources import _Batch, _CaptureScan, _is_capture, _record_batches
from cbi1kit.capture._readers import read_frames
from cbi1kit.capture._segments import CaptureSet, capture_segments
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD
from cbi1kit.errors import CaptureError, Cbi1kitError, RelayWireError, error_name
from cbi1kit.relay._messages import validate_producer_identity
from cbi1kit.wire._rules import RULES

__all__ = [
    "frames_batches",
    "frames_table",
    "segment_frames",
]

# ------------------------------------------------------------------------------ frames table


_PRODUCER_COLS: Final = (
    "pool_identity_version",
    "cache_semantics",
    "cache_semantics_source",
    "routing_scope",
    "routing_scope_source",
    "dc_id",
    "producer_incarnation",
    "layout_generation",
    "ckf_format_version",
    "ckf_seed",
    "ckf_bucket_count",
    "ckf_fingerprint_bits",
    "ckf_slots_per_bucket",
    "producer_key",
    "_producer_error",
    "_malformed",
)
_RELAY_COLS: Final = ("relay_drt_instance_id", "relay_incarnation", "_malformed")
_NO_PRODUCER: Final = (None,) * len(_PRODUCER_COLS)


def _producer_summary(raw: bytes) -> tuple[Any, ...]:
    try:
        p = pb.ProducerIdentity.FromString(raw)
    except Exception:  # DecodeError: the whole message is malformed, as prost decodes it at once
        return (None,) * 15 + (True,)
    error = None
    try:
        validate_producer_identity(p, path="FilterUpdate.producer")
    except RelayWireError as exc:
        error = str(exc)
    d = p.pool_id.indexer_domain
    cs, rs = d.cache_semantics.digest.hex(), d.routing_scope.digest.hex()
    f = p.ckf_format
    key = f"{cs}:{rs}/{p.pool_id.dc_id:016x}#{p.producer_incarnation:016x}.{p.layout_generation}"
    return (
        p.pool_id.identity_version,
        cs,
        _SOURCES.get(d.cache_semantics.source, str(d.cache_semantics.source)),
        rs,
        _SOURCES.get(d.routing_scope.source, str(d.routing_scope.source)),
        p.pool_id.dc_id,
        p.producer_incarnation,
        p.layout_generation,
        f.format_version,
        f.seed,
        f.bucket_count,
        f.fingerprint_bits,
        f.slots_per_bucket,
        key,
        error,
        None,
    )


def _relay_summary(raw: bytes) -> tuple[int | None, int | None, bool | None]:
    try:
        r = pb.RelayIdentity.FromString(raw)
    except Exception:  # DecodeError: the whole message is malformed
        return None, None, True
    return r.drt_instance_id, r.relay_incarnation, None


class _Envelopes:
    """The ``relay`` and ``producer`` sub-message columns, parsed once per run of rows whose
    bytes are identical (``run`` from ``scan_filter_updates``) and spread to the rows by it."""

    def __init__(
        self, buf: npt.NDArray[np.uint8], run: I64, has: Bool, off: I64, length: I64
    ) -> None:
        self.run = run
        firsts = np.flatnonzero(np.diff(run, prepend=-1)).tolist()

        def part(k: int, i: int) -> bytes:
            return bytes(buf[off[k, i] : off[k, i] + length[k, i]])

        self.per_run: dict[str, list[Any]] = {}
        runs = [
            (
                _relay_summary(part(0, i)) if has[0, i] else (None, None, None),
                _producer_summary(part(1, i)) if has[1, i] else _NO_PRODUCER,
            )
            for i in firsts
        ]
        for j, name in enumerate(_RELAY_COLS[:-1]):
            self.per_run[name] = [r[0][j] for r in runs]
        for j, name in enumerate(_PRODUCER_COLS[:-1]):
            self.per_run[name] = [r[1][j] for r in runs]
        # a relay or producer sub-message that does not parse
        self.per_run["_malformed"] = [r[0][-1] or r[1][-1] for r in runs]

    def per_run_numbers(self, name: str) -> npt.NDArray[Any]:
        """One value per run (0 where missing)."""
        dtype = _np_of(FRAMES_SCHEMA[name])
        return np.array([0 if x is None else x for x in self.per_run[name]], dtype=dtype)

    def per_run_present(self, name: str) -> Bool:
        """Per run, whether the value is there."""
        return np.array([x is not None for x in self.per_run[name]], dtype=bool)

    def numbers(self, name: str) -> tuple[npt.NDArray[Any], Bool]:
        """Per-row values (0 where missing) and where they are present."""
        per, valid = self.per_run_numbers(name), self.per_run_present(name)
        if len(per) == 1:  # one run: constant columns, no gather
            n = len(self.run)
            return np.full(n, per[0]), np.full(n, valid[0])
        return per[self.run], valid[self.run]

    def strings(self, name: str) -> pl.Series:
        values = self.per_run[name]
        if len(values) == 1:  # one run: a constant column
            return pl.repeat(values[0], len(self.run), dtype=pl.Utf8, eager=True).alias(name)
        return pl.Series(name, values, dtype=pl.Utf8).gather(self.run)


def _scan_batch(batch: _Batch) -> _Scanned:
    """The compiled pass over a batch's messages (``scan_filter_updates``; releases the GIL)."""
    from cbi1kit.analysis._kernels import scan_filter_updates

    return scan_filter_updates(batch.buf, batch.start, batch.start + batch.length, batch.is_pb)


def _frames_df(batch: _Batch, engine: str = "compiled") -> pl.DataFrame:
    if engine == "reference":
        from cbi1kit.analysis._reference import reference_frames

        return reference_frames(batch)
    return _frames_columns(batch, _scan_batch(batch))


_MESSAGES: Final = pl.Series("validation_error", [r.message for r in RULES], dtype=pl.Utf8)
_RULE_IDS: Final = pl.Series("validation_rule", [*(r.id for r in RULES), None], dtype=pl.Utf8)


def _frames_columns(batch: _Batch, scanned: _Scanned) -> pl.DataFrame:
    """The batch's rows from the kernel's arrays: header fields, validation, columns."""
    from cbi1kit.analysis._kernels import (
        FIELD_SLOTS,
        HEADER_COLUMNS,
        PRODUCER_RULE,
        UNKNOWN_FIELDS,
        frame_rules,
    )

    pbm = batch.is_pb
    value, present, offset, flags, checksum, run, head, top = scanned
    run = np.cumsum(np.diff(run, prepend=-1) != 0) - 1  # dense ids: rows may have been dropped
    v = {f: np.ascontiguousarray(value[:, FIELD_SLOTS[f]]) for f in (1, 6, 127)}
    unknown = (flags & UNKNOWN_FIELDS) != 0
    subs = [FIELD_SLOTS[2], FIELD_SLOTS[3]]
    env = _Envelopes(
        batch.buf, run, present[:, subs].T, offset[:, subs].T, value[:, subs].T.astype(np.int64)
    )
    perr = env.per_run["_producer_error"]
    rules = frame_rules(
        value,
        present,
        flags,
        checksum,
        head,
        top,
        pbm,
        batch.length,
        run,
        env.per_run_numbers("ckf_seed"),
        env.per_run_numbers("ckf_bucket_count"),
        env.per_run_numbers("dc_id"),
        env.per_run_present("_producer_error"),
        env.per_run_present("_malformed"),
    )
    code, kind_code, kind_raw, base, seq, p_len = rules[:6]
    checksum_ok, is_chunk_frame, is_delta_frame, word_count = rules[6:10]
    header = {
        name: column
        for names, columns in zip(HEADER_COLUMNS, rules[10:], strict=True)
        for name, column in zip(names, columns, strict=True)
    }
    has_head = p_len >= 48
    # the rule id (null: valid), and its message; the producer rule shows the run's own error
    if (code < 0).all():  # the common batch: every row valid, two null columns
        nulls = pl.repeat(None, len(code), dtype=pl.Utf8, eager=True)
        verdict = [nulls.alias("validation_error"), nulls.alias("validation_rule")]
    else:
        message = np.where(code < 0, len(RULES), code)
        message = np.where(code == PRODUCER_RULE, len(RULES) + 1 + env.run, message)
        messages = pl.concat([_MESSAGES, pl.Series([None, *perr], dtype=pl.Utf8)])
        verdict = [
            messages.gather(message).alias("validation_error"),
            _RULE_IDS.gather(np.where(code < 0, len(RULES), code)),
        ]

    def col(values: Any, dtype: Any, valid: Bool | None = None) -> pa.Array:
        return pa.array(
            np.asarray(values).astype(_np_of(dtype), copy=False),
            type=_PA[dtype],
            mask=None if valid is None else ~valid,
        )

    send = v[6]
    cols: dict[str, pa.Array] = {
        "record_index": col(batch.index, _U64),
        "stream_id": col(batch.stream_id, _U32),
        "source_offset": col(batch.offset, _U64),
        "raw_len": col(batch.length, _U32),
        "recv_time": pa.array(batch.wall, type=pa.timestamp("ns", "UTC"), mask=~batch.has_time),
        "recv_mono_ns": col(batch.mono, _U64, batch.has_time),
        "send_ts_us": col(send, _U64, pbm),
        "send_time": pa.array(
            send.view(np.int64), type=pa.timestamp("us", "UTC"), mask=~pbm | (send >= 2**62)
        ),
        "kind_raw": col(kind_raw, pl.Int32),
        "base_sequence": col(base, _U64, pbm | has_head),
        "sequence": col(seq, _U64, pbm | has_head),
        "protocol_version": col(v[1], _U32, pbm),
        "contract_marker": col(v[127], _U32, pbm),
        "payload_len": col(p_len, _U32),
        "has_unknown_fields": col(unknown, pl.Boolean),
        "cbi1_checksum_ok": col(checksum_ok, pl.Boolean, has_head),
        "word_count": col(word_count, _U32, is_chunk_frame),
    }
    chunk_fields = ("chunk_index", "chunk_count", "bucket_offset")
    for name, column in header.items():
        valid = (
            is_chunk_frame
            if name in chunk_fields
            else is_delta_frame
            if name in ("base_epoch", "image_count")
            else has_head
        )
        cols[name] = col(column, FRAMES_SCHEMA[name], valid)
    strings = [pl.Series("kind", KINDS, dtype=_KIND_ENUM).gather(kind_code), *verdict]
    for name in (*_RELAY_COLS[:-1], *_PRODUCER_COLS[:-2]):
        if FRAMES_SCHEMA[name] == pl.Utf8:
            strings.append(env.strings(name))
        else:
            values, valid = env.numbers(name)
            cols[name] = col(values, FRAMES_SCHEMA[name], valid)
    df = pl.from_arrow(pa.table(cols))
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(strings).select(list(FRAMES_SCHEMA))


def _np_of(dtype: Any) -> Any:
    return {
        _U64: np.uint64,
        _U32: np.uint32,
        _U16: np.uint16,
        _U8: np.uint8,
        pl.Int32: np.int32,
        pl.Boolean: np.bool_,
        pl.Float64: np.float64,
    }[dtype]


def _damage_df(error: BaseException, index: int) -> pl.DataFrame:
    row: dict[str, Any] = dict.fromkeys(FRAMES_SCHEMA)
    row["record_index"] = index
    row["source_offset"] = getattr(error, "offset", None)
    row["kind"] = "SOURCE_ERROR"
    row["validation_error"] = f"{error_name(error)}: {error}"
    return pl.DataFrame([row], schema=FRAMES_SCHEMA)


def _pipelined(
    items: Iterator[_Batch | tuple[CaptureError, int]], engine: str
) -> Iterator[pl.DataFrame]:
    """Frames of a capture, two stages deep: while the envelope kernel (no GIL) scans a batch
    on a worker thread, this thread reads the next one and turns the last into columns. The
    reference engine builds each batch's rows in Python, in order."""
    if engine == "reference":
        from cbi1kit.analysis._reference import reference_frames

        for item in items:
            yield reference_frames(item) if isinstance(item, _Batch) else _damage_df(*item)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="cbi1kit-envelopes") as pool:
        pending: tuple[_Batch, Future[_Scanned]] | None = None
        for item in items:
            if pending is not None:
                yield _frames_columns(pending[0], pending[1].result())
                pending = None
            if isinstance(item, _Batch) and item.scanned is not None:
                yield _frames_columns(item, item.scanned)
            elif isinstance(item, _Batch):
                pending = item, pool.submit(_scan_batch, item)
            else:
                yield _damage_df(*item)
        if pending is not None:
            yield _frames_columns(pending[0], pending[1].result())


ENGINES: Final = ("auto", "compiled", "reference")


def _engine(engine: str) -> str:
    """``compiled`` or ``reference``: ``auto`` is the compiled kernels when they load (numba
    importable, a kernel compiled or loaded from the cache), else the reference."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "auto":
        from cbi1kit.analysis._reference import kernels_available

        return "compiled" if kernels_available() else "reference"
    return engine


def _is_segment_list(source: Any) -> bool:
    return (
        isinstance(source, (list, tuple))
        and bool(source)
        and all(isinstance(p, (str, os.PathLike)) for p in source)
    )


def segment_frames(
    paths: Iterable[str | os.PathLike[str]],
    *,
    first_frame: int = 0,
    batch_records: int = 65536,
    engine: str = "auto",
    ends: list[int] | None = None,
) -> Iterator[pl.DataFrame]:
    """The frames of capture files read one after the other as one capture (a rotated
    recording's segments, or one of them going on from ``first_frame``); ``ends`` gets each
    file's next frame index once it is read."""
    engine = _engine(engine)
    first = first_frame
    for path in paths:
        scan = _CaptureScan(
            path, (SUBSCRIBE_KV_POOL_METHOD,), indexed=engine == "compiled", first_frame=first
        )
        items = scan.items(batch_records)
        try:
            yield from _pipelined(items, engine)
        finally:
            items.close()  # after the kernel thread has let go of the mapped file
        first = scan.frame_end
        if ends is not None:
            ends.append(first)


def frames_batches(
    source: Any, *, batch_records: int = 65536, engine: str = "auto"
) -> Iterator[pl.DataFrame]:
    """The ``frames`` table as a sequence of DataFrames of at most ``batch_records`` rows.

    ``source``: a capture / grpcurl JSON / CBI1 file path, or an iterable of ``FrameRecord`` or
    ``FilterUpdate`` values. A rotated recording (its first segment's path, a ``CaptureSet`` or
    a list of its segment paths) is one capture: frame numbers run on across segments.
    Source damage becomes a ``SOURCE_ERROR`` row: a capture's damage where it is, reading going
    on past it (as ``CaptureReader.items``; frame numbers as ``read_capture(...,
    damage="report")``), other sources' as the last row.

    ``engine``: ``compiled`` (the numba kernels), ``reference`` (protobuf, relay validation,
    ``decode`` and the rulebook per message, in Python: the same table, slower) or ``auto``
    (compiled, falling back to reference when the kernels cannot be loaded).
    """
    engine = _engine(engine)
    if _is_segment_list(source):
        source = CaptureSet.of(source)
    if _is_capture(source):
        yield from segment_frames(
            capture_segments(source), batch_records=batch_records, engine=engine
        )
        return
    damage: list[Any] = []
    try:
        records: Iterable[Any] = (
            read_frames(source) if isinstance(source, (str, os.PathLike)) else source
        )
    except (Cbi1kitError, OSError) as exc:
        yield _damage_df(exc, 0)
        return
    for batch in _record_batches(records, batch_records, damage):
        yield _frames_df(batch, engine)
    if damage and damage[0][0] is not None:
        yield _damage_df(damage[0][0], damage[0][1])


def frames_table(source: Any, *, batch_records: int = 65536, engine: str = "auto") -> pl.LazyFrame:
    """One row per message (schema ``FRAMES_SCHEMA``), produced lazily batch by batch
    (``engine``: see :func:`frames_batches`)."""
    from polars.io.plugins import register_io_source

    def produce(
        with_columns: list[str] | None,
        predicate: pl.Expr | None,
        n_rows: int | None,
        batch_size: int | None,
    ) -> Iterator[pl.DataFrame]:
        left = n_rows
        for batch in frames_batches(source, batch_records=batch_records, engine=engine):
            df = batch
            if left is not None:
                df = df.head(left)
                left -= df.height
            if predicate is not None:
                df = df.filter(predicate)
            if with_columns is not None:
                df = df.select(with_columns)
            yield df
            if left is not None and left <= 0:
                return

    return register_io_source(produce, schema=FRAMES_SCHEMA)

"""The tables' schemas, stated once: column names and polars types (every 64-bit value
``pl.UInt64``), their Arrow types, and the frame kinds. ``docs/tables.md`` documents them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

import polars as pl
import pyarrow as pa

from cbi1kit.hashing._dc_names import dc_names
from cbi1kit.wire._rules import RULES

if TYPE_CHECKING:
    import pyarrow.parquet as pq


KINDS: Final = ("SNAPSHOT_CHUNK", "DELTA", "HEARTBEAT", "UNSPECIFIED", "UNKNOWN", "SOURCE_ERROR")
_KIND_ENUM: Final = pl.Enum(list(KINDS))
#: ``validation_rule``: the rulebook's ids (``cbi1kit.wire.RULES``), in its order
_RULE_ENUM: Final = pl.Enum([r.id for r in RULES])
_CAT: Final = pl.Categorical()  # a string repeated on many rows (a digest, a key, a message)
_U64, _U32, _U16, _U8 = pl.UInt64, pl.UInt32, pl.UInt16, pl.UInt8

_DC_IDS: Final = ("dc", "dc_id", "cbi1_dc_id")
_IDS: Final = ("relay_drt_instance_id", "relay_incarnation", "producer", "producer_incarnation")
_WORDS: Final = ("ckf_seed", "cbi1_seed", "new_word", "previous_word", "word_a", "word_b")
#: 64-bit identifiers, seeds and words: as hex text wherever a table leaves as text (JSON, the
#: terminal), never as a number a float reader rounds. A DC id bare, as ``--dc`` takes it and
#: every report names it; the rest ``0x``-prefixed.
HEX_TEXT: Final[dict[str, str]] = {name: "{:016x}" for name in _DC_IDS} | {
    name: "0x{:016x}" for name in (*_IDS, *_WORDS)
}

FRAMES_SCHEMA: Final[dict[str, Any]] = {
    "frame_index": _U64,
    "stream_id": _U32,
    "source_offset": _U64,
    "raw_len": _U32,
    "recv_time": pl.Datetime("ns", "UTC"),
    "recv_mono_ns": _U64,
    "send_ts_us": _U64,
    "send_time": pl.Datetime("us", "UTC"),
    "kind": _KIND_ENUM,
    "kind_raw": pl.Int32,
    "base_sequence": _U64,
    "sequence": _U64,
    "protocol_version": _U32,
    "contract_marker": _U32,
    "relay_drt_instance_id": _U64,
    "relay_incarnation": _U64,
    "pool_identity_version": _U32,
    "cache_semantics": _CAT,
    "cache_semantics_source": _CAT,
    "routing_scope": _CAT,
    "routing_scope_source": _CAT,
    "dc_id": _U64,
    "producer_incarnation": _U64,
    "layout_generation": _U64,
    "ckf_format_version": _U32,
    "ckf_seed": _U64,
    "ckf_bucket_count": _U64,
    "ckf_fingerprint_bits": _U32,
    "ckf_slots_per_bucket": _U32,
    "producer_key": _CAT,
    "payload_len": _U32,
    "has_unknown_fields": pl.Boolean,
    "cbi1_wire_version": _U16,
    "cbi1_flags": _U16,
    "cbi1_fingerprint_bits": _U8,
    "cbi1_slots": _U8,
    "cbi1_format_version": _U16,
    "cbi1_seed": _U64,
    "cbi1_bucket_count": _U64,
    "cbi1_dc_id": _U64,
    "cbi1_epoch": _U64,
    "cbi1_checksum": _U32,
    "cbi1_checksum_ok": pl.Boolean,
    "chunk_index": _U32,
    "chunk_count": _U32,
    "bucket_offset": _U64,
    "word_count": _U32,
    "base_epoch": _U64,
    "image_count": _U32,
    "validation_error": _CAT,
    "validation_rule": _RULE_ENUM,
}

IMAGES_SCHEMA: Final[dict[str, Any]] = {
    "frame_index": _U64,
    "sequence": _U64,
    "bucket": _U32,
    "new_word": _U64,
    "previous_word": _U64,
    "occupied_before": _U8,
    "occupied_after": _U8,
}

SNAPSHOTS_SCHEMA: Final[dict[str, Any]] = {
    "frame_index": _U64,
    "stream_id": _U32,
    "sequence": _U64,
    "bucket_count": _U64,
    "chunk_count": _U32,
    "nonzero_buckets": _U64,
    "occupied_slots": _U64,
    "load_factor": pl.Float64,
}

OCCUPANCY_SCHEMA: Final[dict[str, Any]] = {
    "bin": _U32,
    "bucket_start": _U64,
    "bucket_end": _U64,
    "buckets": _U64,
    "nonzero_buckets": _U64,
    "full_buckets": _U64,
    "occupied_slots": _U64,
    "load_factor": pl.Float64,
}

DIFF_SCHEMA: Final[dict[str, Any]] = {
    "bucket": _U32,
    "word_a": _U64,
    "word_b": _U64,
    "removed": pl.List(_U16),
    "added": pl.List(_U16),
}

VIOLATIONS_SCHEMA: Final[dict[str, Any]] = {
    "frame_index": _U64,
    "stream_id": _U32,
    "sequence": _U64,
    "rule": pl.Utf8,
    "reason": pl.Utf8,
    "action": pl.Utf8,  # what a consumer does: invalidate-lane, quarantine-pool, none
}

# ------------------------------------------------------------------ the partitioned dataset

#: bumped whenever a dataset table's columns change; a dataset says its own in
#: ``cbi1kit-dataset.json`` and in every file's metadata (``cbi1kit.schema_version``)
DATASET_SCHEMA_VERSION: Final = 4

#: where each row comes from: the capture (a rotated recording's set id, or the content hash of
#: a capture of one file), its segment (0 for one file) and the file's content hash
_PROVENANCE: Final[dict[str, Any]] = {"capture": pl.Utf8, "segment": _U32, "source": pl.Utf8}

#: the hive partitions (directories, not file columns): the row's frame's DC id (16 hex digits,
#: as every report names it), producer incarnation and UTC receive date, null where none
PARTITION_SCHEMA: Final[dict[str, Any]] = {"dc": pl.String, "producer": _U64, "date": pl.Date}

#: what an images, snapshots or violations row takes from its frame (same ``frame_index``)
_FRAME_KEYS: Final = (
    "stream_id",
    "recv_time",
    "dc_id",
    "producer_incarnation",
    "cache_semantics",
    "routing_scope",
    "relay_drt_instance_id",
    "relay_incarnation",
)


def _with_frame_keys(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        **_PROVENANCE,
        **schema,
        **{k: FRAMES_SCHEMA[k] for k in _FRAME_KEYS if k not in schema},
    }


#: the dataset's tables: each table's columns with the provenance first (``docs/tables.md``)
#: a capture's tables by name (``Capture.frames``, ``.images``, ``.snapshots``)
TABLE_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "frames": FRAMES_SCHEMA,
    "images": IMAGES_SCHEMA,
    "snapshots": SNAPSHOTS_SCHEMA,
}

DATASET_TABLES: Final[dict[str, dict[str, Any]]] = {
    "frames": {**_PROVENANCE, **FRAMES_SCHEMA},
    "images": _with_frame_keys(IMAGES_SCHEMA),
    "snapshots": _with_frame_keys(SNAPSHOTS_SCHEMA),
    "violations": _with_frame_keys(VIOLATIONS_SCHEMA),
}

_SOURCES: Final = {0: "UNSPECIFIED", 1: "DEFAULT_DERIVED", 2: "EXPLICIT"}


def arrow_schema(schema: dict[str, Any]) -> pa.Schema:
    """A table's Arrow schema, as polars converts its columns (unsigned types kept)."""
    return pl.DataFrame(schema=schema).to_arrow().schema


def parquet_writer(
    path: str | os.PathLike[str], schema: pa.Schema, *, compression: str = "snappy"
) -> pq.ParquetWriter:
    """A Parquet writer for one of the tables. Dictionary pages for the string columns only:
    words, digests and indices hardly repeat, and pyarrow's attempt at a dictionary for each of
    their pages, given up when it grows too big, took half of the writing (measured on
    bench_tables' simulator-like capture: frames 0.19 s -> 0.09 s, files no bigger; images
    0.30 s -> 0.17 s, 12% bigger with snappy, none with zstd)."""
    import pyarrow.parquet as pq  # not at import: only writers need it

    strings = [
        f.name
        for f in schema
        if pa.types.is_dictionary(f.type)
        or pa.types.is_string(f.type)
        or pa.types.is_large_string(f.type)
    ]
    return pq.ParquetWriter(path, schema, compression=compression, use_dictionary=strings)


def with_dc_names(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with a ``dc_name`` column beside its ``dc_id`` (null where none is known)."""
    if "dc_id" not in frame.columns or "dc_name" in frame.columns:
        return frame
    named = pl.col("dc_id").replace_strict(dc_names(), default=None, return_dtype=pl.String)
    at = frame.columns.index("dc_id") + 1
    return frame.insert_column(at, frame.select(named.alias("dc_name")).to_series())

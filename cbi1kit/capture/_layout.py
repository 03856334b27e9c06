"""The kvrcap byte layout, written once as data: the reader, the writer, the walk kernel, the
docs tables and the Kaitai and Wireshark exports read these tables (``docs/capture-format.md``).
Offsets are from the start of the file header, a record header, or a record body.
"""

from __future__ import annotations

import enum
from typing import Final

from cbi1kit.wire._layout import make_layout

FILE_MAGIC: Final = b"KVRCAP\r\n"
RECORD_MAGIC: Final = b"KRec"
TRAILER_MAGIC: Final = b"kvrcIDX\n"  # never holds the record magic


class RecordType(enum.IntEnum):
    """What a record's body is (``record_type``)."""

    SCHEMA = 1  # a FileDescriptorSet of the schema the recorder used
    STREAM_OPEN = 2  # u32 JSON length, JSON (target, method, metadata, info), the request
    MESSAGE = 3  # one response message, as received
    STREAM_CLOSE = 4  # JSON: status, trailers, message count
    MARK = 5  # free text (a segment's MARK: ``kvrcap.segment {json}``)
    INDEX = 6  # structural: the offsets of the records since the previous INDEX
    TRAILER = 7  # structural: the last record of a closed file, points at the final INDEX


FILE_HEADER = make_layout(
    "file",
    0,
    [
        ("magic", "magic8", "`KVRCAP\\r\\n`; the CR LF catches a copy made in text mode"),
        ("format_version", "u16", "kvrcap format version, 1"),
        ("header_len", "u16", "bytes of this header, 32"),
        ("flags", "u32", "0 (reserved)"),
        ("created_unix_ns", "u64", "wall clock when the file was created"),
        ("reserved", "u32", "0"),
        ("header_check", "u32", "low 32 bits of xxh3_64 (seed 0) of the bytes before it"),
    ],
)

RECORD_HEADER = make_layout(
    "record",
    0,
    [
        ("magic", "magic", "`KRec`: misalignment or junk shows at once"),
        ("record_type", "u8", "what the body is (RecordType)"),
        ("flags", "u8", "0; an INDEX: bit 0 says its block_check is set"),
        ("reserved", "u16", "0"),
        ("body_len", "u32", "bytes of body after this header (at most 2^31 - 1)"),
        ("stream_id", "u32", "the stream the record belongs to (0: the file's own)"),
        ("record_index", "u64", "the record's number in the file, from 0"),
        ("recv_unix_ns", "u64", "wall clock when the message reached the recorder"),
        ("recv_mono_ns", "u64", "monotonic clock, for inter-arrival times"),
        ("body_check", "u32", "low 32 bits of xxh3_64 of the body"),
        ("header_check", "u32", "low 32 bits of xxh3_64 of the header bytes before it"),
    ],
)

INDEX_BODY = make_layout(
    "index",
    0,
    [
        ("first_record_index", "u64", "the number of the first record listed"),
        ("prev_index_offset", "u64", "the previous INDEX record's offset (0: none)"),
        ("count", "u32", "records listed; their u64 offsets follow"),
        ("block_check", "u32", "xxh3_64 low 32 bits of the listed records' bytes (flag bit 0)"),
    ],
)

TRAILER_BODY = make_layout(
    "trailer",
    0,
    [
        ("final_index_offset", "u64", "the last INDEX record's offset"),
        ("magic", "magic8", "`kvrcIDX\\n`"),
    ],
)

KVRCAP_LAYOUTS: Final = (FILE_HEADER, RECORD_HEADER, INDEX_BODY, TRAILER_BODY)

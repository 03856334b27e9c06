"""The CBI1 byte layout, written once as data.

Decode, encode, ``inspect``, the annotated hexdump, the byte-map chart and the docs tables all
read these tables, so a field's offset, width or meaning is stated in exactly one place. Offsets
are absolute frame offsets (the body starts at 48).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from cbi1kit.wire._format import HEADER_LEN

FieldKind = Literal["magic", "magic8", "u8", "u16", "u32", "u64"]

_STRUCT_CODE: dict[str, str] = {
    "magic": "4s",
    "magic8": "8s",
    "u8": "B",
    "u16": "H",
    "u32": "I",
    "u64": "Q",
}
_SIZE: dict[str, int] = {"magic": 4, "magic8": 8, "u8": 1, "u16": 2, "u32": 4, "u64": 8}


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One fixed-width little-endian field: where it sits, how wide, what it means."""

    name: str
    offset: int
    kind: FieldKind
    doc: str
    region: str

    @property
    def size(self) -> int:
        """Bytes the field takes."""
        return _SIZE[self.kind]

    @property
    def end(self) -> int:
        """The offset just past the field."""
        return self.offset + self.size

    @property
    def path(self) -> str:
        """The dotted field path errors and tables use, e.g. ``header.body_checksum``."""
        return f"{self.region}.{self.name}"

    @property
    def struct_code(self) -> str:
        """The field's ``struct`` format code."""
        return _STRUCT_CODE[self.kind]


@dataclass(frozen=True, slots=True)
class Layout:
    """A contiguous run of fields, with a compiled ``struct`` that reads or writes all of them."""

    region: str
    fields: tuple[FieldSpec, ...]

    @property
    def start(self) -> int:
        """Byte offset of the first field."""
        return self.fields[0].offset

    @property
    def end(self) -> int:
        """Byte offset just past the last field."""
        return self.fields[-1].end

    @property
    def size(self) -> int:
        """Bytes the run covers (``end - start``)."""
        return self.end - self.start

    @property
    def codec(self) -> struct.Struct:
        """The compiled little-endian ``struct`` of every field, cached per region."""
        return _compiled(self)

    def field(self, name: str) -> FieldSpec:
        """The field called ``name``; ``KeyError`` if the region has none."""
        for spec in self.fields:
            if spec.name == name:
                return spec
        raise KeyError(f"{self.region} has no field {name!r}")

    def __iter__(self) -> Iterator[FieldSpec]:
        return iter(self.fields)


_STRUCTS: dict[str, struct.Struct] = {}


def _compiled(layout: Layout) -> struct.Struct:
    codec = _STRUCTS.get(layout.region)
    if codec is None:
        codec = struct.Struct("<" + "".join(f.struct_code for f in layout.fields))
        _STRUCTS[layout.region] = codec
    return codec


def make_layout(region: str, start: int, rows: list[tuple[str, FieldKind, str]]) -> Layout:
    """Fields back to back from ``start``, each as wide as its kind."""
    fields: list[FieldSpec] = []
    offset = start
    for name, kind, doc in rows:
        fields.append(FieldSpec(name, offset, kind, doc, region))
        offset += _SIZE[kind]
    return Layout(region, tuple(fields))


HEADER = make_layout(
    "header",
    0,
    [
        ("magic", "magic", "ASCII `CBI1`; `CKF1` is the legacy prototype generation"),
        ("wire_version", "u16", "CBI1 wire version, 1"),
        ("flags", "u16", "frame kind: 1 snapshot chunk, 2 delta; anything else is an error"),
        ("fingerprint_bits", "u8", "CKF fingerprint width, 16"),
        ("slots_per_bucket", "u8", "CKF slots per bucket, 4 (one bucket = one u64 word)"),
        ("format_version", "u16", "CKF format version, 1 (older docs: reserved, written 0)"),
        ("seed", "u64", "CKF xxh3 seed; must equal the consumer's FilterFormat.seed"),
        ("bucket_count", "u64", "lane length in buckets; must equal FilterFormat.bucket_count"),
        ("dc_id", "u64", "producer pool's DcId; informational (the connection binds the DC)"),
        ("epoch", "u64", "sequence this frame produces (snapshot) or advances to (delta)"),
        ("body_checksum", "u32", "low 32 bits of xxh3_64(body, seed 0), body = bytes [48, end)"),
    ],
)

DELTA_PREFIX = make_layout(
    "delta",
    HEADER_LEN,
    [
        ("base_epoch", "u64", "sequence that must already be applied (N for N -> N+1)"),
        ("image_count", "u32", "number of 12-byte images that follow (<= 349,525)"),
    ],
)

#: One delta image, offsets relative to the image's first byte (packed, no padding).
DELTA_IMAGE = make_layout(
    "image",
    0,
    [
        ("bucket", "u32", "bucket index, < bucket_count"),
        ("word", "u64", "the bucket's absolute new word (0 = now empty)"),
    ],
)

SNAPSHOT_PREFIX = make_layout(
    "snapshot",
    HEADER_LEN,
    [
        ("chunk_index", "u32", "this chunk's position, 0-based"),
        ("chunk_count", "u32", "chunks in this snapshot, ceil(bucket_count / 524,288)"),
        ("bucket_offset", "u64", "first bucket this chunk covers, chunk_index x 524,288"),
    ],
)


def layout_markdown(layout: Layout) -> str:
    """The layout as a Markdown table: the docs and the notebooks print this, never a copy."""
    lines = ["| offset | size | field | type | meaning |", "|---:|---:|---|---|---|"]
    for f in layout:
        lines.append(f"| {f.offset} | {f.size} | `{f.path}` | {f.kind} | {f.doc} |")
    return "\n".join(lines)


ALL_LAYOUTS: tuple[Layout, ...] = (HEADER, DELTA_PREFIX, DELTA_IMAGE, SNAPSHOT_PREFIX)


def layout_rows(layouts: tuple[Layout, ...] = ALL_LAYOUTS) -> list[dict[str, object]]:
    """The layouts as plain rows (region, field, offset, size, type, meaning) for tables."""
    return [
        {
            "region": f.region,
            "field": f.path,
            "offset": f.offset,
            "size": f.size,
            "type": f.kind,
            "meaning": f.doc,
        }
        for layout in layouts
        for f in layout
    ]

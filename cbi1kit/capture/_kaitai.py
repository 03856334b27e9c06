"""CBI1 frames and kvrcap captures as Kaitai Struct specs, made from the layout tables (no offset
written twice), for the Kaitai Web IDE, ImHex and every Kaitai target (``cbi1kit layout --ksy
DIR``). The layouts: docs/wire-format.md, docs/capture-format.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

from cbi1kit.capture._layout import FILE_HEADER, INDEX_BODY, RECORD_HEADER, TRAILER_BODY, RecordType
from cbi1kit.wire._format import FIXED_FIELDS, WIRE_VERSION, FrameKind
from cbi1kit.wire._layout import (
    DELTA_IMAGE,
    DELTA_PREFIX,
    HEADER,
    SNAPSHOT_PREFIX,
    FieldSpec,
    Layout,
)

_TYPES: Final = {"u8": "u1", "u16": "u2", "u32": "u4", "u64": "u8"}
_META: Final = {"endian": "le", "license": "Apache-2.0", "ks-version": "0.10"}


def _field(spec: FieldSpec, valid: Any = None) -> dict[str, Any]:
    """One layout field as a ``seq`` entry: a magic as its ``contents`` (``valid`` its bytes),
    a number as its type, held to ``valid`` where given."""
    out: dict[str, Any] = {"id": spec.name}
    if isinstance(valid, bytes):
        out["contents"] = list(valid)
    elif spec.kind in ("magic", "magic8"):
        out["size"] = spec.size
    else:
        out["type"] = _TYPES[spec.kind]
    if valid is not None and not isinstance(valid, bytes):
        out["valid"] = valid
    out["doc"] = spec.doc.replace("`", "")
    return out


def _seq(layout: Layout, valid: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [_field(f, (valid or {}).get(f.name)) for f in layout]


def cbi1_ksy() -> dict[str, Any]:
    """One CBI1 frame: the header with each fixed field held to upstream's value, then the
    body its ``flags`` names."""
    from cbi1kit.wire._format import MAGIC

    fixed: dict[str, Any] = {"magic": MAGIC, "wire_version": WIRE_VERSION}
    fixed |= {f.name: f.value for f in FIXED_FIELDS}
    fixed["flags"] = {"any-of": [int(k) for k in FrameKind]}
    body = {"switch-on": "header.flags", "cases": {int(k): k.name.lower() for k in FrameKind}}
    return {
        "meta": {"id": "cbi1", "title": "Dynamo CBI1 cuckoo bucket images frame", **_META},
        "doc": "A FilterUpdate payload: a 48-byte header, then a snapshot chunk or a delta.",
        "seq": [{"id": "header", "type": "header"}, {"id": "body", "type": body}],
        "types": {
            "header": {"seq": _seq(HEADER, fixed)},
            "snapshot_chunk": {
                "seq": [
                    *_seq(SNAPSHOT_PREFIX),
                    {"id": "words", "type": "u8", "repeat": "eos", "doc": "bucket words"},
                ]
            },
            "delta": {
                "seq": [
                    *_seq(DELTA_PREFIX),
                    {
                        "id": "images",
                        "type": "image",
                        "repeat": "expr",
                        "repeat-expr": "image_count",
                    },
                ]
            },
            "image": {"seq": _seq(DELTA_IMAGE)},
        },
    }


def kvrcap_ksy() -> dict[str, Any]:
    """A kvrcap capture: the file header, then every record, its body by ``record_type``."""
    from cbi1kit.capture._layout import FILE_MAGIC, RECORD_MAGIC, TRAILER_MAGIC

    record = _seq(RECORD_HEADER, {"magic": RECORD_MAGIC})
    for f in record:
        if f["id"] == "record_type":
            f["enum"] = "record_type"
    body = {"switch-on": "record_type", "cases": {"record_type::index": "index",
                                                   "record_type::trailer": "trailer"}}  # fmt: skip
    record.append({"id": "body", "size": "body_len", "type": body})
    trailer = _seq(TRAILER_BODY, {"magic": TRAILER_MAGIC})
    return {
        "meta": {"id": "kvrcap", "title": "cbi1kit capture of relay streams", **_META},
        "doc": "A file header, then records to the end: stream opens, messages, closes, marks.",
        "seq": [
            {"id": "header", "type": "file_header"},
            {"id": "records", "type": "record", "repeat": "eos"},
        ],
        "types": {
            "file_header": {"seq": _seq(FILE_HEADER, {"magic": FILE_MAGIC})},
            "record": {"seq": record},
            "index": {
                "seq": [
                    *_seq(INDEX_BODY),
                    {"id": "offsets", "type": "u8", "repeat": "expr", "repeat-expr": "count"},
                ]
            },
            "trailer": {"seq": trailer},
        },
        "enums": {"record_type": {int(t): t.name.lower() for t in RecordType}},
    }


def _yaml(value: Any, indent: int = 0) -> Iterable[str]:
    """``value`` (dicts, lists, strings, numbers) as block YAML, strings JSON-quoted."""
    pad = " " * indent
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, list) and all(isinstance(i, int) for i in item):
                yield f"{pad}{key}: [{', '.join(f'0x{i:02x}' for i in item)}]"
            elif isinstance(item, dict | list) and item:
                yield f"{pad}{key}:"
                yield from _yaml(item, indent + 2)
            else:
                yield f"{pad}{key}: {_scalar(item)}"
    else:
        for item in value:
            if not isinstance(item, dict | list):
                yield f"{pad}- {_scalar(item)}"
                continue
            lines = list(_yaml(item, indent + 2))
            yield f"{pad}- {lines[0].lstrip()}"
            yield from lines[1:]


def _scalar(value: Any) -> str:
    if isinstance(value, str) and value and (value.replace("_", "").isalnum() or "::" in value):
        return value
    return json.dumps(value)


def ksy_text(spec: dict[str, Any]) -> str:
    """A spec as the ``.ksy`` text Kaitai's tools read."""
    return "\n".join(_yaml(spec)) + "\n"

"""CBI1 frames and kvrcap captures in Wireshark: one Lua plugin made from the layout tables
(``cbi1kit layout --wireshark DIR``). Python writes every offset, width, fixed value, rule and
method name as Lua tables; the static Lua beside this module (``_lua/``: XXH3-64, the two
protocols, the file reader) reads them and holds no offset of its own. The ``cbi1`` protocol
decodes a ``FilterUpdate.payload`` (registered in the protobuf dissector's ``protobuf_field``
table); the file reader opens ``.kvrcap`` files, a packet per record, and hands each message to
the protobuf dissector as the type its stream's method names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib.resources import files
from pathlib import Path
from typing import Any, Final

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit._version import __version__
from cbi1kit.capture._file import _U32, FORMAT_VERSION as KVRCAP_VERSION
from cbi1kit.capture._layout import (
    FILE_HEADER,
    FILE_MAGIC,
    INDEX_BODY,
    RECORD_HEADER,
    RECORD_MAGIC,
    TRAILER_BODY,
    RecordType,
)
from cbi1kit.wire._format import (
    FIXED_FIELDS,
    IMAGES_MAX_FRAME_BYTES,
    LEGACY_MAGIC,
    MAGIC,
    SNAPSHOT_CHUNK_BUCKETS,
    WIRE_VERSION,
    WORD_BYTES,
    FrameKind,
    max_delta_images,
)
from cbi1kit.wire._layout import DELTA_IMAGE, DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX, Layout
from cbi1kit.wire._rules import RULES

#: the folder of the ``.proto`` the plugin's messages are: Wireshark's protobuf search path
PROTO_DIR: Final = Path(pb.__file__).parent
#: the Lua files, in the order the plugin runs them: each is a function body over ``GEN``
#: (the tables) and what the ones before it return
_FRAGMENTS: Final = ("xxh3", "helpers", "cbi1", "kvrcap")
#: fields shown in hexadecimal (identities, checksums, words); the rest in decimal
_HEX: Final = frozenset(
    {
        "header.seed",
        "header.dc_id",
        "header.body_checksum",
        "image.word",
        "file.header_check",
        "record.body_check",
        "record.header_check",
        "index.block_check",
    }
)
#: fields whose values have names: the value table each one shows
_VALUES: Final = {"header.flags": "kinds", "record.record_type": "record_types"}
#: the rules decode checks on a frame alone (not the consumer's format: no seed to hold it to)
_FRAME_RULES: Final = frozenset(
    rule.id
    for rule in RULES
    if any(e.startswith("Cbi1Error.") for e in rule.errors) and rule.id != "cbi1-format-mismatch"
)
_LUA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LUA_KEYWORDS: Final = frozenset(("and", "break", "do", "else", "elseif", "end", "false",
    "for", "function", "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return",
    "then", "true", "until", "while"))  # fmt: skip


def _lua_string(value: str | bytes) -> str:
    """A Lua string literal: printable ASCII as is, every other byte as ``\\ddd``."""
    raw = value.encode() if isinstance(value, str) else value
    out = []
    for b in raw:
        ch = chr(b)
        out.append(f"\\{b:03d}" if ch in '"\\' or not 32 <= b < 127 else ch)
    return '"' + "".join(out) + '"'


def _lua_key(key: str | int) -> str:
    if isinstance(key, int):
        return f"[{key}]"
    if _LUA_NAME.fullmatch(key) and key not in _LUA_KEYWORDS:
        return key
    return f"[{_lua_string(key)}]"


def _lua(value: Any, indent: int = 0, row: bool = False) -> str:
    """``value`` (dicts, lists, strings, bytes, ints, bools) as a Lua literal: a table of
    scalars on one line if short or a ``row`` of a list, any other one entry a line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str | bytes):
        return _lua_string(value)
    if isinstance(value, dict):
        items = [f"{_lua_key(k)} = {_lua(v, indent + 2)}" for k, v in value.items()]
    else:
        items = [_lua(v, indent + 2, row=True) for v in value]
    line = "{ " + ", ".join(items) + " }" if items else "{}"
    if not any(isinstance(v, dict | list) for v in _values(value)) and (row or len(line) < 80):
        return line
    pad = " " * (indent + 2)
    return "{\n" + "".join(f"{pad}{item},\n" for item in items) + " " * indent + "}"


def _values(value: dict[Any, Any] | list[Any]) -> Iterable[Any]:
    return value.values() if isinstance(value, dict) else value


def _fields(layout: Layout) -> list[dict[str, Any]]:
    """A layout's fields as the plugin's rows: name, dotted path, offset, size, kind, doc and
    how Wireshark shows the value."""
    rows = []
    for f in layout:
        row: dict[str, Any] = {"name": f.name, "path": f.path, "offset": f.offset}
        row |= {"size": f.size, "kind": f.kind, "doc": f.doc.replace("`", "")}
        if f.path in _HEX:
            row["hex"] = True
        if f.path in _VALUES:
            row["values"] = _VALUES[f.path]
        rows.append(row)
    return rows


def _cbi1_tables() -> dict[str, Any]:
    """What the ``cbi1`` protocol reads: the four layouts, the fixed values decode holds the
    header to, its limits, and the rules its checks report."""
    layouts = (HEADER, SNAPSHOT_PREFIX, DELTA_PREFIX, DELTA_IMAGE)
    payload = pb.FilterUpdate.DESCRIPTOR.fields_by_name["payload"].full_name
    return {
        "layouts": {layout.region: _fields(layout) for layout in layouts},
        "magic": MAGIC,
        "legacy_magic": LEGACY_MAGIC,
        "wire_version": WIRE_VERSION,
        "fixed": [{"name": f.name, "value": f.value, "what": f.what} for f in FIXED_FIELDS],
        "kinds": {int(k): k.name for k in FrameKind},
        "delta": int(FrameKind.DELTA),
        "max_frame": IMAGES_MAX_FRAME_BYTES,
        "max_delta_images": max_delta_images(),
        "chunk_buckets": SNAPSHOT_CHUNK_BUCKETS,
        "word_bytes": WORD_BYTES,
        "rules": {r.id: r.message for r in RULES if r.id in _FRAME_RULES},
        "payload_field": payload,
    }


def _methods() -> dict[str, dict[str, str]]:
    """Every RPC of the relay's service, by the path a stream opens it with: its request and
    response message types, from the ``.proto`` itself (no gRPC needed to write the plugin)."""
    return {
        f"/{service.full_name}/{m.name}": {
            "request": m.input_type.full_name,
            "response": m.output_type.full_name,
        }
        for service in pb.DESCRIPTOR.services_by_name.values()
        for m in service.methods
    }


def _kvrcap_tables() -> dict[str, Any]:
    """What the file reader and the ``kvrcap`` protocol read: the file and record layouts,
    the magics, the record types and the message type of every stream's method."""
    layouts = (FILE_HEADER, RECORD_HEADER, INDEX_BODY, TRAILER_BODY)
    return {
        "layouts": {layout.region: _fields(layout) for layout in layouts},
        "file_magic": FILE_MAGIC,
        "record_magic": RECORD_MAGIC,
        "format_version": KVRCAP_VERSION,
        "record_types": {int(t): t.name for t in RecordType},
        "open_json_len": _U32.size,
        "methods": _methods(),
    }


def _fragment(name: str) -> str:
    """One static Lua file, wrapped as a function of the tables and the fragments before it."""
    text = files("cbi1kit.relay").joinpath("_lua", f"{name}.lua").read_text()
    return f"{name} = (function({_ARGS})\n{text.rstrip()}\nend)({_ARGS})\n"


_ARGS: Final = "GEN, " + ", ".join(_FRAGMENTS[:-1])


def wireshark_lua() -> str:
    """The whole plugin, ``cbi1.lua``: the generated tables, then the static Lua that builds
    both protocols and the file reader from them (Wireshark 4.0 on: Lua 5.2 to 5.4)."""
    tables = {"cbi1": _cbi1_tables(), "kvrcap": _kvrcap_tables()}
    head = (
        f"-- cbi1.lua: CBI1 frames and kvrcap captures in Wireshark (cbi1kit {__version__}).\n"
        "-- Generated by `cbi1kit layout --wireshark DIR` from cbi1kit's layout tables; do not\n"
        "-- edit. Install: copy into ~/.local/lib/wireshark/plugins/ and add the folder of\n"
        "-- cbi1kit's kvrelay_v1.proto to Preferences > Protocols > Protocol Buffers >\n"
        '-- Protobuf search paths (tshark: -o \'uat:protobuf_search_paths:"DIR","TRUE"\').\n'
        f"local GEN = {_lua(tables)}\n"
        f"local {', '.join(_FRAGMENTS)}\n"
    )
    tail = 'package.loaded["cbi1kit.xxh3"] = xxh3 -- for scripts that check it\n'
    return head + "".join(_fragment(name) for name in _FRAGMENTS) + tail

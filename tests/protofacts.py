"""A ``.proto`` schema as plain facts: services and methods, messages and fields, enums and values.

``facts(FileDescriptorProto)`` is what ``tests/vectors/relay_proto/upstream.json`` records of
upstream's ``relay.proto`` versions and what ``test_proto.py`` computes from our compiled module,
so the two compare as data. A field is ``{"number", "type", "label"[, "oneof"]}``: ``type`` is a
scalar's proto name or a message's or enum's name (package prefix dropped), ``label`` is
``singular`` (proto3 implicit presence), ``optional`` (explicit presence) or ``repeated``.

Recording a version (from the repository root, with the dev extra)::

    python tests/protofacts.py UPSTREAM/relay.proto --commit SHA --path lib/.../relay.proto

compiles the file with ``grpc_tools.protoc`` and puts its facts into ``upstream.json``, replacing
the entry of that commit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2

VECTORS = Path(__file__).parent / "vectors" / "relay_proto" / "upstream.json"

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in _F.Type.items()
    if name not in ("TYPE_MESSAGE", "TYPE_ENUM", "TYPE_GROUP")
}


def _type(field: descriptor_pb2.FieldDescriptorProto, package: str) -> str:
    if field.type in _SCALARS:
        return _SCALARS[field.type]
    return field.type_name.removeprefix(f".{package}.")


def _message(
    msg: descriptor_pb2.DescriptorProto, package: str, prefix: str, out: dict[str, Any]
) -> None:
    name = prefix + msg.name
    fields: dict[str, Any] = {}
    for f in msg.field:
        fact: dict[str, Any] = {"number": f.number, "type": _type(f, package)}
        if f.label == _F.LABEL_REPEATED:
            fact["label"] = "repeated"
        elif f.proto3_optional:
            fact["label"] = "optional"
        else:
            fact["label"] = "singular"
        if f.HasField("oneof_index") and not f.proto3_optional:
            fact["oneof"] = msg.oneof_decl[f.oneof_index].name
        fields[f.name] = fact
    out["messages"][name] = fields
    for nested in msg.nested_type:
        _message(nested, package, name + ".", out)
    for enum in msg.enum_type:
        out["enums"][name + "." + enum.name] = {v.name: v.number for v in enum.value}


def facts(file: descriptor_pb2.FileDescriptorProto) -> dict[str, Any]:
    """The schema facts of one compiled ``.proto`` file."""
    package = file.package
    out: dict[str, Any] = {
        "package": package,
        "syntax": file.syntax or "proto2",
        "services": {},
        "messages": {},
        "enums": {},
    }
    for service in file.service:
        out["services"][service.name] = {
            m.name: {
                "request": m.input_type.removeprefix(f".{package}."),
                "response": m.output_type.removeprefix(f".{package}."),
                "client_streaming": m.client_streaming,
                "server_streaming": m.server_streaming,
            }
            for m in service.method
        }
    for msg in file.message_type:
        _message(msg, package, "", out)
    for enum in file.enum_type:
        out["enums"][enum.name] = {v.name: v.number for v in enum.value}
    return out


def compile_proto(path: Path) -> descriptor_pb2.FileDescriptorProto:
    """``path`` compiled by ``grpc_tools.protoc`` into its descriptor."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{path.parent}",
                f"--descriptor_set_out={out}",
                str(path),
            ],
            check=True,
        )
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    (file,) = fds.file
    return file


def dumps(value: Any, indent: str = "") -> str:
    """JSON with every object of scalars on one line (a field, a method, an enum's values)."""
    if not isinstance(value, (dict, list)) or not any(
        isinstance(v, (dict, list)) for v in (value.values() if isinstance(value, dict) else value)
    ):
        return json.dumps(value)
    inner = indent + " "
    if isinstance(value, list):
        items = [inner + dumps(v, inner) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    items = [f"{inner}{json.dumps(k)}: {dumps(v, inner)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="record an upstream relay.proto's facts")
    p.add_argument("proto", type=Path)
    p.add_argument("--commit", required=True)
    p.add_argument("--path", required=True, help="the file's path in ai-dynamo/dynamo")
    p.add_argument("--note", default="", help="what this version is")
    args = p.parse_args(argv)
    data = json.loads(VECTORS.read_text()) if VECTORS.exists() else {"versions": []}
    entry = {
        "commit": args.commit,
        "path": args.path,
        "note": args.note,
        "facts": facts(compile_proto(args.proto)),
    }
    versions = [v for v in data["versions"] if v["commit"] != args.commit]
    data["versions"] = [*versions, entry]
    VECTORS.parent.mkdir(parents=True, exist_ok=True)
    VECTORS.write_text(dumps(data) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

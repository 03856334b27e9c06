"""The checked-in protobuf code is upstream's newest ``relay.proto`` (its facts recorded in
``tests/vectors/relay_proto/upstream.json``), regenerates byte for byte and runs on the runtime."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import google.protobuf
from google.protobuf import descriptor_pb2
from protofacts import facts

from cbi1kit._proto import kvrelay_v1_pb2 as pb, kvrelay_v1_pb2_grpc as pb_grpc

PROTO_DIR = Path(__file__).resolve().parents[1] / "cbi1kit" / "_proto"
UPSTREAM = json.loads((Path(__file__).parent / "vectors/relay_proto/upstream.json").read_text())


def _upstream(commit: str) -> dict[str, Any]:
    (version,) = (v for v in UPSTREAM["versions"] if v["commit"] == commit)
    recorded: dict[str, Any] = version["facts"]
    return recorded


def _ours() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(file)
    return facts(file)


def test_runtime_is_protobuf_7_and_accepts_the_generated_code() -> None:
    assert int(google.protobuf.__version__.split(".")[0]) >= 7
    assert pb.DESCRIPTOR.package == "dynamo.kvrelay.v1"


def test_schema_is_upstreams_newest_relay_proto() -> None:
    """Every service, method (types, streaming), message, field (name, number, type, label,
    oneof) and enum value of upstream's newest ``relay.proto``, and nothing else."""
    ours, theirs = _ours(), _upstream(UPSTREAM["current"])
    for section in ("services", "messages", "enums"):
        assert ours[section].keys() == theirs[section].keys(), section
        for name, value in theirs[section].items():
            assert ours[section][name] == value, f"{section} {name}"
    assert ours == theirs


def test_the_proto_names_the_upstream_file_it_matches() -> None:
    (current,) = (v for v in UPSTREAM["versions"] if v["commit"] == UPSTREAM["current"])
    head = (PROTO_DIR / "kvrelay_v1.proto").read_text().split("syntax")[0]
    assert f"{current['path']} at {current['commit'][:8]}" in " ".join(head.split()).replace(
        "// ", ""
    )


def test_the_upstream_facts_are_of_three_versions_that_differ_where_relay_md_says() -> None:
    """The recorded versions hold the drift the recorder must know about (relay.md §1.3)."""
    newest, older, oldest = (v["facts"] for v in UPSTREAM["versions"])
    assert "SubscribeServingLoad" in newest["services"]["KvEventRelay"]
    assert "SubscribeServingLoad" not in older["services"]["KvEventRelay"]
    assert "RelayErrorReason" in newest["enums"] and "RelayErrorReason" not in older["enums"]
    field2 = [v["messages"]["SubscribeKvPoolRequest"] for v in (newest, older, oldest)]
    assert [f.get("expected_producer", f.get("pool_id"))["type"] for f in field2] == [
        "ProducerIdentity",
        "ProducerIdentity",
        "KvPoolId",
    ]


def test_known_bytes_and_u64_extremes() -> None:
    # fixed32 field 127 -> key varint (127 << 3 | 5) = 0xfd 0x07, then 4 LE bytes.
    assert pb.FilterUpdate(contract_marker=0x4B565231).SerializeToString() == bytes.fromhex(
        "fd0731525 64b".replace(" ", "")
    )
    top = (1 << 64) - 1
    msg = pb.FilterUpdate(base_sequence=top - 1, sequence=top, send_ts_us=top)
    back = pb.FilterUpdate.FromString(msg.SerializeToString())
    assert (back.base_sequence, back.sequence, back.send_ts_us) == (top - 1, top, top)


def test_unknown_fields_survive_a_round_trip() -> None:
    extra = b"\xc8\x3e\x05"  # field 1001, varint 5
    data = pb.FilterUpdate(sequence=3).SerializeToString() + extra
    assert pb.FilterUpdate.FromString(data).SerializeToString() == data


def test_grpc_modules() -> None:
    assert hasattr(pb_grpc, "KvEventRelayStub")
    assert hasattr(pb_grpc, "KvEventRelayServicer")
    assert "from . import kvrelay_v1_pb2" in (PROTO_DIR / "kvrelay_v1_pb2_grpc.py").read_text()


def test_checked_in_code_matches_a_fresh_regeneration(tmp_path: Path) -> None:
    """Regenerating into a scratch copy gives byte-identical modules (nobody hand-edited them)."""
    scratch = tmp_path / "_proto"
    scratch.mkdir()
    for name in ("kvrelay_v1.proto", "regenerate.py"):
        (scratch / name).write_bytes((PROTO_DIR / name).read_bytes())
    subprocess.run([sys.executable, str(scratch / "regenerate.py")], check=True)
    for name in ("kvrelay_v1_pb2.py", "kvrelay_v1_pb2.pyi", "kvrelay_v1_pb2_grpc.py"):
        assert (scratch / name).read_bytes() == (PROTO_DIR / name).read_bytes(), name

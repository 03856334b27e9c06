"""The checked-in protobuf code matches the .proto, upstream's field numbers and the runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import google.protobuf
from google.protobuf import descriptor_pb2

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit._proto import kvrelay_v1_pb2_grpc as pb_grpc

PROTO_DIR = Path(__file__).resolve().parents[1] / "cbi1kit" / "_proto"


def _numbers(message: type) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_runtime_is_protobuf_7_and_accepts_the_generated_code() -> None:
    assert int(google.protobuf.__version__.split(".")[0]) >= 7
    assert pb.DESCRIPTOR.package == "dynamo.kvrelay.v1"


def test_filter_update_field_numbers_match_relay_md() -> None:
    assert _numbers(pb.FilterUpdate) == {
        "protocol_version": 1,
        "relay": 2,
        "producer": 3,
        "base_sequence": 4,
        "sequence": 5,
        "send_ts_us": 6,
        "kind": 7,
        "payload": 8,
        "contract_marker": 127,
    }
    assert _numbers(pb.ProducerIdentity) == {
        "pool_id": 1,
        "producer_incarnation": 2,
        "layout_generation": 3,
        "ckf_format": 4,
    }
    assert _numbers(pb.KvPoolId) == {"identity_version": 1, "indexer_domain": 2, "dc_id": 3}
    assert _numbers(pb.CkfFormat) == {
        "format_version": 1,
        "seed": 2,
        "bucket_count": 3,
        "fingerprint_bits": 4,
        "slots_per_bucket": 5,
    }
    assert _numbers(pb.SubscribeKvPoolRequest) == {
        "subscriber_id": 1,
        "expected_producer": 2,
        "contract_marker": 127,
    }
    assert _numbers(pb.KvPoolCatalogUpdate) == {
        "protocol_version": 1,
        "relay": 2,
        "revision": 3,
        "snapshot": 4,
        "contract_marker": 127,
    }
    assert _numbers(pb.KvPoolDescriptor) == {
        "producer": 1,
        "serving_endpoint": 2,
        "registrations": 3,
        "query_semantics": 4,
        "pool_roles": 5,
    }


def test_wire_types_fixed_vs_varint() -> None:
    f = pb.FilterUpdate.DESCRIPTOR.fields_by_name
    t = descriptor_pb2.FieldDescriptorProto
    assert f["contract_marker"].type == t.TYPE_FIXED32
    assert f["sequence"].type == t.TYPE_UINT64
    r = pb.RelayIdentity.DESCRIPTOR.fields_by_name
    assert r["drt_instance_id"].type == t.TYPE_FIXED64
    c = pb.CkfFormat.DESCRIPTOR.fields_by_name
    assert c["seed"].type == t.TYPE_FIXED64
    assert c["bucket_count"].type == t.TYPE_UINT64
    assert pb.KvPoolId.DESCRIPTOR.fields_by_name["dc_id"].type == t.TYPE_FIXED64


def test_enum_values() -> None:
    assert pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK == 1
    assert pb.FILTER_UPDATE_KIND_DELTA == 2
    assert pb.FILTER_UPDATE_KIND_HEARTBEAT == 3
    assert pb.IDENTITY_SOURCE_EXPLICIT == 2
    assert pb.RELAY_ERROR_REASON_INTERNAL == 11
    assert pb.WORKER_ROLE_LEGACY == 5


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


def test_grpc_service_paths() -> None:
    service = pb.DESCRIPTOR.services_by_name["KvEventRelay"]
    assert [m.name for m in service.methods] == [
        "GetRelayInfo",
        "WatchKvPoolCatalog",
        "SubscribeKvPool",
    ]
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

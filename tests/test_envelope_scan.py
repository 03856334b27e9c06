"""The compiled kernels behind the frames table and replay, against the reference
implementations: xxh3 against python-xxhash, the FilterUpdate walk against protobuf's own
parser."""

from __future__ import annotations

import random

import numpy as np
import pytest
import xxhash
from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]
from google.protobuf.message import DecodeError
from hypothesis import given, settings, strategies as st

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis import _kernels as k
from cbi1kit.analysis._kernels import MALFORMED, UNKNOWN_FIELDS, walk_update, xxh3_64_at

U64 = st.integers(min_value=0, max_value=2**64 - 1)


def test_xxh3_every_length_class_matches_xxhash() -> None:
    """0, 1-3, 4-8, 9-16, 17-128, 129-240 and the striped long path across block edges."""
    rng = np.random.default_rng(20261130)
    buf = rng.integers(0, 256, 12_000, dtype=np.uint8)
    for n in [*range(0, 260), 1023, 1024, 1025, 1088, 2047, 2048, 2049, 5000, 11_000]:
        p = int(rng.integers(0, 17))
        assert xxh3_64_at(buf, p, n) == xxhash.xxh3_64_intdigest(buf[p : p + n].tobytes()), n


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=3000), skip=st.integers(0, 15))
def test_xxh3_matches_xxhash_on_any_bytes(data: bytes, skip: int) -> None:
    buf = np.frombuffer(bytes(skip) + data, dtype=np.uint8)
    assert xxh3_64_at(buf, skip, len(data)) == xxhash.xxh3_64_intdigest(data)


def test_checksums_cover_the_bytes_after_the_cbi1_header() -> None:
    rng = np.random.default_rng(7)
    for n in (0, 47, 48, 63, 64, 300):
        frame = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        buf = np.frombuffer(b"\xee" + frame + b"\xee", dtype=np.uint8)
        want = xxhash.xxh3_64_intdigest(frame[48:]) & 0xFFFFFFFF if n >= 48 else 0
        assert k._body_check(buf, 1, n) == want


@st.composite
def filter_updates(draw: st.DrawFn) -> pb.FilterUpdate:
    m = pb.FilterUpdate(
        protocol_version=draw(st.integers(0, 2**32 - 1)),
        base_sequence=draw(U64),
        sequence=draw(U64),
        send_ts_us=draw(U64),
        kind=draw(st.sampled_from([0, 1, 2, 3, 7])),
        payload=draw(st.binary(max_size=300)),
        contract_marker=draw(st.sampled_from([0, 0x4B565231, 2**32 - 1])),
    )
    if draw(st.booleans()):
        m.relay.drt_instance_id = draw(U64)
        m.relay.relay_incarnation = draw(U64)
    if draw(st.booleans()):
        m.producer.layout_generation = draw(U64)
        m.producer.pool_id.dc_id = draw(U64)
        m.producer.ckf_format.seed = draw(U64)
    return m


def _field(number: int, wire_type: int, body: bytes) -> bytes:
    return _VarintBytes(number << 3 | wire_type) + body


#: each field's (presence bit, where its value is, where its bytes start) in the walk's tuple
_FIELDS = {
    1: (k.HAS_VERSION, k.W_VERSION, None),
    4: (k.HAS_BASE, k.W_BASE, None),
    5: (k.HAS_SEQ, k.W_SEQ, None),
    6: (k.HAS_SEND, k.W_SEND, None),
    7: (k.HAS_KIND, k.W_KIND, None),
    2: (k.HAS_RELAY, k.W_RELAY_LEN, k.W_RELAY_AT),
    3: (k.HAS_PRODUCER, k.W_PRODUCER_LEN, k.W_PRODUCER_AT),
    8: (k.HAS_PAYLOAD, k.W_PAYLOAD_LEN, k.W_PAYLOAD_AT),
    127: (k.HAS_MARKER, k.W_MARKER, None),
}


def _walk(raw: bytes) -> tuple[dict[int, int], dict[int, int], int]:
    """The walk over ``raw`` between guard bytes (they must not leak in): each present field's
    value (a length for bytes), where bytes fields start, and the flags."""
    buf = np.frombuffer(b"\xee" + raw + b"\xee", dtype=np.uint8)
    w = walk_update(buf, 1, 1 + len(raw))
    values, starts = {}, {}
    for number, (bit, at, start) in _FIELDS.items():
        if w[k.W_HAS] & bit:
            values[number] = int(w[at])
            if start is not None:
                starts[number] = int(w[start]) - 1
    return values, starts, int(w[k.W_FLAGS])


@settings(max_examples=300, deadline=None)
@given(m=filter_updates(), extra=st.lists(st.integers(9, 126), max_size=3), shuffle=st.randoms())
def test_the_walk_reads_what_protobuf_reads(
    m: pb.FilterUpdate, extra: list[int], shuffle: random.Random
) -> None:
    """Fields in any order, unknown fields of every wire type in between: every value, length
    and offset as protobuf sees them."""
    parts = [_field(n, 0, _VarintBytes(3)) for n in extra]
    parts += [_field(n, 5, b"\1\2\3\4") for n in extra] + [_field(120, 1, bytes(8))]
    parts += [_field(121, 2, _VarintBytes(2) + b"zz")]
    one = pb.FilterUpdate()
    for f in m.ListFields():
        one.Clear()
        one.MergeFrom(m)
        for g in m.ListFields():
            if g[0].name != f[0].name:
                one.ClearField(g[0].name)
        parts.append(one.SerializeToString())
    shuffle.shuffle(parts)
    raw = b"".join(parts)
    values, starts, flags = _walk(raw)
    assert flags == UNKNOWN_FIELDS
    back = pb.FilterUpdate.FromString(raw)
    for number in _FIELDS:
        name = back.DESCRIPTOR.fields_by_number[number].name
        is_message = number in (2, 3)
        present = number in values
        assert present == (back.HasField(name) if is_message else bool(getattr(back, name)))
        if not present:
            continue
        if number in (2, 3, 8):
            got = raw[starts[number] : starts[number] + values[number]]
            want = getattr(back, name)
            assert got == (want if number == 8 else want.SerializeToString())
        else:
            assert values[number] == getattr(back, name) % 2**64


@settings(max_examples=300, deadline=None)
@given(m=filter_updates(), cut=st.integers(min_value=1))
def test_a_cut_message_is_malformed_exactly_when_protobuf_rejects_it(
    m: pb.FilterUpdate, cut: int
) -> None:
    raw = m.SerializeToString()
    raw = raw[: len(raw) - 1 - cut % max(len(raw), 1)]
    try:
        pb.FilterUpdate.FromString(raw)
        rejected = False
    except DecodeError:
        rejected = True
    assert bool(_walk(raw)[2] & MALFORMED) == rejected


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x01",  # field number 0
        b"\x0b",  # a group (wire type 3)
        b"\x0f",  # wire type 7
        b"\x08" + b"\xff" * 10,  # an 11-byte varint
        b"\x12\x05ab",  # a length past the end
        b"\x09" + bytes(8),  # field 1 as fixed64: a known field with a foreign wire type
        b"\x42" + b"\x01",  # payload length with no bytes
    ],
)
def test_malformed_encodings(raw: bytes) -> None:
    assert _walk(raw)[2] & MALFORMED


@pytest.mark.parametrize(
    "raw",
    [
        _field(100, 0, _VarintBytes(2**63)),
        _field(100, 1, bytes(8)),
        _field(100, 2, _VarintBytes(3) + b"abc"),
        _field(100, 5, bytes(4)),
        _field(2**29 - 1, 0, b"\x01"),  # the largest field number: a five-byte tag
    ],
)
def test_each_unknown_field_is_skipped_and_flagged(raw: bytes) -> None:
    values, _, flags = _walk(raw + pb.FilterUpdate(sequence=7).SerializeToString())
    assert flags == UNKNOWN_FIELDS
    assert values[5] == 7

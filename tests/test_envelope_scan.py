"""The compiled kernels behind the frames table, against the reference implementations:
xxh3 against python-xxhash, the FilterUpdate walk against protobuf's own parser, runs against
byte comparison."""

from __future__ import annotations

import random

import numpy as np
import pytest
import xxhash
from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._kernels import (
    FIELD_SLOTS,
    MALFORMED,
    UNKNOWN_FIELDS,
    scan_filter_updates,
    xxh3_64_at,
)

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


def _scan(raws: list[bytes], is_pb: list[bool]) -> tuple[np.ndarray, ...]:
    """The kernel over messages laid end to end between guard bytes."""
    guard = b"\xee"
    buf = np.frombuffer(guard + guard.join(raws) + guard, dtype=np.uint8)
    length = np.array([len(r) for r in raws], dtype=np.int64)
    start = 1 + np.concatenate([[0], np.cumsum(length[:-1] + 1)]).astype(np.int64)
    return scan_filter_updates(buf, start, start + length, np.array(is_pb))  # type: ignore[no-any-return]


def test_checksums_cover_the_bytes_after_the_cbi1_header() -> None:
    """Bare frames hash as a whole; a message's payload is found by the walk."""
    rng = np.random.default_rng(7)
    frames = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in (0, 47, 48, 63, 64, 300)]
    msgs = [pb.FilterUpdate(sequence=9, payload=f).SerializeToString() for f in frames]
    scanned = _scan([*frames, *msgs], [False] * 6 + [True] * 6)
    want = [xxhash.xxh3_64_intdigest(f[48:]) & 0xFFFFFFFF if len(f) >= 48 else 0 for f in frames]
    assert scanned[4].tolist() == want + want
    heads = [f[:64].ljust(64, b"\0") for f in frames]
    assert [bytes(row) for row in scanned[6]] == heads + heads  # the payload's first 64 bytes


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


def _scan_one(raw: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    value, present, offset, flags, *_ = _scan([raw], [True])  # guard bytes must not leak in
    return value[0], present[0], offset[0] - 1, int(flags[0])


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
    value, present, offset, flags = _scan_one(raw)
    assert flags == UNKNOWN_FIELDS
    back = pb.FilterUpdate.FromString(raw)
    for number, slot in FIELD_SLOTS.items():
        name = back.DESCRIPTOR.fields_by_number[number].name
        is_message = number in (2, 3)
        assert present[slot] == (back.HasField(name) if is_message else bool(getattr(back, name)))
        if not present[slot]:
            continue
        if number in (2, 3, 8):
            got = raw[offset[slot] : offset[slot] + int(value[slot])]
            want = getattr(back, name)
            assert got == (want if number == 8 else want.SerializeToString())
        else:
            assert int(value[slot]) == getattr(back, name) % 2**64


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
    assert bool(_scan_one(raw)[3] & MALFORMED) == rejected


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
    assert _scan_one(raw)[3] & MALFORMED


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
    value, present, _, flags = _scan_one(raw + pb.FilterUpdate(sequence=7).SerializeToString())
    assert flags == UNKNOWN_FIELDS
    assert present[FIELD_SLOTS[5]] and int(value[FIELD_SLOTS[5]]) == 7


def test_bare_frames_are_not_walked() -> None:
    raw = pb.FilterUpdate(sequence=5, kind=2).SerializeToString()
    value, present, _, flags, *_ = _scan([raw, raw], [False, True])
    assert not present[0].any() and flags[0] == 0
    assert int(value[1, FIELD_SLOTS[5]]) == 5


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(
        st.tuples(st.sampled_from([None, b"", b"a", b"ab" * 9, b"ba" * 9]), st.booleans()),
        min_size=1,
    )
)
def test_runs_split_exactly_where_relay_or_producer_bytes_change(
    keys: list[tuple[bytes | None, bool]],
) -> None:
    """A run is a stretch of rows with the same relay (absent, or these bytes) and producer."""
    raws: list[bytes] = []
    for relay, producer in keys:
        m = pb.FilterUpdate(sequence=len(raws), payload=b"p" * len(raws))
        if relay is not None:
            m.relay.MergeFromString(
                _field(9, 2, _VarintBytes(len(relay)) + relay) if relay else b""
            )
            m.relay.SetInParent()
        if producer:
            m.producer.layout_generation = 3
        raws.append(m.SerializeToString())
    run = _scan(raws, [True] * len(raws))[5]
    want = np.cumsum([0] + [keys[i] != keys[i - 1] for i in range(1, len(keys))])
    assert run.tolist() == want.tolist()


def test_the_kernel_numbers_rules_in_rulebook_order() -> None:
    """``frame_rules`` returns indices into ``cbi1kit.wire.RULES``: each of its constants is the
    index of the rule it names, the kernel names every rule once, in the rulebook's order."""
    from cbi1kit.analysis import _kernels
    from cbi1kit.wire import RULE_INDEX, RULES

    assert tuple(r.id for r in RULES) == _kernels.KERNEL_RULES
    assert len(RULES) == _kernels.RULE_COUNT
    assert RULES[_kernels.PRODUCER_RULE].id == "relay-producer-identity"
    constants = {
        name: value
        for name, value in vars(_kernels).items()
        if name.isupper()
        and name.startswith("_")
        and isinstance(value, int)
        and name not in ("_MAX_FRAME",)
    }
    named = {rule.id.split("-", 1)[1].replace("-", "_").upper(): rule.id for rule in RULES}
    aliases = {
        "IDENTITY_PRESENT": "_RELAY_PRESENT",
        "PROTOBUF_DECODE": "_PROTOBUF",
        "PRODUCER_IDENTITY": None,
    }
    for short, rid in named.items():
        name = aliases.get(short, f"_{short}")
        if name is None:
            continue
        assert constants[name] == RULE_INDEX[rid], (name, rid)

"""The rulebook against upstream's golden vectors, and the compiled frames table against its
reference: every manifest case of tests/vectors/cbi1 wrapped in an otherwise valid FilterUpdate,
written to a capture, must get the verdict of ``decode`` (through ``rule_for``) from both
engines, and both engines must build the same table on hypothesis-mutated messages."""

from __future__ import annotations

import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import xxhash
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings, strategies as st
from strategies import wire_producer
from test_conformance_cbi1 import CASES, _format, _frame_bytes

from cbi1kit import errors
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._shorthands import frames_table, replay
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.errors import Cbi1Error
from cbi1kit.relay._messages import RELAY_CONTRACT_MARKER, check_filter_update
from cbi1kit.wire import RULES, Rule, decode, rule_for
from cbi1kit.wire._frames import Delta, SnapshotChunk
from cbi1kit.wire._rules import RULE_INDEX

MAX_INLINE = 1 << 20  # bigger frames (the 4 MiB golden frames) go through their own capture


def wrap(fmt_seed: int, fmt_buckets: int, frame: bytes) -> pb.FilterUpdate:
    """An otherwise valid FilterUpdate around ``frame``: the producer has the expected format and
    the header's dc_id, the kind follows the flags, the sequences follow epoch / base_epoch."""
    head = frame[:64].ljust(64, b"\0")
    flags = struct.unpack_from("<H", head, 6)[0]
    dc_id, epoch = struct.unpack_from("<QQ", head, 28)
    kind = pb.FILTER_UPDATE_KIND_DELTA if flags == 2 else pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
    if kind == pb.FILTER_UPDATE_KIND_DELTA:
        seq = epoch if len(frame) >= 44 else 1
        base = struct.unpack_from("<Q", head, 48)[0] if len(frame) >= 56 else max(seq - 1, 0)
    else:
        base = seq = epoch
    return pb.FilterUpdate(
        protocol_version=1,
        relay=pb.RelayIdentity(drt_instance_id=3, relay_incarnation=4),
        producer=wire_producer(fmt_seed, fmt_buckets, dc_id=dc_id, incarnation=9),
        base_sequence=base % 2**64,
        sequence=seq % 2**64,
        send_ts_us=1_700_000_000_000_000,
        kind=kind,
        payload=frame,
        contract_marker=RELAY_CONTRACT_MARKER,
    )


def write_capture(path: Path, messages: list[bytes]) -> Path:
    with CaptureWriter(path) as w:
        sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
        for raw in messages:
            w.message(sid, raw)
        w.close_stream(sid)
    return path


def expected_rule(update: pb.FilterUpdate) -> str | None:
    """What the rulebook says of one message, from the per-message Python paths: relay
    validation, ``decode`` against the producer's format, the envelope comparisons; each
    reports its first failure, the verdict is the earliest of them in ``RULES``."""
    from cbi1kit.wire import FilterFormat

    found = []
    err = check_filter_update(update)
    if err is not None:
        found.append(rule_for(err))
    fmt = update.producer.ckf_format
    try:
        frame = decode(
            FilterFormat.unchecked(seed=fmt.seed, bucket_count=fmt.bucket_count), update.payload
        )
    except Cbi1Error as exc:
        found.append(rule_for(exc))
    else:
        if isinstance(frame, SnapshotChunk) != (update.kind == 1):
            found.append("cbi1-kind-mismatch")
        elif frame.header.dc_id != update.producer.pool_id.dc_id:
            found.append("cbi1-dc-id")
        elif frame.header.epoch != update.sequence:
            found.append("cbi1-epoch")
        elif isinstance(frame, Delta) and frame.base_epoch != update.base_sequence:
            found.append("cbi1-delta-base-epoch")
    return min(found, key=RULE_INDEX.__getitem__) if found else None


def decode_rule(fmt_spec: dict[str, Any], frame: bytes) -> str | None:
    try:
        decode(_format(fmt_spec), frame)
    except Cbi1Error as exc:
        return rule_for(exc)
    return None


# ----------------------------------------------------------------------------- the rulebook


def test_rules_are_unique_complete_and_cite_upstream() -> None:
    assert len({r.id for r in RULES}) == len(RULES) == len(RULE_INDEX)
    for i, rule in enumerate(RULES):
        assert isinstance(rule, Rule) and RULE_INDEX[rule.id] == i
        assert rule.field and rule.message and " · " in rule.upstream, rule
    with pytest.raises(AttributeError):
        RULES[0].id = "x"  # type: ignore[misc]


def test_rule_for_knows_decode_and_protobuf_and_refuses_stream_errors() -> None:
    from cbi1kit import errors

    assert rule_for(DecodeError("x")) == "relay-protobuf-decode"
    assert (
        rule_for(
            errors.Cbi1Error(errors.Cbi1Variant.Magic, subvariant="Legacy", field="header.magic")
        )
        == "cbi1-legacy-ckf1"
    )
    assert rule_for(errors.Cbi1Error("Magic", field="header.magic")) == "cbi1-magic"
    assert rule_for(errors.Cbi1Error("Malformed", field="delta.images[3].bucket")) == (
        "cbi1-delta-bucket-range"
    )
    assert rule_for(errors.Cbi1Error("Malformed", field="delta.images")) == "cbi1-delta-length"
    assert rule_for(
        errors.Cbi1Error(
            errors.Cbi1Variant.Format, subvariant="Mismatch", field="header.bucket_count"
        )
    ) == ("cbi1-format-mismatch")
    for stateful in (errors.Cbi1Error("ChunkSequence"), errors.Cbi1Error("IncompleteCoverage")):
        with pytest.raises(LookupError):
            rule_for(stateful)


# ------------------------------------------------------------------- golden vectors, wrapped


def _case_frames(case: dict[str, Any]) -> list[tuple[dict[str, Any], bytes, str | None]]:
    """(expected format, frame, verdict upstream's decode gives) of each frame of a case."""
    kind = case["kind"]
    if kind == "decode":
        frame = _frame_bytes(case["file"])
        return [(case["expected_format"], frame, decode_rule(case["expected_format"], frame))]
    if kind == "assembly":
        out = []
        for step in case["steps"]:
            if step["action"] == "decode_then_absorb":
                frame = _frame_bytes(step["file"])
                out.append(
                    (case["decode_format"], frame, decode_rule(case["decode_format"], frame))
                )
        return out
    return []


def _verdicts(tmp: Path, messages: list[pb.FilterUpdate], engine: str) -> list[str | None]:
    path = write_capture(tmp / f"{engine}.kvrcap", [m.SerializeToString() for m in messages])
    df = frames_table(path, engine=engine).collect()
    assert df.height == len(messages) and (df["kind"] != "SOURCE_ERROR").all()
    return df["validation_rule"].to_list()


def _replay_verdicts(tmp: Path, messages: list[pb.FilterUpdate]) -> list[str | None]:
    """Replay's per-message rule for each message on its own (a one-message stream, so no
    earlier violation puts replay into recovery); stream rules (no snapshot yet) are not per
    message and do not count."""
    out: list[str | None] = []
    for i, m in enumerate(messages):
        path = write_capture(tmp / f"replay-{i}.kvrcap", [m.SerializeToString()])
        rules = [v.rule for v in replay(path).violations if v.rule in RULE_INDEX]
        assert len(rules) <= 1, rules
        out.append(rules[0] if rules else None)
    return out


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in CASES])
def test_every_manifest_case_wrapped_in_a_filter_update(
    case: dict[str, Any], tmp_path: Path
) -> None:
    """The table's verdict is decode's (mapped by ``rule_for``) for every frame of a decode or
    assembly case, from both engines; a chunk that upstream assembles is valid. Cases that hold
    no frame for a consumer (encoder inputs, FilterFormat::new, a body-internal decoder call)
    are checked through their own path: their errors are no per-message rule."""
    frames = _case_frames(case)
    if not frames:
        if case["kind"] == "assembly":  # frames built in memory, never bytes on the wire
            steps = {step["action"] for step in case["steps"]}
            assert steps <= {"absorb_constructed_frame", "reset"}, steps
            return
        assert case["kind"] in ("filter_format_new", "encode_delta", "decode_body_internal")
        if "error" in case["expected"]:
            err = case["expected"]["error"]
            variant = err.get("variant") or err["format_error"]["variant"]
            if variant == "DeltaImageCount":  # the body decoder's (and encoder's) own check
                rule = rule_for(errors.Cbi1Error("DeltaImageCount", field="delta.image_count"))
                assert rule == "cbi1-delta-length"
            else:
                assert variant in ("BucketCount", "BucketIndex"), variant  # encoder side only
        return
    messages, wants = [], []
    for fmt, frame, decoded in frames:
        want = decoded
        m = wrap(int(fmt["seed"]), int(fmt["bucket_count"]), frame)
        if fmt.get("constructed_via", "FilterFormat::new") != "FilterFormat::new":
            # decode takes any expected bucket count; the relay contract's CkfFormat does not
            # (upstream validate_ckf_format): such a producer is invalid before any decoding,
            # unsupported above 2^24 buckets (the pool is quarantined), else malformed
            big = int(fmt["bucket_count"]) > 1 << 24
            want = "relay-producer-unsupported" if big else "relay-producer-identity"
        elif want is None and m.kind == 2 and m.sequence != (m.base_sequence + 1) % 2**64:
            # a delta that decodes but does not advance by one (base_epoch >= epoch): no
            # envelope carries it validly; the lane ingestor's contiguity rule rejects it
            want = "relay-delta-contiguous"
        assert expected_rule(m) == want, (case["id"], want)  # the wrap adds no other failure
        messages.append(m)
        wants.append(want)
    for engine in ("compiled", "reference"):
        assert _verdicts(tmp_path, messages, engine) == wants, engine
    assert _replay_verdicts(tmp_path, messages) == wants
    if case["kind"] == "assembly":
        for step, (_, _, want) in zip(
            [s for s in case["steps"] if s["action"] == "decode_then_absorb"], frames, strict=True
        ):
            if "ok" in step["decode_expected"]:
                assert want is None


def test_the_rulebook_covers_the_manifests_verdicts() -> None:
    """Every decode error of the manifest maps to a rule; some frames are valid."""
    seen = {w for c in CASES for _, _, w in _case_frames(c)}
    assert None in seen
    assert {
        "cbi1-truncated",
        "cbi1-magic",
        "cbi1-checksum",
        "cbi1-format-mismatch",
        "cbi1-flags",
        "cbi1-delta-length",
        "cbi1-chunk-layout",
    } <= seen


def test_a_delta_bucket_past_the_lane_is_flagged_as_decode_rejects_it(tmp_path: Path) -> None:
    """No golden frame has one: a delta whose image names bucket >= bucket_count (written past
    the encoder's check) is Malformed for upstream's decode_delta, and the table says so, at
    any image position, with the checksum intact; the same delta one bucket lower is valid."""
    from cbi1kit.wire import FilterFormat, FrameHeader

    fmt = FilterFormat(seed=0x5EED, bucket_count=1024)
    messages, wants = [], []
    for top, at in ((1024, 0), (1024, 2), (2**32 - 1, 1), (1023, 2)):
        images = [(5, 1), (7, 2), (9, 3)]
        images[at] = (top, 4)
        frame = Delta(
            FrameHeader(seed=fmt.seed, bucket_count=fmt.bucket_count, dc_id=7, epoch=5), 4, images
        ).serialize()
        messages.append(wrap(fmt.seed, fmt.bucket_count, frame))
        wants.append("cbi1-delta-bucket-range" if top >= 1024 else None)
        assert decode_rule({"seed": fmt.seed, "bucket_count": 1024}, frame) == wants[-1]
        assert expected_rule(messages[-1]) == wants[-1]
    for engine in ("compiled", "reference"):
        assert _verdicts(tmp_path, messages, engine) == wants, engine


# --------------------------------------------------------------- compiled against reference


def _both(messages: list[pb.FilterUpdate] | list[bytes], tmp: Path) -> None:
    raws = [m if isinstance(m, bytes) else m.SerializeToString() for m in messages]
    path = write_capture(Path(tempfile.mkdtemp(dir=tmp)) / "m.kvrcap", raws)
    compiled = frames_table(path, engine="compiled").collect()
    reference = frames_table(path, engine="reference").collect()
    assert compiled.schema == reference.schema
    for name in compiled.columns:
        a, b = compiled[name], reference[name]
        assert a.equals(b), (name, a.to_list(), b.to_list())


def _golden_messages() -> list[pb.FilterUpdate]:
    out = []
    for case in CASES:
        for fmt, frame, _ in _case_frames(case):
            if len(frame) <= MAX_INLINE:
                out.append(wrap(int(fmt["seed"]), int(fmt["bucket_count"]), frame))
    return out


GOLDEN = _golden_messages()


def test_engines_agree_on_every_wrapped_golden_frame(tmp_path: Path) -> None:
    _both(GOLDEN, tmp_path)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    m = pb.FilterUpdate()
    m.CopyFrom(draw(st.sampled_from(GOLDEN)))
    edit = draw(st.sampled_from(["flip", "cut", "field", "payload", "none"]))
    if edit == "field":
        name = draw(
            st.sampled_from(["base_sequence", "sequence", "kind", "protocol_version", "dc"])
        )
        value = draw(st.integers(0, 2**64 - 1))
        if name == "kind":
            m.kind = draw(st.sampled_from([0, 1, 2, 3, 7]))  # type: ignore[assignment]
        elif name == "protocol_version":
            m.protocol_version = value % 2**32
        elif name == "dc":
            m.producer.pool_id.dc_id = value
        else:
            setattr(m, name, value)
    elif edit == "payload":
        p = bytearray(m.payload)
        if p:
            i = draw(st.integers(0, len(p) - 1))
            p[i] = draw(st.integers(0, 255))
        m.payload = bytes(p)
    raw = m.SerializeToString()
    if edit == "flip":
        bit = draw(st.integers(0, len(raw) * 8 - 1))
        b = bytearray(raw)
        b[bit // 8] ^= 1 << (bit % 8)
        raw = bytes(b)
    elif edit == "cut":
        raw = raw[: draw(st.integers(0, len(raw)))]
    return raw


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raws=st.lists(mutated(), min_size=1, max_size=12))
def test_engines_agree_on_mutated_messages(raws: list[bytes], tmp_path: Path) -> None:
    _both(raws, tmp_path)


def test_the_table_falls_back_to_the_reference_when_kernels_cannot_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kernels that cannot be imported (numba missing) mean the reference engines, with one
    warning saying why; the table is the same."""
    from cbi1kit import _lazy

    path = write_capture(tmp_path / "g.kvrcap", [m.SerializeToString() for m in GOLDEN[:40]])
    compiled = frames_table(path, engine="compiled").collect()
    _lazy.compiled.cache_clear()
    monkeypatch.setitem(sys.modules, "numba", None)  # the import fails
    try:
        with pytest.warns(RuntimeWarning, match="without its compiled kernels"):
            fallback = frames_table(path).collect()  # engine="compiled"
    finally:
        monkeypatch.undo()
        _lazy.compiled.cache_clear()
    assert fallback.equals(compiled)
    assert pl.Series(fallback["validation_rule"]).null_count() < fallback.height


def test_the_kernel_cache_is_keyed_on_every_inlined_source() -> None:
    """Every cbi1kit module the kernel modules import is hashed into their cache stamp."""
    import ast

    from cbi1kit import _compile as _cache

    package = Path(_cache.__file__).parent
    kernels = {
        "analysis/_kernels.py",
        "analysis/_replay_kernels.py",
        "capture/_walk.py",
        "capture/_walk_kernel.py",
        "sim/_arrays.py",
        "sim/_caches.py",
        "sim/_kernel.py",
    }
    imported: set[str] = set()
    for rel in kernels:
        for node in ast.walk(ast.parse((package / rel).read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cbi1kit."):
                module = node.module.removeprefix("cbi1kit.").replace(".", "/")  # type: ignore[union-attr]
                for alias in node.names:  # ``from cbi1kit._proto import kvrelay_v1_pb2``
                    sub = f"{module}/{alias.name}.py"
                    imported.add(sub if (package / sub).is_file() else f"{module}.py")
    imported.discard("_lazy.py")  # what loads the kernels compiles nothing
    assert imported | kernels == set(_cache.INLINED_SOURCES)
    assert len(_cache.sources_digest()) == 64


ASSEMBLED = [
    c
    for c in CASES
    if c["kind"] == "assembly"
    and all(s["action"] == "decode_then_absorb" for s in c["steps"])
    and all("ok" in s["absorb_expected"] for s in c["steps"])
    and (c["steps"][-1]["absorb_expected"]["ok"] or {}).get("epoch") is not None
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in ASSEMBLED])
def test_replay_installs_every_chunking_upstream_assembles(
    case: dict[str, Any], tmp_path: Path
) -> None:
    """A chunked lane upstream's SnapshotAssembly completes, wrapped in FilterUpdates, replays
    without a violation and installs exactly the lane upstream assembles."""
    fmt = case["decode_format"]
    frames = [_frame_bytes(s["file"]) for s in case["steps"]]
    messages = [wrap(int(fmt["seed"]), int(fmt["bucket_count"]), f) for f in frames]
    path = write_capture(tmp_path / "asm.kvrcap", [m.SerializeToString() for m in messages])
    report = replay(path)
    assert report.violations == []
    assert report.events[-1].kind == "snapshot_installed"
    ok = case["steps"][-1]["absorb_expected"]["ok"]
    assert report.final_sequence == int(ok["epoch"])
    lane = report.final_lane
    assert lane is not None
    buckets = np.flatnonzero(lane)
    images = np.empty(buckets.size, dtype=[("bucket", "<u4"), ("word", "<u8")])
    images["bucket"], images["word"] = buckets, lane[buckets]
    assert xxhash.xxh3_64_intdigest(images.tobytes()) == int(ok["images_xxh3_64"])


def test_a_rule_has_a_check_in_every_engine() -> None:
    """The rulebook is the only list: the frames kernel's verdict (its groups of rules)
    returns each rule's index once, the per-message path reaches each rule by an error it
    reports or names it itself, and the compiled replay states how it keeps each. A new rule
    fails here until all three."""
    import ast
    import inspect

    from cbi1kit.analysis import _kernels, _reference

    groups = (_kernels._envelope_rule, _kernels._frame_rule, _kernels._body_rule)
    returned = [
        getattr(_kernels, node.value.id)
        for group in (*groups, _kernels._session_rule)
        for node in ast.walk(ast.parse(inspect.getsource(group.py_func)))
        if isinstance(node, ast.Return)
        and isinstance(node.value, ast.Name)
        and node.value.id != "_GO_ON"
    ]
    assert sorted(returned) == list(range(len(RULES)))
    named = {
        node.value
        for node in ast.walk(ast.parse(inspect.getsource(_reference.frame_verdict)))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    for rule in RULES:
        assert rule.errors or rule.id in named, rule.id
        assert rule.replay, rule.id


def _producer_set(path: str, value: int) -> pb.FilterUpdate:
    """A valid snapshot chunk's envelope whose producer field ``path`` is ``value``."""
    from cbi1kit.wire import FilterFormat
    from cbi1kit.wire._encode import encode_snapshot_chunk

    fmt = FilterFormat(seed=0x52, bucket_count=1024)
    frame = encode_snapshot_chunk(fmt, 1, 1, 0, 1, np.zeros(1024, dtype=np.uint64))
    m = wrap(fmt.seed, fmt.bucket_count, frame)
    target: Any = m.producer
    *parents, name = path.split(".")
    for p in parents:
        target = getattr(target, p)
    setattr(target, name, value)
    return m


@pytest.mark.parametrize(
    ("field", "value", "rule", "action"),
    [
        ("ckf_format.bucket_count", 1 << 25, "relay-producer-unsupported", "quarantine-pool"),
        ("ckf_format.slots_per_bucket", 8, "relay-producer-unsupported", "quarantine-pool"),
        ("pool_id.identity_version", 2, "relay-producer-unsupported", "quarantine-pool"),
        (
            "pool_id.indexer_domain.cache_semantics.source",
            3,
            "relay-producer-unsupported",
            "quarantine-pool",
        ),
        ("pool_id.identity_version", 0, "relay-producer-identity", "invalidate-lane"),
        (
            "pool_id.indexer_domain.routing_scope.source",
            0,
            "relay-producer-identity",
            "invalidate-lane",
        ),
        ("ckf_format.bucket_count", 1000, "relay-producer-identity", "invalidate-lane"),
        ("layout_generation", 0, "relay-producer-identity", "invalidate-lane"),
    ],
)
def test_unsupported_semantics_quarantine_the_pool(
    tmp_path: Path, field: str, value: int, rule: str, action: str
) -> None:
    """identity.rs (7216a153) ``is_unsupported``: a set but unknown identity version or source,
    an unsupported CKF format, more than 2^24 buckets quarantine the pool (grpc-contract.md
    32a11122); 0 (missing) and other malformed fields invalidate the lane. Both frames engines,
    replay, its JSON and the dataset's violations table say which."""
    import json

    from cliutil import cli_run

    from cbi1kit.analysis._dataset import export_dataset, open_dataset

    m = _producer_set(field, value)
    assert expected_rule(m) == rule
    for engine in ("compiled", "reference"):
        assert _verdicts(tmp_path, [m], engine) == [rule], engine
    path = write_capture(tmp_path / "one.kvrcap", [m.SerializeToString()])
    (v,) = replay(path).violations
    assert (v.rule, v.action) == (rule, action)
    code, out, _ = cli_run("replay", str(path), "--json", "--no-progress")
    assert code == 1  # the README's code for a capture that breaks a rule
    (said,) = json.loads(out)["violations"]
    assert (said["rule"], said["action"]) == (rule, action)
    export_dataset([path], tmp_path / "ds")
    rows = open_dataset(tmp_path / "ds").violations.collect()
    assert rows["action"].to_list() == [action]

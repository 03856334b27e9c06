"""Every reader and every CLI subcommand against every class of bad input (#13).

The library answers only with :mod:`cbi1kit.errors` types; the CLI with one line on stderr, no
traceback, and the README's exit code:

* 2, usage: a number outside its option's range (at parse time), an output that exists, a
  certificate or key file that cannot be used (at once, before any connection);
* 3, unreadable: a missing path, a directory, an empty file, bytes in no format cbi1kit reads,
  permission denied (``test_cli.py`` runs those as an unprivileged user), an unwritable output;
* 1, invalid: a recognised input that breaks a rule (a trace line, a damaged capture).

``inspect`` reads any bytes as a (broken) bare CBI1 frame, so foreign bytes are invalid for it.
Nothing is created, and an existing file is left byte-identical, whatever the outcome.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from certs import Pki, make_pki
from cliutil import cli_run, one_line
from handfleet import MODEL, HandFleet
from hypothesis import HealthCheck, given, settings, strategies as st
from test_stream_roundtrip import build_stream

from cbi1kit import cli
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis import frames_table, global_view, replay
from cbi1kit.capture import (
    CaptureWriter,
    RecordType,
    read_capture,
    read_capture_items,
    read_catalog,
    read_cbi1_files,
    read_frames,
    read_grpcurl_json,
)
from cbi1kit.capture._file import FILE_MAGIC
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD, WATCH_KV_POOL_CATALOG_METHOD
from cbi1kit.cli._common import Number
from cbi1kit.data import mooncake_trace, sample_capture
from cbi1kit.errors import Cbi1kitError
from cbi1kit.relay._messages import (
    frame_from_filter_update,
    validate_catalog_update,
    validate_filter_update,
    validate_relay_info,
)
from cbi1kit.sim._workload import read_mooncake

ROOT = Path(__file__).parents[1]
SAMPLE = sample_capture()
TRACE = mooncake_trace()
STREAM = build_stream(deltas=4)
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))

relaxed = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def snapshot_tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


# ------------------------------------------------------------------ numbers out of their range


def subcommands(
    parser: argparse.ArgumentParser | None = None, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every subcommand's words and parser, nested ones (``fleet convert``) included."""
    parser = parser or cli.build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
                if nested:
                    yield from subcommands(sub, (*words, name))
                else:
                    yield (*words, name), sub


def numeric_options() -> Iterator[tuple[tuple[str, ...], str, Number]]:
    for name, sub in subcommands():
        for action in sub._actions:
            if action.type is None or not action.option_strings:
                continue
            assert action.type not in (int, float), (
                f"{name} {action.option_strings[0]}: a bare {action.type.__name__} has no range; "
                "parse it with cbi1kit.cli._common.ranged"
            )
            if isinstance(action.type, Number):
                yield name, action.option_strings[-1], action.type


NUMERIC = list(numeric_options())


def test_every_numeric_option_has_a_range() -> None:
    assert len(NUMERIC) > 40  # the walk found the options (simulate alone has 30)
    assert {name[0] for name, _, _ in NUMERIC} >= {
        "simulate",
        "inspect",
        "stats",
        "record",
        "serve",
    }
    assert {("fleet", "convert"), ("fleet", "query")} <= {name for name, _, _ in NUMERIC}


def _outside(number: Number) -> st.SearchStrategy[str]:
    lo = math.floor(number.lo) if number.open_lo else math.ceil(number.lo) - 1
    values = st.integers(max_value=lo).map(str)
    if number.hi is not None:
        values |= st.integers(min_value=math.floor(number.hi) + 1).map(str)
    values |= st.sampled_from(["x", "", "1e", "0x"])
    if number.real:
        values |= st.sampled_from(["nan", "inf", "-inf"])
        below = st.floats(max_value=number.lo, exclude_max=not number.open_lo, allow_nan=False)
        values |= below.map(repr)
    return values


@relaxed
@given(data=st.data())
def test_a_number_outside_its_range_is_a_usage_error(data: st.DataObject) -> None:
    command, flag, number = data.draw(st.sampled_from(NUMERIC))
    value = data.draw(_outside(number))
    code, _, err = cli_run(*command, f"{flag}={value}")
    assert code == 2 and one_line(err) and flag in err, (command, flag, value, err)


@relaxed
@given(data=st.data())
def test_a_number_inside_its_range_parses_exactly(data: st.DataObject) -> None:
    _, _, number = data.draw(st.sampled_from(NUMERIC))
    lo = number.lo if not number.open_lo else number.lo + (1e-9 if number.real else 1)
    hi = number.hi if number.hi is not None else lo + 2**70
    if number.real:
        value = data.draw(st.floats(min_value=lo, max_value=hi))
        assert number(repr(value)) == value
    else:
        value = data.draw(st.integers(min_value=math.ceil(lo), max_value=math.floor(hi)))
        assert number(str(value)) == value and number(hex(value)) == value


#: what ``--at`` refuses
BAD_MOMENTS = [
    "noon",
    "+5",
    "+-5s",
    "-1",
    "2026-11-30T12:00:00",
    "2026-02-30T00:00:00Z",
    str(1 << 64),
]
#: options whose text is no number but is parsed at parse time all the same: (command, flag,
#: values it refuses)
PARSED_TEXT = [
    ("view", "--at", BAD_MOMENTS),
    ("stats", "--at", BAD_MOMENTS),
    ("explain", "--at", BAD_MOMENTS),
    ("explain", "--tokens", ["", "x", "1,,2", "-1", "4294967296", "1.5", "[", "1;2", "0x"]),
    ("diff", "--at", BAD_MOMENTS),
    ("diff", "--at-a", BAD_MOMENTS),
    ("diff", "--at-b", BAD_MOMENTS),
    ("record", "--header", ["no colon", "grpc-timeout: 1", "key-bin: AA", "a b: v", "x: \x01"]),
    ("record", "--authority", ["", "a b", "host/path"]),
    ("watch", "--metrics", ["", "nowhere", "host:", "h:70000", "h:x"]),
    ("watch", "--header", ["no colon", "grpc-timeout: 1", "a b: v"]),
    ("watch", "--authority", ["", "a b", "host/path"]),
    ("fleet query", "--every", ["", "1", "0m", "1y", "1.5h", "-1h", "m", "1h30m"]),
]


def test_every_parsed_text_option_is_walked() -> None:
    typed = {
        (" ".join(name), action.option_strings[-1])
        for name, sub in subcommands()
        for action in sub._actions
        if action.option_strings
        and action.type is not None
        and not isinstance(action.type, Number)
        and action.type is not Path
    }
    assert typed == {(command, flag) for command, flag, _ in PARSED_TEXT}


@pytest.mark.parametrize(
    "command,flag,value", [(c, f, v) for c, f, values in PARSED_TEXT for v in values]
)
def test_a_text_its_option_cannot_parse_is_a_usage_error(
    command: str, flag: str, value: str, tmp_path: Path
) -> None:
    words = [*command.split(), *(["churn"] if command == "fleet query" else [])]  # its query
    # the positional: a capture never read, or (record) an address never dialled
    first = "127.0.0.1:1" if command == "record" else str(tmp_path / "never-read.kvrcap")
    code, _, err = cli_run(*words, first, f"{flag}={value}")
    assert code == 2 and one_line(err) and flag in err, (command, flag, value, err)
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------- input paths: every subcommand

REPORT_TRACE = ["report", str(SAMPLE), "-o", "{out}", "--trace", "{in}", "--no-notebooks"]
EXPLAIN = ["explain", "{fleet}", "--model", MODEL]
#: (id, argv with {in} for the bad input, {out} for a fresh output and {fleet} for a capture
#: with a catalog (blocks of 64 tokens: a few foreign digits are too few), foreign bytes' code)
INPUTS = [
    ("inspect", ["inspect", "{in}"], 3),
    ("replay", ["replay", "{in}"], 3),
    ("stats", ["stats", "{in}", "--fpr-probes", "0"], 3),
    ("view", ["view", "{in}"], 3),
    ("explain", ["explain", "{in}", "--model", MODEL, "--tokens", "1,2,3,4"], 3),
    ("explain --tokens-file", [*EXPLAIN, "--tokens-file", "{in}"], 1),
    ("explain --trace", [*EXPLAIN, "--trace", "{in}", "--request", "0"], 3),
    ("diff", ["diff", "{in}", "{fleet}"], 3),
    ("diff b", ["diff", "{fleet}", "{in}"], 3),
    ("export", ["export", "{in}", "-o", "{out}"], 3),
    ("export --dataset", ["export", "{in}", "-o", "{out}", "--dataset"], 3),
    ("fleet convert", ["fleet", "convert", "{in}", "-o", "{out}"], 3),
    ("fleet query", ["fleet", "query", "churn", "{in}"], 3),
    ("report", ["report", "{in}", "-o", "{out}", "--no-notebooks"], 3),
    ("simulate trace", ["simulate", "{in}", "-o", "{out}"], 3),
    ("report --trace", REPORT_TRACE, 3),
    ("serve --trace", ["serve", "--trace", "{in}", "--duration", "0.2"], 3),
    (
        "record --append",
        ["record", "127.0.0.1:1", "-o", "{in}", "--append", "--quiet", "--give-up-after", "1"],
        3,
    ),
    ("demo --data", ["demo", "--data", "{in}", "--no-report"], 3),
]


def _bad(kind: str, where: Path, foreign: bytes) -> Path:
    path = where / "input.jsonl"
    if kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "foreign":
        path.write_bytes(foreign)
    return path


NOT_THERE = [
    pytest.param(kind, argv_id, argv, id=f"{argv_id}-{kind}")
    for argv_id, argv, _ in INPUTS
    for kind in ("missing", "directory", "empty")
    # appending to a file that is not there starts it, as ``>>`` does
    if (argv_id, kind) != ("record --append", "missing")
]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A capture with a catalog and two DC lanes (what explain and diff read)."""
    f = HandFleet(tmp_path_factory.mktemp("fleet") / "fleet.kvrcap", block_size=64)
    f.store(0, list(range(128)))
    f.open()
    return f.close()


def _argv(argv: list[str], path: Path, out: Path, fleet: Path) -> list[str]:
    slots = {"{in}": str(path), "{out}": str(out), "{fleet}": str(fleet)}
    return [slots.get(a, a) for a in argv]


@pytest.mark.parametrize("kind,argv_id,argv", NOT_THERE)
def test_a_missing_directory_or_empty_input(
    kind: str, argv_id: str, argv: list[str], tmp_path: Path, fleet: Path
) -> None:
    path = _bad(kind, tmp_path, b"")
    before = snapshot_tree(tmp_path)
    out = tmp_path / "out"
    code, _, err = cli_run(*_argv(argv, path, out, fleet))
    assert code == 3 and one_line(err), (kind, err)
    assert str(path) in err or path.name in err, err
    assert snapshot_tree(tmp_path) == before  # nothing created, nothing touched


#: bytes in no format cbi1kit reads: not a capture's, CBI1's or CKF1's magic, no JSON, not blank
foreign_bytes = (
    st.sampled_from([PNG, b"\x00" * 64, b"\xff" * 3, b"\x1c"]) | st.binary(min_size=1)
).filter(
    lambda b: (
        bool(b.strip())
        and b.lstrip()[:1] not in (b"{", b"[")
        and not b.startswith((b"CBI1", b"CKF1", FILE_MAGIC[:6]))
    )
)


@settings(relaxed, max_examples=12)
@given(foreign=foreign_bytes)
@pytest.mark.parametrize(
    "argv_id,argv,foreign_code",
    [i for i in INPUTS if i[0] != "demo --data"],  # a folder: a file there is the "empty" case
    ids=[i[0] for i in INPUTS if i[0] != "demo --data"],
)
def test_foreign_bytes(
    argv_id: str, argv: list[str], foreign_code: int, foreign: bytes, fleet: Path
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = _bad("foreign", root, foreign)
        before = snapshot_tree(root)
        out = root / "out"
        argv = _argv(argv, path, out, fleet)
        code, out_text, err = cli_run(*argv)
        assert code == foreign_code, (argv_id, foreign, code, err)
        assert one_line(err), (argv_id, foreign, err)
        if argv_id == "inspect":  # shown as a (broken) frame on stdout, then refused
            assert "header.magic" in out_text and "unrecognised input" in err
        assert snapshot_tree(root) == before


# ----------------------------------------------------- certificate and key files: usage, at once

#: (id, argv with {in} for the bad file, {out} for a fresh output, {cert} and {key} for a good
#: certificate and key, {other} for a good PEM of the other kind than {in} should hold)
TLS_FILES = [
    ("record --ca-cert", ["record", "127.0.0.1:1", "-o", "{out}", "--ca-cert", "{in}"], "key"),
    (
        "record --client-cert",
        ["record", "127.0.0.1:1", "-o", "{out}", "--client-cert", "{in}", "--client-key", "{key}"],
        "key",
    ),
    (
        "record --client-key",
        ["record", "127.0.0.1:1", "-o", "{out}", "--client-cert", "{cert}", "--client-key", "{in}"],
        "cert",
    ),
    ("serve --tls-cert", ["serve", "--tls-cert", "{in}", "--tls-key", "{key}"], "key"),
    ("serve --tls-key", ["serve", "--tls-cert", "{cert}", "--tls-key", "{in}"], "cert"),
    (
        "serve --client-ca",
        ["serve", "--tls-cert", "{cert}", "--tls-key", "{key}", "--client-ca", "{in}"],
        "key",
    ),
]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _tls_argv(argv: list[str], path: Path, out: Path, pki: Pki) -> list[str]:
    slots = {
        "{in}": str(path),
        "{out}": str(out),
        "{cert}": str(pki.client_cert),
        "{key}": str(pki.client_key),
    }
    if argv[0] == "serve":
        slots.update({"{cert}": str(pki.server_cert), "{key}": str(pki.server_key)})
        argv = [*argv, "--duration", "0.2"]
    return [slots.get(a, a) for a in argv]


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "foreign", "other PEM"])
@pytest.mark.parametrize("argv_id,argv,other", TLS_FILES, ids=[t[0] for t in TLS_FILES])
def test_a_certificate_or_key_file_that_cannot_be_used_is_a_usage_error(
    kind: str, argv_id: str, argv: list[str], other: str, tmp_path: Path, pki: Pki
) -> None:
    """Exit 2 and one line naming the file, before any connection or output: not a handshake
    failing until the recorder gives up, not a server that never serves."""
    if kind == "other PEM":  # a key where a certificate belongs, and the other way round
        path = tmp_path / "input.pem"
        path.write_bytes((pki.client_key if other == "key" else pki.ca).read_bytes())
    else:
        path = _bad(kind, tmp_path, PNG)
    before = snapshot_tree(tmp_path)
    code, out, err = cli_run(*_tls_argv(argv, path, tmp_path / "out", pki))
    assert code == 2 and one_line(err), (argv_id, kind, err)
    assert str(path) in err and argv_id.split()[1] in err, err
    assert out == "" and snapshot_tree(tmp_path) == before


@settings(relaxed, max_examples=10)
@given(foreign=foreign_bytes)
def test_foreign_bytes_as_a_certificate(foreign: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _bad("foreign", Path(tmp), foreign)
        code, _, err = cli_run("record", "127.0.0.1:1", "--list", "--ca-cert", str(path))
        assert code == 2 and one_line(err) and "holds no PEM certificate" in err, err


def test_a_key_that_is_not_the_certificates_and_options_that_go_together(
    tmp_path: Path, pki: Pki
) -> None:
    record = ["record", "127.0.0.1:1", "-o", str(tmp_path / "out")]
    cases = [
        (
            [*record, "--client-cert", str(pki.client_cert), "--client-key", str(pki.server_key)],
            "is not the private key of",
        ),
        ([*record, "--client-cert", str(pki.client_cert)], "go together"),
        ([*record, "--client-key", str(pki.client_key)], "go together"),
        (["serve", "--client-ca", str(pki.ca)], "needs --tls-cert and --tls-key"),
        (["serve", "--tls-key", str(pki.server_key)], "go together"),
        ([*record, "--authority", "a b"], "is not a host"),
    ]
    for argv, why in cases:
        code, _, err = cli_run(*argv)
        assert code == 2 and one_line(err) and why in err, (argv, err)
    assert list(tmp_path.iterdir()) == []


#: (id, argv writing {out}); each must refuse an existing {out} without --force
OUTPUTS = [
    ("simulate", ["simulate", str(TRACE), "-o", "{out}", "--limit", "20"]),
    ("export", ["export", str(SAMPLE), "-o", "{out}"]),
    ("export --dataset", ["export", str(SAMPLE), "-o", "{out}", "--dataset"]),
    ("fleet convert", ["fleet", "convert", str(SAMPLE), "-o", "{out}"]),
    ("report", ["report", str(SAMPLE), "-o", "{out}", "--no-notebooks"]),
    ("record", ["record", "127.0.0.1:1", "-o", "{out}", "--quiet", "--timeout", "0.2"]),
]


@pytest.mark.parametrize("shape", ["file", "folder"])
@pytest.mark.parametrize("argv_id,argv", OUTPUTS, ids=[o[0] for o in OUTPUTS])
def test_an_existing_output_is_left_alone(
    shape: str, argv_id: str, argv: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    if shape == "file":
        out.write_bytes(b"precious")
    else:
        out.mkdir()
        (out / "frames.parquet").write_bytes(b"precious")
        (out / "index.html").write_bytes(b"precious")
    before = snapshot_tree(tmp_path)
    code, _, err = cli_run(*(a.replace("{out}", str(out)) for a in argv))
    assert code in (2, 3) and one_line(err), err
    assert snapshot_tree(tmp_path) == before


# ---------------------------------------------------------------- readers: only typed errors

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
update_fields = st.fixed_dictionaries(
    {},
    optional={
        name: json_values
        | st.sampled_from([STREAM.messages[1].payload.hex(), "AAAA", -1, 2**64, "1e999"])
        for name in (
            "protocolVersion",
            "relay",
            "producer",
            "baseSequence",
            "sequence",
            "sendTsUs",
            "kind",
            "payload",
            "contractMarker",
        )
    },
)


def _typed_only(run: Callable[[], object]) -> None:
    """Run ``run``; a :mod:`cbi1kit.errors` type is an answer, anything else fails the test."""
    with contextlib.suppress(Cbi1kitError):
        run()


@relaxed
@given(objects=st.lists(update_fields | json_values, max_size=4), glue=st.sampled_from(["", "\n"]))
def test_grpcurl_json_of_any_shape(objects: list[object], glue: str) -> None:
    text = glue.join(json.dumps(o) for o in objects).encode()
    _typed_only(lambda: list(read_grpcurl_json(text)))


@relaxed
@given(blob=st.binary(max_size=256) | st.sampled_from([m.payload for m in STREAM.messages]))
def test_bare_frames_of_any_bytes(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.bin"
        path.write_bytes(blob)
        _typed_only(lambda: list(read_cbi1_files([path])))
        _typed_only(lambda: list(read_frames(path)))


trace_lines = st.lists(
    st.builds(
        json.dumps,
        st.fixed_dictionaries(
            {},
            optional={
                k: json_values | st.integers(min_value=-5, max_value=10**6)
                for k in ("timestamp", "input_length", "output_length", "hash_ids")
            },
        ),
    )
    | st.text(max_size=20),
    max_size=5,
)


@relaxed
@given(lines=trace_lines)
def test_traces_of_any_lines(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_text("\n".join(lines))
        _typed_only(lambda: read_mooncake(path))


_MESSAGES = {
    "FilterUpdate": (pb.FilterUpdate, validate_filter_update),
    "RelayInfo": (pb.RelayInfo, validate_relay_info),
    "KvPoolCatalogUpdate": (pb.KvPoolCatalogUpdate, validate_catalog_update),
}


def _mutated(raw: bytes) -> st.SearchStrategy[bytes]:
    return st.builds(
        lambda i, b: raw[:i] + bytes([b]) + raw[i + 1 :],
        st.integers(0, max(0, len(raw) - 1)),
        st.integers(0, 255),
    )


@relaxed
@given(
    kind=st.sampled_from(sorted(_MESSAGES)),
    raw=st.binary(max_size=96)
    | st.sampled_from([m.SerializeToString() for m in STREAM.messages]).flatmap(_mutated),
)
def test_relay_messages_of_any_bytes(kind: str, raw: bytes) -> None:
    """Bytes that parse as the message (protobuf accepts a lot) go through its validation; a
    FilterUpdate also through the CBI1 decode of its payload."""
    cls, validate = _MESSAGES[kind]
    try:
        message = cls.FromString(raw)
    except Exception:  # protobuf's own DecodeError: callers map it (rule relay-protobuf-decode)
        return
    _typed_only(lambda: validate(message))
    if kind == "FilterUpdate":
        _typed_only(lambda: frame_from_filter_update(message))


_OPEN = json.dumps({"target": "t", "method": WATCH_KV_POOL_CATALOG_METHOD}).encode()
#: a STREAM_OPEN body naming the catalog: the messages after it on its stream are catalog updates
CATALOG_OPEN = len(_OPEN).to_bytes(4, "little") + _OPEN


@relaxed
@given(
    records=st.lists(
        st.tuples(
            st.sampled_from(list(RecordType)),
            st.integers(0, 3),
            st.binary(max_size=48) | st.sampled_from([b"{}", b"\x02\x00\x00\x00{}", CATALOG_OPEN]),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_capture_records_of_every_type_with_any_body(
    records: list[tuple[RecordType, int, bytes]],
) -> None:
    """Checksum-valid records of every type, with arbitrary bodies on any stream (the real one
    is stream 1), between the messages of a valid stream: every reader reads on."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.kvrcap"
        with CaptureWriter(path) as w:
            sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
            for m in STREAM.messages[:2]:
                w.message(sid, m.SerializeToString())
            for rtype, stream, body in records:
                w.write(rtype, body, stream_id=stream)
            for m in STREAM.messages[2:]:
                w.message(sid, m.SerializeToString())
        _typed_only(lambda: list(read_capture(path)))
        items = list(read_capture(path, damage="report"))
        assert sum(not hasattr(i, "damage") for i in items) >= 2  # what lay before is kept
        _typed_only(lambda: list(read_catalog(path, damage="report")))
        _typed_only(lambda: list(read_capture_items(path, damage="report")))
        _typed_only(lambda: replay(path))
        _typed_only(lambda: global_view(path, at="+1s"))
        _typed_only(lambda: frames_table(path).collect())
        code, _, err = cli_run("replay", str(path), "--no-progress")
        assert code in (0, 1) and "Traceback" not in err


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupted command ends as a shell reports SIGINT, without a traceback."""
    from cbi1kit.analysis._capture import Capture

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Capture, "replay", interrupted)
    code, _, err = cli_run("replay", str(SAMPLE), "--no-progress")
    assert code == 130 and one_line(err) and "interrupted" in err

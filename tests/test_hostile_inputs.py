"""Hostile and unlucky input (#13): whatever a capture's control records hold, every reader and
the CLI answer with a typed error or a report, never a crash.

STREAM_OPEN / STREAM_CLOSE records are written with a valid record checksum around arbitrary
bodies (empty, short, wrong JSON types, deep nesting, thousand-digit integers, bytes), between
the messages of an otherwise valid stream.
"""

from __future__ import annotations

import contextlib
import json
import struct
import tempfile
from pathlib import Path

import pytest
from cliutil import cli_run, one_line
from hypothesis import HealthCheck, given, settings, strategies as st
from test_stream_roundtrip import Stream, build_stream

from cbi1kit.analysis import export_parquet, frames_table, replay
from cbi1kit.capture import CaptureReader, CaptureWriter, RecordType, read_capture
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD
from cbi1kit.data import delta_frame, mooncake_trace, sample_capture
from cbi1kit.errors import CaptureError, Cbi1kitError

STREAM = build_stream(deltas=6)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
open_meta = st.fixed_dictionaries(
    {},
    optional={
        "target": json_values,
        "method": json_values,
        "metadata": json_values,
        "info": json_values,
    },
)
SPECIAL = [
    b"",
    b"\x01",
    b"{}",
    b"[" * 5000 + b"]" * 5000,
    b'{"status_code": ' + b"9" * 5000 + b"}",
    b"\xff\xfe\x00",
]


def _open_body(meta: object) -> bytes:
    raw = json.dumps(meta).encode()
    return struct.pack("<I", len(raw)) + raw


bodies = (
    st.sampled_from(SPECIAL)
    | st.binary(max_size=64)
    | open_meta.map(_open_body)
    | json_values.map(lambda v: json.dumps(v).encode())
)


def _capture(path: Path, stream: Stream, open_body: bytes, close_body: bytes) -> Path:
    with CaptureWriter(path) as w:
        sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
        half = len(stream.messages) // 2
        for m in stream.messages[:half]:
            w.message(sid, m.SerializeToString())
        w.write(RecordType.STREAM_OPEN, open_body, stream_id=90)
        w.write(RecordType.STREAM_CLOSE, close_body, stream_id=90)
        for m in stream.messages[half:]:
            w.message(sid, m.SerializeToString())
        w.close_stream(sid)
    return path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(open_body=bodies, close_body=bodies)
def test_control_records_with_any_body_never_crash_a_reader(
    open_body: bytes, close_body: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _capture(Path(tmp) / "c.kvrcap", STREAM, open_body, close_body)
        # every intact message of the stream is read, whatever the foreign stream's records say
        items = list(read_capture(path, damage="report"))
        frames = [i for i in items if not hasattr(i, "damage")]
        assert len(frames) == len(STREAM.messages)
        with contextlib.suppress(CaptureError):  # raise mode: only the typed error
            list(read_capture(path))
        assert replay(path).frames >= len(STREAM.messages)
        assert frames_table(path).collect().height >= len(STREAM.messages)
        export_parquet(path, Path(tmp) / "tables")
        for command in ("replay", "inspect", "stats"):
            code, _, err = cli_run(command, str(path), "--no-progress")
            assert code in (0, 1), (command, err)
            assert "Traceback" not in err and len(err.strip().splitlines()) <= 1


@pytest.mark.parametrize("body", SPECIAL, ids=lambda b: repr(b[:12]))
def test_an_unreadable_stream_open_is_damage_at_its_record(body: bytes, tmp_path: Path) -> None:
    path = _capture(tmp_path / "c.kvrcap", STREAM, body, b"{}")
    damages = [i for i in read_capture(path, damage="report") if hasattr(i, "damage")]
    with CaptureReader(path) as reader:
        opened = next(
            r for r in reader.records() if r.type is RecordType.STREAM_OPEN and r.stream_id == 90
        )
    assert damages and damages[0].error.variant == "Malformed"
    err = damages[0].error
    assert (err.record_index, err.offset) == (opened.index, opened.offset)
    assert "STREAM_OPEN" in str(err)
    with pytest.raises(CaptureError) as info:
        list(read_capture(path))
    assert isinstance(info.value, Cbi1kitError) and info.value.offset is not None


@pytest.mark.parametrize("jump", [2**63 - 1, 2**63, 2**64 - 16])
def test_a_huge_record_number_jump_is_bounded_damage(jump: int, tmp_path: Path) -> None:
    """A checksum-valid record claiming number 2**63 or more: damage at that record, and no
    more records "lost" than the file could hold; no OverflowError anywhere."""
    path = tmp_path / "jump.kvrcap"
    with CaptureWriter(path) as w:
        sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
        for m in STREAM.messages[:3]:
            w.message(sid, m.SerializeToString())
        w._next_index = jump  # the writer numbers the next record as the hostile file does
        for m in STREAM.messages[3:]:
            w.message(sid, m.SerializeToString())
    damages = [i for i in read_capture(path, damage="report") if hasattr(i, "damage")]
    assert damages and f"record says it is number {jump}" in str(damages[0].error)
    assert 0 <= damages[0].frames <= path.stat().st_size // 48 + 1
    assert replay(path).frames < path.stat().st_size
    frames_table(path).collect()
    code, _, err = cli_run("replay", str(path), "--no-progress")
    assert code == 1 and "Traceback" not in err


GRPCURL_HOSTILE = {
    "huge-integer": b'{"sequence": ' + b"9" * 5000 + b"}",
    "deep-nesting": b'{"relay": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "binary": bytes(range(256)),
}


@pytest.mark.parametrize("content", GRPCURL_HOSTILE.values(), ids=GRPCURL_HOSTILE)
def test_hostile_json_dumps_give_typed_errors(content: bytes, tmp_path: Path) -> None:
    from cbi1kit.capture import read_frames, read_grpcurl_json

    path = tmp_path / "dump.json"
    path.write_bytes(content)
    with pytest.raises(CaptureError):
        list(read_frames(path))
    with pytest.raises(CaptureError):
        list(read_grpcurl_json(content))
    for command, extra in (("replay", []), ("export", ["-o", str(tmp_path / "out")])):
        code, _, err = cli_run(command, str(path), "--no-progress", *extra)
        assert code in (1, 3), (command, err)  # invalid or unreadable, never 0
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 1


_GOOD_LINE = {"timestamp": 1, "input_length": 10, "output_length": 3, "hash_ids": [1]}
TRACE_HOSTILE = {
    "png": b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
    "deep-line": b'{"timestamp": 0}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "huge-integer": b'{"timestamp": ' + b"9" * 5000 + b"}\n",
    # past what the simulator's i64 arrays and nanosecond clock hold: a traceback in numpy
    **{
        f"{field}-2**64": json.dumps(
            {**_GOOD_LINE, field: [2**64 - 1] if field == "hash_ids" else 2**64 - 1}
        ).encode()
        + b"\n"
        for field in _GOOD_LINE
    },
}


@pytest.mark.parametrize("content", TRACE_HOSTILE.values(), ids=TRACE_HOSTILE)
def test_hostile_traces_name_their_line_and_create_nothing(content: bytes, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(content)
    out = tmp_path / "sim.kvrcap"
    # a first line that is no JSON is another format (exit 3); a bad value, a bad line (exit 1)
    expected = 3 if content.startswith(b"\x89PNG") else 1
    code, _, err = cli_run("simulate", str(trace), "-o", str(out), "--no-progress")
    assert code == expected and f"{trace}:" in err and "Traceback" not in err, err
    assert not out.exists()
    report = tmp_path / "report"
    sample = sample_capture()
    code, _, err = cli_run(
        "report", str(sample), "-o", str(report), "--trace", str(trace), "--no-notebooks"
    )
    assert code == expected and "Traceback" not in err and not report.exists()


def test_replay_reads_on_past_a_message_that_is_no_filter_update(tmp_path: Path) -> None:
    """It used to stop at the first intact message that does not parse, damage="report" or not;
    now that message is the rulebook's relay-protobuf-decode violation, and the stream's next
    snapshot starts a new session."""
    path = tmp_path / "junk.kvrcap"
    with CaptureWriter(path) as w:
        sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
        for m in STREAM.messages[:3]:
            w.message(sid, m.SerializeToString())
        w.message(sid, b"\xff\xff\xff")  # a truncated varint: no protobuf message
        for m in STREAM.messages:
            w.message(sid, m.SerializeToString())
    report = replay(path)
    assert report.frames == 3 + 1 + len(STREAM.messages)
    assert [v.rule for v in report.violations] == ["relay-protobuf-decode"]
    assert report.violations[0].frame_index == 3
    assert report.final_sequence == STREAM.final_sequence  # the second stream replayed whole
    table = frames_table(path).collect()
    assert table["validation_rule"].to_list()[3] == "relay-protobuf-decode"


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "{}"],
        ["inspect", "{}"],
        ["stats", "{}"],
        ["view", "{}"],
        ["diff", "{}"],
        ["explain", "{}", "--model", "m", "--tokens", "1"],
        ["export", "{}", "-o", "{out}"],
        ["export", "--dataset", "{}", "-o", "{out}"],
        ["report", "{}", "-o", "{out}", "--no-notebooks"],
        ["fleet", "convert", "{}", "-o", "{out}"],
        # traces and token files are inputs as well
        ["simulate", "{}", "-o", "{out}"],
        ["report", "SAMPLE", "-o", "{out}", "--trace", "{}", "--no-notebooks"],
        ["explain", "SAMPLE", "--model", "m", "--trace", "{}", "--request", "0"],
        ["explain", "SAMPLE", "--model", "m", "--tokens-file", "{}"],
        ["serve", "--trace", "{}", "--duration", "1"],
    ],
    ids=lambda argv: " ".join(a for a in argv if "{" not in a),
)
def test_a_pipe_or_device_is_refused_before_it_is_opened(argv: list[str], tmp_path: Path) -> None:
    """A FIFO (its first bytes would be lost to the format check, and opening one with no
    writer waits for a writer) and a device are exit 3 at once, naming what they are."""
    import os
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = tmp_path / "out"

    def unblock() -> None:  # should the command open the pipe after all, it reads an end
        if not done.wait(20):
            with open(fifo, "wb"):
                pass

    done = threading.Event()
    guard = threading.Thread(target=unblock, daemon=True)
    guard.start()
    try:
        for source, kind in ((fifo, "a pipe"), (Path("/dev/null"), "a device")):
            sample = str(sample_capture())
            args = [sample if a == "SAMPLE" else a.format(source, out=out) for a in argv]
            code, _, err = cli_run(*args)
            assert code == 3, err
            assert one_line(err) and f"not a regular file ({kind})" in err, err
            assert not out.exists()
    finally:
        done.set()
        guard.join()


@pytest.mark.parametrize("command", ["replay", "stats", "view", "diff", "export"])
def test_json_whose_first_object_is_no_filter_update_is_a_foreign_file(
    command: str, tmp_path: Path
) -> None:
    """JSON is a grpcurl dump when its first object is a FilterUpdate; other JSON is a file
    cbi1kit does not read: exit 3 on one line (protobuf's own error has several), as a PNG."""
    foreign = tmp_path / "manifest.json"
    foreign.write_text('{"a": 1}\n')
    out = tmp_path / "out"
    extra = ["-o", str(out)] if command == "export" else []
    code, _, err = cli_run(command, str(foreign), *extra)
    assert code == 3 and one_line(err), err
    assert 'no field named "a"' in err and "record 0 at byte offset 0" in err
    assert not out.exists()


def test_an_output_that_is_a_pipe_or_device_is_never_replaced(tmp_path: Path) -> None:
    """``--force`` overwrites a file; a pipe or device at the output path is refused (exit 3)
    and left as it is (a capture's atomic write had replaced /dev/full with a file)."""
    import os
    import stat

    from cbi1kit._files import claim_outputs
    from cbi1kit.errors import OutputError

    fifo = tmp_path / "out.kvrcap"
    os.mkfifo(fifo)
    trace = mooncake_trace()
    code, _, err = cli_run("simulate", str(trace), "-o", str(fifo), "--force", "--limit", "3")
    assert code == 3 and one_line(err) and "not a regular file" in err, err
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    tables = tmp_path / "tables"
    tables.mkdir()
    os.mkfifo(tables / "images.parquet")
    code, _, err = cli_run("export", str(trace), "-o", str(tables), "--force")
    assert code == 3 and one_line(err), err
    assert sorted(p.name for p in tables.iterdir()) == ["images.parquet"]
    with pytest.raises(OutputError) as info:
        claim_outputs([Path("/dev/null")], overwrite=True)
    assert info.value.variant == "NotAFile"


def test_an_output_that_is_a_folder_or_in_no_folder_is_exit_3_and_makes_nothing(
    tmp_path: Path,
) -> None:
    """``-o`` naming a folder is refused as one (not "exists, use --force", which then failed),
    and ``-o`` in a folder that does not exist is refused, not made into folders (a typo)."""
    trace = mooncake_trace()
    folder = tmp_path / "dd"
    folder.mkdir()
    for force in ([], ["--force"]):
        code, _, err = cli_run("simulate", str(trace), "-o", str(folder), *force, "--limit", "3")
        assert code == 3 and one_line(err) and "is a folder: write to a file" in err, err
        missing = tmp_path / "no" / "such" / "x.kvrcap"
        code, _, err = cli_run("simulate", str(trace), "-o", str(missing), *force, "--limit", "3")
        assert code == 3 and one_line(err) and "no such folder" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dd"] and not any(folder.iterdir())


def test_a_dataset_takes_captures_only_and_writes_nothing_for_another_file(tmp_path: Path) -> None:
    """Bare CBI1 frames or a grpcurl dump given to the dataset are refused before anything is
    written (fleet convert had added a frames row and a sources entry for them, for good)."""
    from cbi1kit.analysis import export_dataset
    from cbi1kit.fleet._convert import convert_graph

    frames = delta_frame()
    out = tmp_path / "ds"
    for argv in (["fleet", "convert"], ["export", "--dataset"]):
        code, _, err = cli_run(*argv, str(frames), "-o", str(out))
        assert code == 3 and one_line(err) and "not a kvrcap capture" in err, err
        assert not out.exists()
    for call in (export_dataset, convert_graph):
        with pytest.raises(CaptureError, match="not a kvrcap capture"):
            call([frames], out)
        assert not out.exists()


def test_a_lane_never_installed_names_the_violation_that_kept_it_out() -> None:
    """``stats --seed`` other than the capture's: every snapshot breaks the format rule, and
    the error says so, not only that no snapshot was installed."""
    sample = sample_capture()
    code, _, err = cli_run("stats", str(sample), "--seed", "0", "--buckets", "4096")
    assert code == 1 and one_line(err), err
    assert "no snapshot was ever installed" in err and "FormatMismatch" in err


def test_serve_names_what_is_wrong_with_its_options_and_trace(tmp_path: Path) -> None:
    """A CKF capacity the options ask for that upstream's config refuses is a usage error
    (exit 2, as simulate's); a trace that is a folder is not 'no such file'."""
    code, _, err = cli_run("serve", "--expected-blocks", "100000000000", "--duration", "1")
    assert code == 2 and one_line(err) and "CapacityOverflow" in err, err
    code, _, err = cli_run("serve", "--trace", str(tmp_path), "--duration", "1")
    assert code == 3 and one_line(err) and "not a regular file" in err, err


def test_a_question_a_damaged_capture_cannot_answer_is_its_damage(tmp_path: Path) -> None:
    """No catalog, no such lane, a sequence not replayed: a usage error (exit 2) for a whole
    capture, but when the capture is damaged the damage may be why: exit 1, naming it."""
    sample = sample_capture()
    data = sample.read_bytes()
    cut = tmp_path / "cut.kvrcap"
    cut.write_bytes(data[:100])
    flipped = tmp_path / "flipped.kvrcap"
    mid = len(data) // 2
    flipped.write_bytes(data[:mid] + bytes([data[mid] ^ 0x10]) + data[mid + 1 :])
    asked = [  # each a question the damage may have taken: no catalog, lane or moment
        (cut, ["explain", "{}", "--model", "m", "--tokens", "1"], "Truncated"),
        (cut, ["view", "{}", "--model", "m"], "Truncated"),
        (flipped, ["diff", "{}", "--dc", "nope"], "body checksum mismatch"),
        (flipped, ["stats", "{}", "--dc", "nope", "--fpr-probes", "0"], "body checksum mismatch"),
        (flipped, ["stats", "{}", "--at", "3000", "--fpr-probes", "0"], "body checksum mismatch"),
    ]
    for capture, argv, damage in asked:
        code, _, err = cli_run(*(a.format(capture) for a in argv))
        assert code == 1 and one_line(err), (argv, err)
        assert f"{capture} is damaged" in err and damage in err, (argv, err)
    for argv in (["stats", "--dc", "nope"], ["diff", "--dc", "nope"]):  # whole: usage errors
        code, _, err = cli_run(argv[0], str(sample), *argv[1:])
        assert code == 2 and one_line(err) and "damaged" not in err, err


def test_inspect_goes_on_past_a_file_it_cannot_read(tmp_path: Path) -> None:
    """Several files: one that cannot be read is one line on stderr and the worst exit code,
    and the rest are still inspected (it stopped at the first)."""
    good = delta_frame()
    code, out, err = cli_run("inspect", str(tmp_path / "missing.cbi1"), str(good))
    assert code == 3 and one_line(err) and "missing.cbi1" in err, err
    assert f"== {good}" in out and "valid: decodes cleanly" in out


def test_grpc_core_logs_nothing_beside_the_one_error_line() -> None:
    """gRPC's C core wrote its own failure (an E1201 add_port.cc line) to stderr beside the
    error: off unless GRPC_VERBOSITY says otherwise. A process of its own: the core reads the
    setting once, when it starts."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    res = subprocess.run(
        [sys.executable, "-m", "cbi1kit", "serve", "--host", "999.1.1.1", "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert res.returncode == 3 and one_line(res.stderr), res.stderr
    assert res.stderr.startswith("cbi1kit serve: error: cannot serve on 999.1.1.1")


def test_an_epoch_past_the_simulated_clocks_half_is_a_usage_error(tmp_path: Path) -> None:
    """Receive times are the epoch plus the trace's time, in i64 ns: an epoch of 2**63 - 1 was
    taken, and the frames table showed 1677 (wrapped)."""
    trace = mooncake_trace()
    out = tmp_path / "sim.kvrcap"
    code, _, err = cli_run(
        "simulate", str(trace), "-o", str(out), "--limit", "3", "--epoch-unix-ns", str(1 << 62)
    )
    assert code == 2 and one_line(err) and "epoch_unix_ns" in err, err
    assert not out.exists()

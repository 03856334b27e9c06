"""``cbi1kit layout --wireshark``, run by Debian's tshark (#29): the plugin's XXH3 against
python-xxhash in tshark's own Lua; every FilterUpdate of the sample capture against the frames
table and its envelope, every record against ``CaptureReader``; every golden CBI1 vector against
upstream's expected decode or rule; a flipped body byte; live gRPC of ``cbi1kit serve`` ->
``cbi1kit record`` captured on loopback; the file reader under valgrind. Skipped where tshark
is missing (the live test: dumpcap, root; valgrind); under CI=true that fails."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import xxhash
from cliutil import cli_run, one_line

import cbi1kit as ck
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture import CaptureReader, CaptureWriter
from cbi1kit.capture._layout import RECORD_HEADER, RecordType
from cbi1kit.data import sample_capture
from cbi1kit.relay._session import SUBSCRIBE_METHOD
from cbi1kit.relay._wireshark import _FRAME_RULES, PROTO_DIR
from cbi1kit.wire import FilterFormat, decode, encode_delta
from cbi1kit.wire._format import LEGACY_MAGIC, MAGIC
from cbi1kit.wire._layout import DELTA_IMAGE, DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX
from cbi1kit.wire._rules import rule_for

ROOT = Path(__file__).parents[1]
VECTORS = ROOT / "tests" / "vectors" / "cbi1"
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
#: every CBI1 layout field but the magic, as tshark names it
CBI1_FIELDS = [
    f"cbi1.{f.path}" for layout in (HEADER, SNAPSHOT_PREFIX, DELTA_PREFIX) for f in layout
][1:]
RECORD_FIELDS = [f"kvrcap.{f.path}" for f in RECORD_HEADER][1:]
#: the expert of each rule the plugin checks, and the kvrcap record's two checks
RULE_EXPERTS = {
    rule: "cbi1.rule." + rule.removeprefix("cbi1-").replace("-", "_") for rule in _FRAME_RULES
}
CHECK_EXPERTS = ["kvrcap.check.header", "kvrcap.check.body"]
#: the frames table's column of every CBI1 field, and the envelope's that must agree with it
FRAMES_COLUMNS = {
    "header.wire_version": "cbi1_wire_version",
    "header.flags": "cbi1_flags",
    "header.fingerprint_bits": "cbi1_fingerprint_bits",
    "header.slots_per_bucket": "cbi1_slots",
    "header.format_version": "cbi1_format_version",
    "header.seed": "cbi1_seed",
    "header.bucket_count": "cbi1_bucket_count",
    "header.dc_id": "cbi1_dc_id",
    "header.epoch": "cbi1_epoch",
    "header.body_checksum": "cbi1_checksum",
    "snapshot.chunk_index": "chunk_index",
    "snapshot.chunk_count": "chunk_count",
    "snapshot.bucket_offset": "bucket_offset",
    "delta.base_epoch": "base_epoch",
    "delta.image_count": "image_count",
}
ENVELOPE_COLUMNS = {
    "header.fingerprint_bits": "ckf_fingerprint_bits",
    "header.slots_per_bucket": "ckf_slots_per_bucket",
    "header.format_version": "ckf_format_version",
    "header.seed": "ckf_seed",
    "header.bucket_count": "ckf_bucket_count",
    "header.dc_id": "dc_id",
    "header.epoch": "sequence",
    "delta.base_epoch": "base_sequence",
}
KIND_FLAGS = {"SNAPSHOT_CHUNK": 1, "DELTA": 2}  # FilterUpdateKind's name -> CBI1 flags


def _tool(name: str, why: str) -> str:
    found = shutil.which(name)
    if found is None:
        if CI:
            pytest.fail(f"{name} is missing under CI=true (make tshark installs it)")
        pytest.skip(f"{name} is missing: apt-get install {why} (make test does, as root)")
    return found


@pytest.fixture(scope="module")
def tshark() -> str:
    return _tool("tshark", "tshark")


@pytest.fixture(scope="module")
def plugin(tshark: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wireshark")
    code, stdout, err = cli_run("layout", "--wireshark", str(out))
    assert code == 0, err
    assert str(PROTO_DIR) in stdout
    return out / "cbi1.lua"


def _run(argv: Sequence[str], tmp: Path, timeout: float = 120, **env_vars: str) -> str:
    """``argv`` (a tshark line) with a home of its own: no personal plugin or preference."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), **env_vars}
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "Lua" not in done.stderr and "rror" not in done.stderr, done.stderr
    return done.stdout


def _tshark_argv(tshark: str, plugin: Path, *args: str) -> list[str]:
    search = f'uat:protobuf_search_paths:"{PROTO_DIR}","TRUE"'
    return [tshark, "-X", f"lua_script:{plugin}", "-o", search, *args]


def _fields(
    tshark: str, plugin: Path, source: Path, names: Sequence[str], tmp: Path, *args: str
) -> list[dict[str, list[str]]]:
    """Every packet of ``source`` as {field: its values}: ``-T fields``, every occurrence."""
    argv = _tshark_argv(tshark, plugin, "-r", str(source), *args, "-T", "fields")
    argv += ["-E", "occurrence=a", "-E", "aggregator=|", "-E", "separator=/t"]
    for name in names:
        argv += ["-e", name]
    rows = []
    for line in _run(argv, tmp).splitlines():
        cells = line.split("\t")
        rows.append({n: c.split("|") if c else [] for n, c in zip(names, cells, strict=True)})
    return rows


def _int(text: str) -> int:
    return int(text, 0)


def _one(row: dict[str, list[str]], name: str) -> int | None:
    values = row[name]
    assert len(values) <= 1, (name, values)
    return _int(values[0]) if values else None


def _experts(row: dict[str, list[str]]) -> set[str]:
    return {n for n in [*RULE_EXPERTS.values(), *CHECK_EXPERTS] if row.get(n)}


# ------------------------------------------------------------------------------------ XXH3

_XXH3_CHECK = """
local xxh3 = require("cbi1kit.xxh3").xxh3_64
local dir = os.getenv("CBI1_XXH3_DIR")
local data = assert(io.open(dir .. "/data.bin", "rb")):read("*a")
local out = assert(io.open(dir .. "/hashes.txt", "w"))
for line in io.lines(dir .. "/cases.txt") do
  local off, n = line:match("(%d+) (%d+)")
  off, n = tonumber(off), tonumber(n)
  local s = data:sub(off + 1, off + n)
  local t = os.clock()
  local hi, lo = xxh3(s)
  out:write(string.format("%d %d %08x%08x %.4f\\n", off, n, hi, lo, os.clock() - t))
end
out:close()
"""


def _xxh3_lengths(rng: random.Random) -> list[int]:
    """0..300, then every block and stripe edge to ~70,000 and lengths at random between, and
    4 MiB: every length class and the long path's last-stripe cases."""
    edges = {k * 1024 + d for k in range(1, 69) for d in (-65, -64, -63, -1, 0, 1, 63, 64, 65)}
    edges |= {k * 64 + d for k in range(4, 40) for d in (-1, 0, 1)}
    spread = {rng.randrange(301, 70_001) for _ in range(200)}
    return [*range(301), *sorted(edges | spread | {70_000}), 4 << 20]


def _xxh3_cases(tmp: Path) -> list[tuple[int, int]]:
    """Random data and the (offset, length) cases a Lua XXH3 check reads from ``tmp``."""
    rng = random.Random(29)
    data = rng.randbytes((4 << 20) + 16)
    cases = [(n % 13, n) for n in _xxh3_lengths(rng)]
    (tmp / "data.bin").write_bytes(data)
    (tmp / "cases.txt").write_text("".join(f"{o} {n}\n" for o, n in cases))
    return cases


def _check_xxh3(tmp: Path, cases: list[tuple[int, int]]) -> None:
    data = (tmp / "data.bin").read_bytes()
    lines = (tmp / "hashes.txt").read_text().splitlines()
    assert len(lines) == len(cases)
    for line, (off, n) in zip(lines, cases, strict=True):
        got_off, got_n, digest, _seconds = line.split()
        assert (int(got_off), int(got_n)) == (off, n)
        assert int(digest, 16) == xxhash.xxh3_64_intdigest(data[off : off + n]), n


def test_xxh3_in_tsharks_lua_equals_python_xxhash(
    tshark: str, plugin: Path, tmp_path: Path
) -> None:
    cases = _xxh3_cases(tmp_path)
    script = tmp_path / "check.lua"
    script.write_text(_XXH3_CHECK)
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    argv = [tshark, "-X", f"lua_script:{plugin}", "-X", f"lua_script:{script}", "-r", str(empty)]
    _run(argv, tmp_path, CBI1_XXH3_DIR=str(tmp_path))
    _check_xxh3(tmp_path, cases)


@pytest.mark.parametrize("lua", ["lua5.3", "lua5.4"])
def test_xxh3_is_exact_in_the_lua_of_wireshark_4_4_on(lua: str, tmp_path: Path) -> None:
    """Wireshark 4.4 and later embed Lua 5.4 (or 5.3), which has no bit32: the plugin's XXH3
    takes the native operators there, and gives every hash python-xxhash does."""
    from importlib.resources import files

    interpreter = _tool(lua, lua)
    source = files("cbi1kit.relay").joinpath("_lua", "xxh3.lua").read_text()
    (tmp_path / "xxh3.lua").write_text(source)
    script = tmp_path / "check.lua"
    script.write_text(f'package.loaded["cbi1kit.xxh3"] = dofile(arg[1])\n{_XXH3_CHECK}')
    cases = _xxh3_cases(tmp_path)
    _run(
        [interpreter, str(script), str(tmp_path / "xxh3.lua")],
        tmp_path,
        CBI1_XXH3_DIR=str(tmp_path),
    )
    _check_xxh3(tmp_path, cases)


# ------------------------------------------------------------------------ the sample capture


@pytest.fixture(scope="module")
def sample_rows(
    tshark: str, plugin: Path, tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, list[str]]]:
    names = ["frame.time_epoch", *RECORD_FIELDS, "kvrcap.stream.method", *CBI1_FIELDS]
    names += ["cbi1.snapshot.word_count", *RULE_EXPERTS.values(), *CHECK_EXPERTS]
    tmp = tmp_path_factory.mktemp("sample")
    return _fields(tshark, plugin, sample_capture(), names, tmp)


def test_every_record_is_a_packet_timed_by_recv_unix_ns(
    sample_rows: list[dict[str, list[str]]],
) -> None:
    with CaptureReader(sample_capture()) as reader:
        records = list(reader.records(structural=True))
    assert len(sample_rows) == len(records)
    for row, rec in zip(sample_rows, records, strict=True):
        assert _one(row, "kvrcap.record.record_type") == int(rec.type)
        assert _one(row, "kvrcap.record.stream_id") == rec.stream_id
        assert _one(row, "kvrcap.record.record_index") == rec.index
        assert _one(row, "kvrcap.record.recv_unix_ns") == rec.recv_unix_ns
        assert _one(row, "kvrcap.record.recv_mono_ns") == rec.recv_mono_ns
        assert _one(row, "kvrcap.record.body_len") == len(rec.body)
        secs, frac = row["frame.time_epoch"][0].split(".")
        assert int(secs) * 10**9 + int(frac.ljust(9, "0")) == rec.recv_unix_ns
        assert not _experts(row)


def test_every_filter_update_shows_the_frames_tables_cbi1_fields(
    sample_rows: list[dict[str, list[str]]],
) -> None:
    assert set(FRAMES_COLUMNS) == {name.removeprefix("cbi1.") for name in CBI1_FIELDS}
    frames = ck.open(sample_capture()).frames.collect().sort("frame_index")
    frames = frames.with_columns(recv_ns=pl.col("recv_time").dt.epoch("ns"))
    updates = [
        r
        for r in sample_rows
        if _one(r, "kvrcap.record.record_type") == RecordType.MESSAGE
        and r["kvrcap.stream.method"] == [SUBSCRIBE_METHOD]
    ]
    assert len(updates) == frames.height > 0
    framed = 0
    for row, want in zip(updates, frames.iter_rows(named=True), strict=True):
        recv = _one(row, "kvrcap.record.recv_unix_ns")
        assert recv == want["recv_ns"]
        assert 0 <= recv - want["send_ts_us"] * 1000 < 10**9  # received after the relay sent it
        if want["kind"] not in KIND_FLAGS:  # a heartbeat: no payload, no CBI1
            assert not any(row[name] for name in CBI1_FIELDS)
            continue
        framed += 1
        for path, column in FRAMES_COLUMNS.items():
            assert _one(row, f"cbi1.{path}") == want[column], (path, want["frame_index"])
        assert _one(row, "cbi1.snapshot.word_count") == want["word_count"]
        for path, column in ENVELOPE_COLUMNS.items():
            if want[column] is not None and row[f"cbi1.{path}"]:
                assert _one(row, f"cbi1.{path}") == want[column], (path, want["frame_index"])
        assert _one(row, "cbi1.header.flags") == KIND_FLAGS[want["kind"]]
    assert framed == frames.filter(frames["kind"].is_in(list(KIND_FLAGS))).height


# ------------------------------------------------------------------------ the golden vectors

#: each upstream error's rules (a Format error is the shape's, but for the consumer's Mismatch)
VARIANT_RULES = {
    "Truncated": {"cbi1-truncated"},
    "FrameTooLarge": {"cbi1-frame-too-large"},
    "Magic": {"cbi1-magic", "cbi1-legacy-ckf1"},
    "WireVersion": {"cbi1-wire-version"},
    "Checksum": {"cbi1-checksum"},
    "Format": {"cbi1-format-shape"},
    "Flags": {"cbi1-flags"},
    "DeltaImageCount": {"cbi1-delta-length"},
    "SnapshotChunkWordCount": {"cbi1-chunk-layout"},
    "Malformed": {"cbi1-delta-length", "cbi1-delta-bucket-range", "cbi1-chunk-layout"},
}


def _cases() -> list[dict[str, Any]]:
    cases = json.loads((VECTORS / "manifest.json").read_text())["cases"]
    return [c for c in cases if c["kind"] == "decode"]


def _frame(case: dict[str, Any]) -> bytes:
    data = (VECTORS / case["file"]).read_bytes()
    return gzip.decompress(data) if case.get("file_encoding") == "gzip" else data


def _filter_update(sequence: int, payload: bytes) -> bytes:
    """A FilterUpdate carrying ``payload``, even an empty one (field 8 written explicitly)."""
    head = pb.FilterUpdate(protocol_version=1, sequence=sequence).SerializeToString()
    n, length = len(payload), b""
    while True:
        length += bytes([n & 0x7F | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return head + b"\x42" + length + payload


def _own_rule(frame: bytes) -> str | None:
    """The rule decode reports on ``frame`` held to its own seed and bucket count (a plugin has
    no consumer's format), or None."""
    from cbi1kit.errors import Cbi1Error
    from cbi1kit.wire import peek_format

    try:
        decode(peek_format(frame), frame)
    except Cbi1Error as err:
        return rule_for(err)
    return None


def _resealed(frame: bytearray) -> bytes:
    """``frame`` with its body checksum made right again."""
    at = HEADER.field("body_checksum").offset
    frame[at : at + 4] = (
        xxhash.xxh3_64_intdigest(bytes(frame[HEADER.end :])) & 0xFFFFFFFF
    ).to_bytes(4, "little")
    return bytes(frame)


def _more_frames() -> list[bytes]:
    """The rules no golden vector breaks: a bucket past the lane, a CKF1 prototype frame."""
    fmt = FilterFormat(seed=0x5EED, bucket_count=1024)
    past = bytearray(encode_delta(fmt, dc_id=7, base_epoch=4, epoch=5, images=[(3, 9), (5, 1)]))
    at = DELTA_PREFIX.end + DELTA_IMAGE.size + DELTA_IMAGE.field("bucket").offset
    past[at : at + 4] = fmt.bucket_count.to_bytes(4, "little")  # the second image's bucket
    legacy = bytearray(encode_delta(fmt, dc_id=7, base_epoch=4, epoch=5, images=[(3, 9)]))
    legacy[: len(LEGACY_MAGIC)] = LEGACY_MAGIC
    return [_resealed(past), bytes(legacy)]


@pytest.fixture(scope="module")
def vector_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vectors") / "vectors.kvrcap"
    frames = [_frame(case) for case in _cases()] + _more_frames()
    with CaptureWriter(path) as writer:
        stream = writer.open_stream("vectors", SUBSCRIBE_METHOD, b"")
        for i, frame in enumerate(frames):
            writer.message(stream, _filter_update(i, frame))
        writer.close_stream(stream)
    return path


def _check_decoded(row: dict[str, list[str]], ok: dict[str, Any]) -> None:
    """A valid vector's fields as upstream decodes them."""
    for name in ("seed", "bucket_count", "dc_id", "epoch"):
        assert _one(row, f"cbi1.header.{name}") == int(ok["header"][name]), name
    if ok["kind"] == "SnapshotChunk":
        assert _one(row, "cbi1.header.flags") == KIND_FLAGS["SNAPSHOT_CHUNK"]
        for name in ("chunk_index", "chunk_count", "bucket_offset", "word_count"):
            assert _one(row, f"cbi1.snapshot.{name}") == int(ok[name]), name
        return
    assert _one(row, "cbi1.header.flags") == KIND_FLAGS["DELTA"]
    assert _one(row, "cbi1.delta.base_epoch") == int(ok["base_epoch"])
    assert _one(row, "cbi1.delta.image_count") == ok["image_count"]
    pairs = zip(row["cbi1.image.bucket"], row["cbi1.image.word"], strict=True)
    shown = [(int(b), _int(w)) for b, w in pairs]
    assert shown == [(i["bucket"], int(i["value"])) for i in ok["images"]][: len(shown)]
    assert len(shown) == min(ok["image_count"], 64)


def test_every_golden_vector_decodes_or_is_refused_as_upstream_says(
    tshark: str, plugin: Path, vector_capture: Path, tmp_path: Path
) -> None:
    names = ["kvrcap.record.record_type", *CBI1_FIELDS, "cbi1.snapshot.word_count"]
    names += ["cbi1.image.bucket", "cbi1.image.word", *RULE_EXPERTS.values(), *CHECK_EXPERTS]
    rows = _fields(tshark, plugin, vector_capture, names, tmp_path)
    messages = [r for r in rows if _one(r, "kvrcap.record.record_type") == RecordType.MESSAGE]
    cases = _cases()
    frames = [_frame(case) for case in cases] + _more_frames()
    assert len(messages) == len(frames)
    for row, frame in zip(messages, frames, strict=True):
        rule = _own_rule(frame)
        assert [r for r, name in RULE_EXPERTS.items() if row[name]] == ([rule] if rule else [])
        assert not row["kvrcap.check.body"] and not row["kvrcap.check.header"]
    for row, case in zip(messages, cases, strict=False):
        expected, rule = case["expected"], _own_rule(_frame(case))
        error = expected.get("error", {})
        if "ok" in expected:
            _check_decoded(row, expected["ok"])
        elif error.get("format_error", {}).get("variant") != "Mismatch":  # a consumer's check
            assert rule in VARIANT_RULES[error["variant"]], case["id"]
    assert {r for row in messages for r, n in RULE_EXPERTS.items() if row[n]} == set(
        RULE_EXPERTS
    )  # every rule's check ran on some vector


# ----------------------------------------------------------------------- a flipped body byte


def test_one_flipped_body_byte_is_the_one_checksum_expert(
    tshark: str, plugin: Path, tmp_path: Path
) -> None:
    data = bytearray(sample_capture().read_bytes())
    with CaptureReader(sample_capture()) as reader:
        messages = [r for r in reader.records() if r.type is RecordType.MESSAGE]
    target = next(r for r in messages[len(messages) // 2 :] if bytes(r.body).find(MAGIC) > 0)
    payload = target.body_offset + bytes(target.body).find(MAGIC)
    word = payload + DELTA_PREFIX.end + DELTA_IMAGE.field("word").offset  # a delta's first word
    assert data[payload + HEADER.field("flags").offset] == KIND_FLAGS["DELTA"]
    data[word] ^= 0x10
    flipped = tmp_path / "flipped.kvrcap"
    flipped.write_bytes(bytes(data))
    names = ["kvrcap.record.record_index", *RULE_EXPERTS.values(), *CHECK_EXPERTS]
    rows = _fields(tshark, plugin, flipped, names, tmp_path)
    hit = {_one(r, "kvrcap.record.record_index"): _experts(r) for r in rows if _experts(r)}
    assert hit == {target.index: {RULE_EXPERTS["cbi1-checksum"], "kvrcap.check.body"}}


# ----------------------------------------------------------------------------- the CLI


def test_layout_writes_the_plugin_whole_and_never_over_a_file_unasked(tmp_path: Path) -> None:
    code, _, err = cli_run("layout", "--wireshark", str(tmp_path))
    assert code == 0, err
    first = (tmp_path / "cbi1.lua").read_text()
    code, _, err = cli_run("layout", "--wireshark", str(tmp_path))
    assert code != 0 and one_line(err) and "--force" in err
    code, _, err = cli_run("layout", "--wireshark", str(tmp_path), "--force")
    assert code == 0, err
    assert (tmp_path / "cbi1.lua").read_text() == first
    assert [p.name for p in tmp_path.iterdir()] == ["cbi1.lua"]  # no partial left
    code, _, err = cli_run("layout", "--wireshark", str(tmp_path / "nosuch"))
    assert code != 0 and one_line(err)
    code, _, err = cli_run("layout", "--wireshark", str(tmp_path), "--ksy", str(tmp_path))
    assert code == 2 and "not allowed with" in err


# ------------------------------------------------------------------------ live gRPC traffic


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Path, Path, int]]:
    """``cbi1kit serve``, a loopback capture started before ``cbi1kit record`` connects, and
    the recording: (pcap, kvrcap, port)."""
    dumpcap = _tool("dumpcap", "tshark")
    if os.geteuid() != 0:
        if CI:
            pytest.fail("capturing on loopback needs root under CI=true")
        pytest.skip("capturing on loopback needs root")
    argv = [sys.executable, "-m", "cbi1kit", "serve", "--port", "0", "--heartbeat", "0.2"]
    serve = subprocess.Popen([*argv, "--duration", "60"], stdout=subprocess.PIPE, text=True)
    pcap, kept = tmp_path / "live.pcapng", tmp_path / "live.kvrcap"
    try:
        assert serve.stdout is not None
        address = serve.stdout.readline().split(" on ")[1].split()[0]
        port = int(address.rsplit(":", 1)[1])
        capture = subprocess.Popen(
            [dumpcap, "-q", "-i", "lo", "-f", f"tcp port {port}", "-w", str(pcap)],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert capture.stderr is not None
            assert "Capturing on" in capture.stderr.readline()
            time.sleep(0.5)
            code, _, err = cli_run("record", address, "-o", str(kept), "--frames", "150")
            assert code == 0, err
            time.sleep(0.5)  # the last segments reach the capture
        finally:
            capture.send_signal(signal.SIGINT)
            capture.communicate(timeout=30)
    finally:
        serve.kill()
        serve.wait(10)
    yield pcap, kept, port


def test_live_grpc_of_a_recording_shows_the_cbi1_frames_it_stored(
    tshark: str, plugin: Path, live: tuple[Path, Path, int], tmp_path: Path
) -> None:
    pcap, kept, port = live
    header = [f"cbi1.{f.path}" for f in HEADER][1:]
    delta = [f"cbi1.{f.path}" for f in DELTA_PREFIX]
    chunk = [f"cbi1.{f.path}" for f in SNAPSHOT_PREFIX]
    names = [*header, *delta, *chunk, *RULE_EXPERTS.values()]
    rows = _fields(tshark, plugin, pcap, names, tmp_path, "-d", f"tcp.port=={port},http2")
    assert not any(_experts(r) for r in rows)
    seen = {n: [_int(v) for r in rows for v in r[n]] for n in names[: len(header + delta + chunk)]}
    frames = ck.open(kept).frames.collect().sort("frame_index")
    stored = frames.filter(frames["kind"].is_in(list(KIND_FLAGS)))
    assert stored.height > 100
    for names_of_kind, kind in ((header, None), (delta, "DELTA"), (chunk, "SNAPSHOT_CHUNK")):
        rows_of_kind = stored if kind is None else stored.filter(stored["kind"] == kind)
        for name in names_of_kind:
            want = rows_of_kind[FRAMES_COLUMNS[name.removeprefix("cbi1.")]].to_list()
            assert seen[name][: len(want)] == want, name  # (a message past the last stored)
            assert len(seen[name]) - len(want) <= 5, name


# ------------------------------------------------------------------- the reader, in valgrind

#: a collector that runs at every allocation: a callback's arguments freed mid-read (a tail
#: call) are then freed at once, where valgrind sees Wireshark write to them after the call
_EAGER_GC = 'collectgarbage("setpause", 1)\ncollectgarbage("setstepmul", 1000)\n'


@pytest.mark.slow
def test_the_file_reader_under_valgrind_reads_and_frees_nothing_twice(
    tshark: str, plugin: Path, tmp_path: Path
) -> None:
    valgrind = _tool("valgrind", "valgrind")
    gc = tmp_path / "eager_gc.lua"
    gc.write_text(_EAGER_GC)
    log = tmp_path / "valgrind.txt"
    argv = _tshark_argv(tshark, plugin, "-r", str(sample_capture()), "-c", "400")
    argv = [valgrind, f"--log-file={log}", argv[0], "-2", "-X", f"lua_script:{gc}", *argv[1:]]
    out = _run([*argv, "-T", "fields", "-e", "cbi1.header.epoch"], tmp_path, timeout=600)
    assert len(out.splitlines()) == 400
    report = log.read_text()
    assert "ERROR SUMMARY" in report
    for bad in ("Invalid read", "Invalid write", "Invalid free", "Process terminating"):
        assert bad not in report, report


def test_no_reader_callback_ends_in_a_tail_call() -> None:
    """``return f(...)`` in a FileHandler callback lets the collector free its arguments while
    Wireshark still writes to them; the reader keeps every result in a local first."""
    from importlib.resources import files

    text = files("cbi1kit.relay").joinpath("_lua", "kvrcap.lua").read_text()
    code = [line.split("--")[0] for line in text.splitlines()]
    tails = [line for line in code if re.match(r"\s*return\s+[\w.:\[\]\"]+\s*\(", line)]
    assert not tails

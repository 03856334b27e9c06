"""``cbi1kit layout --ksy``, compiled by the official Kaitai Struct compiler (npm, driven by node)
to Python and run with the ``kaitaistruct`` runtime (#29): every golden CBI1 vector parses to
upstream's own expected fields, words and images, or is rejected where upstream rejects a fixed
field or a short frame; the sample capture parses record for record as the reader reads it."""

from __future__ import annotations

import gzip
import importlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import xxhash
from cliutil import cli_run

from cbi1kit.capture import CaptureReader
from cbi1kit.data import sample_capture

ROOT = Path(__file__).parents[1]
VECTORS = ROOT / "tests" / "vectors" / "cbi1"
CASES = [
    c for c in json.loads((VECTORS / "manifest.json").read_text())["cases"] if c["kind"] == "decode"
]
#: upstream's rejections of a fixed header field (Format's subvariants: the fixed ones)
FIXED = {"Magic", "WireVersion", "Flags", "Version", "FingerprintBits", "SlotsPerBucket"}


@pytest.fixture(scope="module")
def parsers(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, ModuleType]:
    modules = ROOT / ".ksc" / "node_modules"
    node = shutil.which("node")
    if node is None or not (modules / "kaitai-struct-compiler").is_dir():
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("node or the Kaitai compiler is missing under CI=true (make ksc)")
        pytest.skip("node or the Kaitai compiler is missing: make ksc (needs npm)")
    out = tmp_path_factory.mktemp("kaitai")
    code, _, err = cli_run("layout", "--ksy", str(out))
    assert code == 0, err
    specs = [str(out / "cbi1.ksy"), str(out / "kvrcap.ksy")]
    subprocess.run([node, str(ROOT / "tests" / "ksc.js"), str(modules), str(out), *specs],
                   check=True, timeout=120)  # fmt: skip
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("cbi1"), importlib.import_module("kvrcap")
    finally:
        sys.path.remove(str(out))


def _frame(case: dict[str, Any]) -> bytes:
    data = (VECTORS / case["file"]).read_bytes()
    return gzip.decompress(data) if case.get("file_encoding") == "gzip" else data


def _rejected_for(case: dict[str, Any]) -> set[str]:
    error = case["expected"].get("error") or {}
    return {error.get("variant", ""), error.get("format_error", {}).get("variant", "")}


def _check_ok(parsed: Any, expected: dict[str, Any]) -> None:
    header = parsed.header
    for name in ("seed", "bucket_count", "dc_id", "epoch"):
        assert getattr(header, name) == int(expected["header"][name]), name
    body = parsed.body
    if expected["kind"] == "SnapshotChunk":
        assert (body.chunk_index, body.chunk_count) == (
            expected["chunk_index"],
            expected["chunk_count"],
        )
        assert body.bucket_offset == int(expected["bucket_offset"])
        assert len(body.words) == expected["word_count"]
        words = struct.pack(f"<{len(body.words)}Q", *body.words)
        assert xxhash.xxh3_64_intdigest(words) == int(expected["words_xxh3_64"])
    else:
        assert body.base_epoch == int(expected["base_epoch"])
        assert body.image_count == expected["image_count"] == len(body.images)
        packed = b"".join(struct.pack("<IQ", i.bucket, i.word) for i in body.images)
        assert xxhash.xxh3_64_intdigest(packed) == int(expected["images_xxh3_64"])


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_vector_parses_as_upstream_decodes_it(
    parsers: tuple[ModuleType, ModuleType], case: dict[str, Any]
) -> None:
    cbi1 = parsers[0]
    expected = case["expected"]
    try:
        parsed = cbi1.Cbi1.from_bytes(_frame(case))
    except Exception as exc:  # kaitaistruct's validation errors and EOFError
        assert "ok" not in expected, f"{case['id']}: Kaitai rejected a valid frame: {exc!r}"
        return
    if "ok" in expected:
        _check_ok(parsed, expected["ok"])
    else:  # the body rules, the checksum and the format's seed: a consumer's, not the layout's
        rejected = _rejected_for(case)
        assert not rejected & FIXED and "Truncated" not in rejected, (case["id"], rejected)


def test_the_sample_capture_parses_record_for_record(
    parsers: tuple[ModuleType, ModuleType],
) -> None:
    kvrcap = parsers[1]
    parsed = kvrcap.Kvrcap.from_file(str(sample_capture()))
    with CaptureReader(sample_capture()) as reader:
        records = list(reader.records(structural=True))
    assert len(parsed.records) == len(records)
    for got, want in zip(parsed.records, records, strict=True):
        assert got.record_type.value == int(want.type)
        assert (got.stream_id, got.record_index) == (want.stream_id, want.index)
        assert (got.recv_unix_ns, got.recv_mono_ns) == (want.recv_unix_ns, want.recv_mono_ns)
        body = got.body if isinstance(got.body, bytes) else got._raw_body
        assert body == want.body

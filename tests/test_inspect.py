"""Lenient inspection and the annotated hexdump."""

from __future__ import annotations

import struct

import pytest

from cbi1kit.wire._encode import encode_delta, encode_snapshot_chunks
from cbi1kit.wire._format import FRAME_HEAD_BYTES, IMAGES_MAX_FRAME_BYTES, FilterFormat, FrameKind
from cbi1kit.wire._frames import body_checksum
from cbi1kit.wire._inspect import inspect
from cbi1kit.wire._layout import HEADER

FMT = FilterFormat(seed=0x5EED, bucket_count=1024)
DELTA = encode_delta(FMT, 7, 4, 5, [(3, 0xAAAABBBBCCCCDDDD), (1000, 42)])


def test_clean_frame_lists_every_field_and_no_problem() -> None:
    ins = inspect(DELTA, FMT)
    assert ins.ok and ins.kind is FrameKind.DELTA
    assert [f.path for f in ins.fields[: len(HEADER.fields)]] == [f.path for f in HEADER]
    assert ins.field("header.seed").value == 0x5EED
    assert ins.field("delta.image_count").value == 2
    assert ins.frame is not None and ins.frame.serialize() == DELTA


def test_a_clean_frame_says_whether_its_format_was_checked() -> None:
    """Without a format the seed and bucket count are the frame's own: valid, but unchecked
    (the vector bucket-count-mismatch-smaller decodes so, and is refused against its format)."""
    assert inspect(DELTA, FMT).verdict == "valid: decodes cleanly, in the format expected"
    unchecked = inspect(DELTA)
    assert unchecked.ok and "not checked" in unchecked.verdict and not unchecked.format_checked
    assert unchecked.verdict in str(unchecked)
    smaller = inspect(DELTA, FilterFormat(seed=0x5EED, bucket_count=512))
    assert not smaller.ok and smaller.verdict == f"{len(smaller.problems)} problem(s):"


def test_every_problem_is_reported_not_just_the_first() -> None:
    bad = bytearray(DELTA)
    bad[4] = 9  # wire version
    bad[8] = 8  # fingerprint bits
    bad[9] = 2  # slots
    struct.pack_into("<I", bad, 56, 3)  # image_count says 3, body has 2
    ins = inspect(bad, FilterFormat(seed=1, bucket_count=1024))
    variants = [p.variant for p in ins.problems]
    assert variants == [
        "WireVersion",
        "Checksum",
        "Format.FingerprintBits",
        "Format.SlotsPerBucket",
        "Format.Mismatch",
        "Malformed",
    ]
    checksum = next(p for p in ins.problems if p.variant == "Checksum")
    assert checksum.offset == 44 and checksum.field == "header.body_checksum"
    assert f"body hashes to 0x{body_checksum(bad):08x}" in checksum.message
    assert ins.frame is None


def test_truncated_header_still_shows_what_is_there() -> None:
    ins = inspect(DELTA[:30])
    assert ins.problems[0].variant == "Truncated"
    assert ins.field("header.seed").value == 0x5EED
    assert ins.field("header.dc_id").value is None
    assert "truncated: 2 of 8 bytes" in ins.field("header.dc_id").display


def test_out_of_range_buckets_are_each_named() -> None:
    bad = bytearray(encode_delta(FMT, 7, 4, 5, [(1, 1), (2, 2), (3, 3)]))
    for i in (0, 2):
        struct.pack_into("<I", bad, 60 + 12 * i, 5000 + i)
    struct.pack_into("<I", bad, 44, body_checksum(bad))
    ins = inspect(bad, FMT)
    assert [p.offset for p in ins.problems] == [60, 84]
    assert "delta.images[2].bucket is 5002" in ins.problems[1].message


def test_legacy_magic_is_named() -> None:
    ins = inspect(b"CKF1" + DELTA[4:])
    assert "legacy CKF1 prototype" in ins.problems[0].message


@pytest.mark.parametrize("head,tail", [(8, 4), (2, 1)])
def test_hexdump_windows_long_bodies(head: int, tail: int) -> None:
    import numpy as np

    lane = np.arange(1024, dtype=np.uint64)
    (chunk,) = encode_snapshot_chunks(FMT, 1, 2, lane)
    dump = inspect(chunk).hexdump(head=head, tail=tail)
    items = [r for r in dump.rows if r.region == "item"]
    assert len(items) == head + tail
    skip = [r for r in dump.rows if r.region == "skip"]
    assert len(skip) == 1 and f"{1024 - head - tail} more rows" in skip[0].label
    text = str(dump)
    assert "snapshot.words[1023]" in text and "bucket 1023: 0x3ff (1023)" in text
    html = dump._repr_html_()
    assert html.count("<tr") == len(dump.rows) + 1
    assert "header.body_checksum" in html


def test_hexdump_labels_every_header_byte() -> None:
    dump = inspect(DELTA).hexdump()
    header_rows = [r for r in dump.rows if r.region == "header"]
    assert b"".join(r.raw for r in header_rows) == DELTA[:48]
    assert [r.label for r in header_rows] == [f.path for f in HEADER]


def _oversized() -> dict[str, bytes]:
    """Frames too large to be frames, each with other problems the header or length shows."""
    import numpy as np

    (chunk,) = encode_snapshot_chunks(FMT, 1, 2, np.arange(1024, dtype=np.uint64))
    delta = bytearray(DELTA)
    delta[4] = 9  # wire version
    struct.pack_into("<I", delta, 56, 7)  # image_count says 7
    junk = bytearray(chunk)
    junk[:4] = b"CKF1"
    struct.pack_into("<I", junk, 52, 0)  # chunk_count 0
    pad = bytes(IMAGES_MAX_FRAME_BYTES)
    return {"delta": bytes(delta) + pad, "chunk": chunk + pad, "legacy": bytes(junk) + pad}


@pytest.mark.parametrize("name", ["delta", "chunk", "legacy"])
def test_a_frame_too_large_is_judged_from_its_head_as_from_all_of_it(name: str) -> None:
    """``length`` with only the head: every problem of the whole bytes but the checksum (and the
    image scan), which need the body; the same fields, and a dump of the head alone."""
    data = _oversized()[name]
    whole = inspect(data, FilterFormat(seed=1, bucket_count=1024))
    head = inspect(
        data[:FRAME_HEAD_BYTES], FilterFormat(seed=1, bucket_count=1024), length=len(data)
    )
    assert head.problems == tuple(p for p in whole.problems if p.variant != "Checksum")
    assert head.problems[0].variant == "FrameTooLarge" and len(head.problems) >= 3
    assert [f.path for f in head.fields] == [f.path for f in whole.fields]
    assert head.length == len(data) and head.frame is None
    dump = head.hexdump()
    assert {r.region for r in dump.rows} <= {"header", "prefix"}
    assert f"{len(data)} bytes" in dump.title


def test_what_a_notebook_shows_of_an_inspection_is_one_short_line() -> None:
    """A cell that ends in an inspection, its hex view or the byte explorer shows one line of
    what it is, not a dump of every field (#46)."""
    from cbi1kit.viz._bytes import byte_explorer

    bad = bytearray(DELTA)
    bad[4] = 9
    shown = {
        repr(inspect(DELTA)): "<Inspection: DELTA, 84 bytes, ok (format not checked)>",
        repr(inspect(DELTA, FMT)): "<Inspection: DELTA, 84 bytes, ok>",
        repr(inspect(bytes(bad), FMT)): "<Inspection: DELTA, 84 bytes, 1 problem(s)>",
    }
    for got, want in shown.items():
        assert got == want
    for obj in (inspect(DELTA).hexdump(), byte_explorer(DELTA)):
        text = repr(obj)
        assert "\n" not in text and len(text) <= 100 and "InspectedField" not in text, text

"""The editable byte explorer: one byte changed, the frame inspected again; each "Try it" edit
breaks a frame as its golden vector does, by upstream's own expected result (#46)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cbi1kit as ck
from cbi1kit.errors import Cbi1Error
from cbi1kit.viz import _bytes as B
from cbi1kit.viz._report import STATIC_ENV

VECTORS = Path(__file__).parent / "vectors" / "cbi1"
CASES = {c["id"]: c for c in json.loads((VECTORS / "manifest.json").read_text())["cases"]}
FMT = ck.FilterFormat(seed=0x5EED, bucket_count=1024)
DELTA = ck.encode_delta(FMT, 7, 4, 5, [(3, 0x0001_0002_0003_0004), (1000, 9)])
CHUNK = ck.encode_snapshot_chunks(FMT, 7, 5, [0] * 1024)[0]


def _upstream_variant(case: dict[str, object]) -> str:
    """The manifest's expected error as ``inspect`` names it (``Format.Mismatch``)."""
    error = case["expected"]["error"]  # type: ignore[index]
    sub = error.get("format_error", {}).get("variant")
    return f"{error['variant']}.{sub}" if sub else error["variant"]


@pytest.mark.parametrize("frame", [DELTA, CHUNK], ids=["delta", "snapshot-chunk"])
@pytest.mark.parametrize("n", range(1, len(B.TRIES) + 1))
def test_each_try_breaks_a_frame_as_its_golden_vector_does(frame: bytes, n: int) -> None:
    tried = B.TRIES[n - 1]
    case = CASES[tried.vector]
    assert tried.checks == case["checks"]  # the quote is the vector's own line
    expected = _upstream_variant(case)
    held = {k: int(case["expected_format"][k]) for k in ("seed", "bucket_count")}  # type: ignore[index]
    vector = ck.inspect((VECTORS / case["file"]).read_bytes(), ck.FilterFormat(**held))
    assert vector.problems[0].variant == expected  # the vector itself, as a control

    edit = B.byte_explorer(ck.inspect(frame, FMT)).try_it(n)
    assert edit.tried is tried and edit.offset == tried.offset
    assert edit.inspection.problems[0].variant == expected
    with pytest.raises(Cbi1Error) as raised:
        ck.decode(FMT, edit.inspection.data)
    got = f"{raised.value.variant}" + (
        f".{raised.value.subvariant}" if raised.value.subvariant else ""
    )
    assert got == expected


def test_a_try_names_the_field_and_the_vector() -> None:
    edit = B.byte_explorer(ck.inspect(DELTA, FMT)).try_it(1)
    text = str(edit)
    assert "byte 3 (header.magic): 0x31 → 0x32" in text
    assert "decode raises Magic at header.magic (offset 0)" in text
    assert "golden vector bad-magic: magic CBI2 -> Magic" in text
    assert repr(edit) == "<ByteEdit: byte 3 0x31 → 0x32, 1 problem(s)>"
    assert json.loads(json.dumps(edit.to_dict()))["problems"][0]["field"] == "header.magic"
    html = edit._repr_html_()
    assert (
        html.count("outline") == 1
        and 'data-offset="3" style="background:#dbe9f6; padding:1px; outline' in html
    )


def test_a_poke_is_held_to_the_explorers_format() -> None:
    seed_low = ck.inspect(DELTA).field("header.seed").offset
    held = B.byte_explorer(ck.inspect(DELTA, FMT)).poke(seed_low, 0xEC)
    assert held.inspection.problems[0].variant == "Format.Mismatch"
    free = B.byte_explorer(DELTA).poke(seed_low, 0xEC)  # no format given: none to mismatch
    assert free.ok and "still decodes" in str(free)


def test_an_image_byte_edit_decodes_with_the_new_word() -> None:
    explorer = B.byte_explorer(ck.inspect(DELTA, FMT))
    at = ck.inspect(DELTA).field("delta.image_count").offset + 4 + 4  # images[0].word, low byte
    edit = explorer.poke(at, 0xFF)
    assert edit.field == "images[0].word" and not edit.ok  # the checksum no longer matches
    assert edit.inspection.problems[0].variant == "Checksum"


def test_a_poke_outside_the_frame_or_a_byte_is_refused() -> None:
    explorer = B.byte_explorer(DELTA)
    with pytest.raises(IndexError, match=f"outside the frame's {len(DELTA)} bytes"):
        explorer.poke(len(DELTA), 0)
    with pytest.raises(ValueError, match=r"0\.\.255, got 256"):
        explorer.poke(0, 256)


def test_without_a_live_kernel_edit_is_the_explorer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STATIC_ENV, "png")
    explorer = B.byte_explorer(ck.inspect(DELTA, FMT))
    assert explorer.edit() is explorer  # a static report: the bytes still hover


def test_the_live_editor_fills_in_a_try(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("anywidget")
    monkeypatch.delenv(STATIC_ENV, raising=False)
    box = B.byte_explorer(ck.inspect(DELTA, FMT)).edit()
    pick, (offset, value, apply, _reset) = box.children[0], box.children[1].children
    capsys.readouterr()
    pick.value = 3  # "Try it 3": flags (outside a kernel, display prints the text)
    assert offset.value == B.TRIES[2].offset and value.value == "0x03"
    assert "(header.flags): 0x02 → 0x03" in capsys.readouterr().out
    value.value = "0x01"  # a snapshot chunk's flags, on a delta's body: malformed
    apply.click()
    assert "(header.flags): 0x02 → 0x01" in capsys.readouterr().out
    value.value = "0x1ff"
    apply.click()
    assert "0..255, got 511" in capsys.readouterr().out

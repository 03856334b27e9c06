"""Output that fits an 80-column terminal: tables wrap or turn into blocks, long prose wraps,
the annotated hexdump moves a long value under its label, the recorder's status line is cut
to one row so a carriage return redraws it in place."""

from __future__ import annotations

from pathlib import Path

import pytest
from cliutil import cli_run

from cbi1kit._text import table, wrapped
from cbi1kit.data import sample_capture
from cbi1kit.relay._recorder import _one_row
from cbi1kit.wire import inspect

ROOT = Path(__file__).parents[1]
SAMPLE = str(sample_capture())
FRAMES = sorted((ROOT / "tests" / "vectors" / "cbi1" / "frames").rglob("*.bin"))


def _widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def test_a_table_that_fits_is_laid_out_as_is() -> None:
    out = table([("a", 1), ("bb", 22)], ("name", "n"), width=80)
    assert out.splitlines() == ["name  n", "----  --", "a     1", "bb    22"]


def test_a_wide_column_wraps_between_words_and_the_rest_stay_whole() -> None:
    prose = "seven false positives in one hundred thousand distinct absent probes " * 3
    out = table([("measured_fpr", prose), ("dc_id", "3557a3c51c3769b5")], ("stat", "value"), 60)
    assert _widest(out) <= 60
    assert "3557a3c51c3769b5" in out and "measured_fpr" in out
    assert " ".join(out.split()).count("absent probes") == 3  # nothing lost in the wrapping


def test_a_table_whose_words_cannot_fit_becomes_one_block_a_row() -> None:
    header = ("lane", "dc", "time", "why")
    rows = [(0, "3557a3c51c3769b5", "2025-01-01T00:58:50.999000009Z", "x" * 30)]
    out = table(rows, header, width=40)
    assert out.splitlines()[0].startswith("-[ lane 0 ]")
    assert "dc    3557a3c51c3769b5" in out and _widest(out) <= 40


def test_long_prose_wraps_with_an_indent_and_never_breaks_a_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "50")
    domain = "2109f30942cf0cfce4b7013876a6f376:bf990b97a0d02302c97c92a8cbc51188"  # 65 wide
    text = wrapped(f"-- indexer domain {domain}: seed 0x5deece66d1b54a33, 4096 buckets")
    assert text.splitlines()[1].startswith("   ") and domain in text  # whole, to be copied
    assert all(len(line) <= 50 for line in text.splitlines() if domain not in line)


def test_the_status_line_is_cut_to_one_row() -> None:
    line = "frames 100  bytes 1.0 MiB  seq 99  lag 3.0 ms  subscriptions 1  " + "[0] 5@4 " * 30
    assert len(_one_row(line, 80)) == 79 and _one_row(line, 80).endswith("…")
    assert _one_row("short", 80) == "short"


@pytest.mark.parametrize("path", FRAMES, ids=lambda p: p.stem)
def test_the_hexdump_of_every_golden_frame_fits_80_columns(path: Path) -> None:
    dump = inspect(path.read_bytes()).hexdump()
    text = dump.text(80)
    assert _widest(text) <= 80, text
    for row in dump.rows:  # every value is shown, beside its label or under it
        assert row.value in text


@pytest.mark.parametrize(
    "argv",
    [
        ["view", SAMPLE],
        ["stats", SAMPLE],
        ["inspect", SAMPLE],
        ["replay", SAMPLE],
        ["diff", SAMPLE, "--at-a", "100", "--at-b", "200"],
    ],
    ids=lambda a: a[0],
)
def test_commands_fit_an_80_column_terminal(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli_run(*argv, "--no-progress")
    assert code == 0, err
    wide = [line for line in out.splitlines() if len(line) > 80]
    assert not wide, wide


def test_a_name_and_value_table_never_turns_into_blocks() -> None:
    path = "/tmp/" + "x" * 90 + "/f.kvrcap: record 12 at byte offset 3: body checksum mismatch"
    out = table([("damage", path), ("records", 3)], ("field", "value"), width=80)
    assert out.splitlines()[0].startswith("field") and "x" * 90 in out  # the word runs over
    assert "body checksum mismatch" in " ".join(out.split())

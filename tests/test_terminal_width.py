"""Output that fits an 80-column terminal: tables wrap or turn into blocks, long prose wraps,
the annotated hexdump moves a long value under its label, the recorder's status line is cut
to one row so a carriage return redraws it in place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cliutil import cli_run

from cbi1kit._text import table, wrapped
from cbi1kit.data import mooncake_trace, sample_capture
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


def test_a_printed_hexdump_keeps_every_value_beside_its_label() -> None:
    """``str`` of a hexdump is the same wherever it is printed (a file, a notebook): no row
    wrapped, none left whole; ``text(width)`` is what fits a terminal."""
    dump = inspect(FRAMES[0].read_bytes()).hexdump()
    lines = str(dump).splitlines()[1:]
    assert len(lines) == len(dump.rows)
    for line, row in zip(lines, dump.rows, strict=True):
        assert line.rstrip().endswith(row.value.rstrip()) or row.region == "skip"


def _too_wide(text: str) -> list[str]:
    """Lines past 80 columns, but for one that is a single word after its indent (an identity
    or a path, kept whole to be copied: nothing could wrap it)."""
    return [line for line in text.splitlines() if len(line) > 80 and len(line.split()) > 1]


def _commands() -> list[list[str]]:
    """Every command and subcommand the parser knows (``fleet convert``, ...)."""
    import argparse

    from cbi1kit.cli import build_parser

    def below(parser: argparse.ArgumentParser, words: list[str]) -> list[list[str]]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found += [[*words, name], *below(sub, [*words, name])]
        return found

    return below(build_parser(), [])


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_every_help_fits_an_80_column_terminal(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli_run(*command, "--help")
    assert code == 0 and out.startswith("usage: cbi1kit"), err
    assert not _too_wide(out), _too_wide(out)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The sample with three records broken: violations and damage to print."""
    data = bytearray(Path(SAMPLE).read_bytes())
    for offset in (200_000, 900_000, 1_500_000):
        data[offset] ^= 0xFF
    path = tmp_path_factory.mktemp("narrow") / "damaged.kvrcap"
    path.write_bytes(data)
    return str(path)


_TRACE = str(mooncake_trace())
_INVALID = sorted(str(p) for p in (ROOT / "tests/vectors/cbi1/frames/invalid").glob("*.bin"))
_EXPLAIN = ["--model", "mooncake/conversation", "--trace", _TRACE, "--request", "3000"]
_RUNS = {  # (argv, exit code); --no-progress where a command draws a bar
    "view": (["view", SAMPLE], 0),
    "stats": (["stats", SAMPLE], 0),
    "inspect": (["inspect", SAMPLE], 0),
    "inspect damaged": (["inspect", "DAMAGED"], 1),
    "inspect frames": (["inspect", *_INVALID[:6]], 1),
    "replay": (["replay", SAMPLE], 0),
    "replay damaged": (["replay", "DAMAGED"], 1),
    "diff": (["diff", SAMPLE, "--at-a", "100", "--at-b", "200"], 0),
    "explain": (["explain", SAMPLE, *_EXPLAIN], 0),
    "simulate": (["simulate", _TRACE, "-o", "OUT/s.kvrcap", "--limit", "300"], 0),
    "export": (["export", SAMPLE, "-o", "OUT/tables"], 0),
    "layout": (["layout"], 0),
    "data": (["data"], 0),
}
_QUIET = {"layout", "data"}


@pytest.mark.parametrize("name", list(_RUNS))
def test_commands_fit_an_80_column_terminal(
    name: str, damaged: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What each command prints, on stdout and on stderr (but for the error line, one line
    whatever its length), fits 80 columns."""
    monkeypatch.setenv("COLUMNS", "80")
    argv, expected = _RUNS[name]
    argv = [a.replace("DAMAGED", damaged).replace("OUT", str(tmp_path)) for a in argv]
    code, out, err = cli_run(*argv, *([] if name in _QUIET else ["--no-progress"]))
    assert code == expected, err
    printed = out + "\n".join(line for line in err.splitlines() if ": error: " not in line)
    assert not _too_wide(printed), _too_wide(printed)


_TWO_BY_TWO = ["--model", "m1", "--model", "m2", "--dc", "a", "--dc", "b"]


def test_record_fits_an_80_column_terminal(tmp_path: Path) -> None:
    """``record --list`` and a recording's summary, against ``cbi1kit serve`` with two models
    on two DCs (long pool keys, a line per pool)."""
    serve = subprocess.Popen(
        [sys.executable, "-m", "cbi1kit", "serve", "--port", "0", *_TWO_BY_TWO],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        address = serve.stdout.readline().split(" on ")[1].split()[0]
        env = {**os.environ, "COLUMNS": "80"}
        for argv in (["--list"], ["-o", str(tmp_path / "r.kvrcap"), "--duration", "2"]):
            done = subprocess.run(
                [sys.executable, "-m", "cbi1kit", "record", address, *argv],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            printed = done.stdout + done.stderr
            assert not _too_wide(printed), _too_wide(printed)
    finally:
        serve.terminate()
        serve.wait(timeout=30)


def test_a_name_and_value_table_never_turns_into_blocks() -> None:
    path = "/tmp/" + "x" * 90 + "/f.kvrcap: record 12 at byte offset 3: body checksum mismatch"
    out = table([("damage", path), ("records", 3)], ("field", "value"), width=80)
    assert out.splitlines()[0].startswith("field") and "x" * 90 in out  # the word runs over
    assert "body checksum mismatch" in " ".join(out.split())

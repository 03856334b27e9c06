"""The ``cbi1kit`` command line, run as a user runs it: a subprocess, exit codes, stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
VECTORS = ROOT / "tests" / "vectors" / "cbi1" / "frames"


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cbi1kit", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_demo_decodes_the_bundled_frames() -> None:
    out = run("demo")
    assert out.returncode == 0, out.stderr
    assert "header.body_checksum" in out.stdout
    assert "delta.images[0]" in out.stdout and "snapshot.words[0]" in out.stdout
    assert out.stdout.count("valid: decodes cleanly") == len(
        list((ROOT / "data" / "frames").glob("*.cbi1"))
    )


def test_inspect_reports_problems_with_exit_1() -> None:
    out = run(
        "inspect",
        str(VECTORS / "invalid" / "checksum-flipped.bin"),
        "--seed",
        "0x5eed",
        "--buckets",
        "1024",
    )
    assert out.returncode == 1
    assert "Checksum at header.body_checksum (offset 44)" in out.stdout


def test_inspect_format_mismatch() -> None:
    out = run(
        "inspect", str(VECTORS / "valid" / "delta-empty.bin"), "--seed", "1", "--buckets", "1024"
    )
    assert out.returncode == 1
    assert "Format.Mismatch at header.seed (offset 12)" in out.stdout


def test_unreadable_input_is_one_line_exit_3(tmp_path: Path) -> None:
    out = run("inspect", str(tmp_path / "missing.bin"))
    assert out.returncode == 3
    assert out.stderr.strip().count("\n") == 0
    assert "cannot read" in out.stderr


@pytest.mark.parametrize("args", [["--seed", "1"], ["--seed", "1", "--buckets", "1000"]])
def test_bad_format_arguments_are_usage_errors(args: list[str]) -> None:
    out = run("inspect", str(VECTORS / "valid" / "delta-empty.bin"), *args)
    assert out.returncode == 2
    assert out.stderr.startswith("cbi1kit inspect: error:")


def test_layout_markdown_is_the_docs_table() -> None:
    out = run("layout", "--markdown")
    assert out.returncode == 0
    doc = (ROOT / "docs" / "wire-format.md").read_text()
    header_table = out.stdout.split("### header (both kinds)\n\n")[1].split("\n\n")[0]
    assert header_table in doc


def test_every_subcommand_has_help() -> None:
    for sub in ("inspect", "layout", "demo"):
        out = run(sub, "--help")
        assert out.returncode == 0 and "usage: cbi1kit" in out.stdout


def test_public_api_resolves() -> None:
    import cbi1kit

    for name in cbi1kit.__all__:
        assert hasattr(cbi1kit, name), name

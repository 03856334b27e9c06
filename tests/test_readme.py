"""The first hour of a new user (#47): cbi1kit from a wheel of the tracked files in a fresh venv,
used from an empty folder. The core install brings no extra and works; and the docs run as
written: every ```python block of README.md, docs/*.md and CONTRIBUTING.md as a script and every
line of every ```sh block as a shell command, a page's blocks in order in one folder.

A synopsis with placeholders (the README's command line) is fenced ```text, not ```sh: it is no
command to run. What is fenced ```sh and still not run is in ``NOT_RUN``, with the reason.

The venv (~60 s) is built once for the module: xdist runs a file's tests on one worker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import platformdirs
import pytest
from checkout import copy_tracked
from test_extras import NOT_CORE

from cbi1kit.data import sample_capture
from conftest import ROOT

#: the pages whose blocks run, each in a folder of its own
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "CONTRIBUTING.md"]
#: the extras the pages' blocks use (the README's fleet on Dask), added after the core's check
EXTRAS = "fleet"
#: shell lines not run, by how they start: the reason
NOT_RUN = {
    "make ": "a checkout's target: it builds the checkout's .venv (`make test` runs this test)",
    ".venv/bin/python -m pytest": "the checkout's own suite, from a checkout",
}
#: the user's kernel cache (docs/kernels.md), shared by the test's venvs
KERNELS = Path(platformdirs.user_cache_dir("cbi1kit", appauthor=False)) / "kernels"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: its language, its text and the line its fence opens on."""

    page: Path
    line: int
    language: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    text = page.read_text()
    return [
        Block(page, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2))
        for m in _FENCE.finditer(text)
    ]


def shell_lines(block: Block) -> list[str]:
    """The commands of a ```sh block: each line but comments and those ``NOT_RUN`` names."""
    if block.language != "sh":
        return []
    lines = (line.strip() for line in block.text.splitlines())
    return [
        line
        for line in lines
        if line and not line.startswith("#") and not line.startswith(tuple(NOT_RUN))
    ]


@dataclass(frozen=True)
class Install:
    """The fresh venv, and the distributions its core install held before the extras came."""

    venv: Path
    core: frozenset[str]

    def env(self) -> dict[str, str]:
        """This process's environment with the venv first on PATH, as after ``activate``; the
        kernels cached where a user's install keeps them (root's install keeps them in the
        venv: each run's fresh venv compiled them all again, 40 s of the test)."""
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        path = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return {"NUMBA_CACHE_DIR": str(KERNELS), **env, "PATH": path}

    def run(
        self, argv: list[str], cwd: Path, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            cwd=cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _pip(python: Path, *args: str) -> None:
    pip = [str(python), "-m", "pip", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *args], check=True, timeout=900, capture_output=True)


def _freeze(python: Path) -> frozenset[str]:
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    return frozenset(line.split("==")[0] for line in out.split())


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Install:
    """A wheel of the tracked files (no build/ or .venv of this tree), installed into a fresh
    venv without an extra (what it holds then is kept), then with ``EXTRAS``."""
    root = tmp_path_factory.mktemp("install")
    tree = copy_tracked(ROOT, root / "cbi1kit-src")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    _pip(python, "wheel", "--no-deps", "-w", str(root), str(tree))
    (wheel,) = root.glob("cbi1kit-*.whl")
    _pip(python, "install", str(wheel))
    core = _freeze(python)
    _pip(python, "install", f"{wheel}[{EXTRAS}]")
    return Install(venv, core)


def test_pip_install_dot_is_the_core_and_works_outside_the_repository(
    installed: Install, tmp_path: Path
) -> None:
    """The core install (no extra), used from another folder: the tables, the replay and a
    chart work; no extra's distribution came with it; ``record`` says what it needs."""
    assert not installed.core & set(NOT_CORE), installed.core & set(NOT_CORE)
    venv, sample = installed.venv, sample_capture()
    use = (  # the bundled sample ships in the wheel (#47): the README's first example
        "import cbi1kit as ck; c = ck.open(ck.data.sample_capture()); "
        "print(c.frames.collect().height, c.replay().frames, "
        "type(ck.viz.occupancy_chart(c.lane())).__name__, ck.data.sample_capture())"
    )
    out = installed.run(["python", "-c", use], tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr
    frames, records, chart, where = out.stdout.split()
    assert int(frames) == int(records) > 0 and chart.endswith("Chart")
    assert Path(where).is_relative_to(venv) and Path(where).read_bytes() == sample.read_bytes()
    for name, size in (("trace", 3_029_533), ("real", 105_682), ("delta", 84)):
        path = installed.run(["cbi1kit", "data", name], tmp_path).stdout.strip()
        assert Path(path).is_relative_to(venv) and Path(path).stat().st_size == size, name
    notice = (Path(where).parent / "mooncake" / "README.md").read_text()
    assert "Apache-2.0" in notice  # the trace's notice ships with it
    rec = installed.run(["cbi1kit", "record", "localhost:1", "-o", "r.kvrcap"], tmp_path)
    assert (rec.returncode, rec.stderr.strip()) == (
        2,
        "cbi1kit record: error: needs grpcio, which is not installed: pip install 'cbi1kit[relay]'",
    )
    assert not (tmp_path / "r.kvrcap").exists()


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if any(b.language == "python" or shell_lines(b) for b in blocks(p))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_block_of_the_page_runs_as_written(
    page: Path, installed: Install, tmp_path: Path
) -> None:
    """Each ```python block a script of its own (so a ``__main__`` guard means what it means in
    a user's file), each ```sh line a ``bash -c``, in the page's order, in one empty folder."""
    for n, block in enumerate(blocks(page)):
        if block.language == "python":
            script = tmp_path / f"block_{n}.py"
            script.write_text(block.text)
            commands = [["python", script.name]]
        else:  # a ```sh block's lines (none for ```text and the rest)
            commands = [["bash", "-c", line] for line in shell_lines(block)]
        for argv in commands:
            out = installed.run(argv, tmp_path)
            assert out.returncode == 0, f"{block.name}: {argv[-1]}\n{out.stdout}\n{out.stderr}"


def test_the_docs_hold_blocks_to_run_and_each_line_not_run_is_named() -> None:
    """The README's examples are there to run, and every ``NOT_RUN`` reason still applies to a
    line of some page (a stale one goes)."""
    every = [b for p in PAGES for b in blocks(p)]
    readme = [b for b in every if b.page.name == "README.md"]
    assert sum(b.language == "python" for b in readme) >= 3
    assert any(shell_lines(b) for b in readme if b.language == "sh")
    sh = [line.strip() for b in every if b.language == "sh" for line in b.text.splitlines()]
    for start in NOT_RUN:
        assert any(line.startswith(start) for line in sh), start

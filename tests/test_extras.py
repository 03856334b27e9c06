"""The core install and its extras: what ``pip install .`` brings, and what a command whose
extra is missing says (one line, exit 2, nothing written). The install itself, into a fresh
venv, is tests/test_readme.py's (one venv for it and the README's examples)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from cbi1kit._extras import COMMAND_EXTRAS, EXTRAS, missing_extra
from cbi1kit.data import sample_capture
from conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SAMPLE = sample_capture()
#: what none but an extra may bring: the heavy or service-side distributions
NOT_CORE = ("dask", "distributed", "bokeh", "grpcio", "jupyterlab", "playwright")


def _names(requirements: list[str]) -> set[str]:
    """Distribution names a list of requirements brings, with their own extras' names."""
    out = set()
    for text in requirements:
        req = Requirement(text)
        out |= {req.name, *req.extras}
    return out


def test_each_extras_module_comes_from_that_extra_in_pyproject() -> None:
    extras = PYPROJECT["optional-dependencies"]
    for module, (dist, extra) in EXTRAS.items():
        assert dist in _names(extras[extra]) or module in _names(extras[extra]), module
    assert set(COMMAND_EXTRAS.values()) <= set(extras)


def test_the_core_brings_no_extra() -> None:
    core = _names(PYPROJECT["dependencies"])
    assert not core & {*NOT_CORE, *(d for d, _ in EXTRAS.values())}


def test_missing_extra_names_the_install_only_for_an_extras_module() -> None:
    line = missing_extra(ModuleNotFoundError("x", name="grpc._cython"))
    assert line == "needs grpcio, which is not installed: pip install 'cbi1kit[relay]'"
    assert missing_extra(ModuleNotFoundError("x", name="numpy")) is None
    assert missing_extra(ModuleNotFoundError("x")) is None


#: ``cbi1kit`` with the extras' modules made unimportable, as in a core install
_WITHOUT = textwrap.dedent(
    """
    import sys
    sys.modules.update(dict.fromkeys({modules!r}))  # None: find_spec finds none, import fails
    from cbi1kit.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["record", "localhost:1", "-o", "{tmp}/r.kvrcap", "--duration", "1"], "relay"),
        (["serve", "--port", "0"], "relay"),
        (["fleet", "query", "churn", "{tmp}"], "fleet"),
        (["lab", "--notebooks", str(ROOT / "notebooks"), "--no-browser"], "notebooks"),
        (["report", str(SAMPLE), "-o", "{tmp}/rep", "--no-notebooks"], "notebooks"),
    ],
)
def test_a_command_without_its_extra_says_what_to_install(
    argv: list[str], extra: str, tmp_path: Path
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT.format(modules=set(EXTRAS))]
        + [a.format(tmp=tmp_path) for a in argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    needs = rf"needs [^;]+, which (is|are) not installed: pip install 'cbi1kit\[{extra}\]'"
    line = rf"cbi1kit {argv[0]}: error: {needs}"
    assert re.fullmatch(line, out.stderr.strip()), out.stderr
    dists = {d for d, of in EXTRAS.values() if of == extra}
    needed = {"vl-convert-python"} if "--no-notebooks" in argv else dists  # the charts alone
    for dist in dists:  # every one the command needs, at once, and no other
        assert (dist in out.stderr) == (dist in needed), dist
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_report_names_everything_missing_at_once(tmp_path: Path) -> None:
    """No notebooks extra and no notebooks folder: one line naming both (#47), exit 2."""
    nowhere = str(tmp_path / "nowhere")
    argv = ["report", str(SAMPLE), "-o", str(tmp_path / "rep"), "--notebooks", nowhere]
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT.format(modules=set(EXTRAS)), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "vl-convert-python" in out.stderr and "nowhere: no notebooks folder" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_core_commands_run_without_any_extra(tmp_path: Path) -> None:
    code = _WITHOUT.format(modules=set(EXTRAS))
    commands = (["replay", str(SAMPLE)], ["inspect", str(SAMPLE)], ["stats", str(SAMPLE)])
    writes = (["layout", "--ksy", str(tmp_path)], ["layout", "--wireshark", str(tmp_path)])
    for argv in (*commands, *writes):
        out = subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert out.returncode == 0, (argv, out.stderr)

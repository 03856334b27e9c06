"""Every benchmark runs to the end in its ``--quick`` mode (a smoke run, as CI would: nothing is
asserted on a time), from this checkout, on ``benchmarks/_harness.py``, printing its figures in
its shape (alternating rounds, best and median of both clocks, a summary of the goals)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("bench_*.py"))

pytestmark = pytest.mark.slow


def test_there_are_benchmarks() -> None:
    assert len(BENCHMARKS) >= 7


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_runs_quick(script: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run(
        [sys.executable, str(script), "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "from _harness import" in script.read_text(), "every benchmark is on the harness"
    out = done.stdout
    assert out.startswith("# ") and "[--quick" in out.splitlines()[0], out[:500]
    # each figure: "NAME: candidate X vs baseline Y (R.RRx ...)"; a summary line at the end
    assert re.search(r"^[^#\s].*: .+ vs .+ \(\d+\.\d\dx", out, re.MULTILINE), out[-2000:]
    assert re.search(r"^# .*(goals met|no goals)", out.splitlines()[-1]), out[-500:]


def test_a_measured_make_is_a_top_level_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``make test PYTEST_ADDOPTS=...`` the benchmarks' child ``make pytest`` must not
    inherit that assignment (through ``MAKEFLAGS``) over its own: it ran the suite recursively."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import _harness

    monkeypatch.setenv("MAKEFLAGS", "s -- PYTEST_ADDOPTS=--durations=30")
    monkeypatch.setenv("MAKELEVEL", "1")
    env = _harness.child_env(PYTEST_ADDOPTS="--co tests/test_errors.py")
    assert "MAKEFLAGS" not in env and "MAKELEVEL" not in env
    shown = subprocess.run(
        ["make", "-s", "-f", "-", "show"],
        input="show:\n\t@echo $$PYTEST_ADDOPTS\n",
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == "--co tests/test_errors.py"

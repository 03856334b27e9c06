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

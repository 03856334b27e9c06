"""The test setup itself: a test that hangs fails with its stack instead of holding the run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_a_hanging_test_fails_with_its_stack(tmp_path: Path) -> None:
    """This project's pytest configuration, its per-test limit lowered to 2 s, on a test that
    sleeps for a minute: it fails in seconds, naming where it waited."""
    (tmp_path / "test_hangs.py").write_text(
        "import time\n\ndef test_waits_forever():\n    time.sleep(60)\n"
    )
    argv = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-n0"]
    argv += ["-o", "timeout=2", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)]
    start = time.monotonic()
    run = subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=50, cwd=tmp_path
    )
    assert time.monotonic() - start < 40
    assert run.returncode == 1, run.stdout[-2000:]
    assert "Timeout" in run.stdout and "time.sleep(60)" in run.stdout
    assert "1 failed" in run.stdout

"""A copy of part of the checkout as git tracks it: what a test that copies the checkout sees,
whatever ``make lab`` or an editor left beside it (``.ipynb_checkpoints/``, ``__pycache__``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def tracked(folder: Path) -> list[Path]:
    """The files git tracks under ``folder`` (every regular file outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=folder, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return sorted(p for p in folder.rglob("*") if p.is_file())
    return sorted(folder / name for name in out.decode().split("\0") if name)


def copy_tracked(folder: Path, to: Path) -> Path:
    """``folder``'s tracked files into ``to`` (made), paths kept; returns ``to``."""
    for path in tracked(folder):
        target = to / path.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target, follow_symlinks=False)  # docs/notebooks: a link, as tracked
    return to

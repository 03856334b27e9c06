"""Writing outputs without destroying anything: every command claims its output files first."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cbi1kit.errors import OutputError, OutputVariant

__all__ = ["claim_outputs"]


def claim_outputs(paths: Iterable[Path], *, overwrite: bool) -> list[Path]:
    """The files a run is about to write, refused up front (before anything is written) if one
    already exists and ``overwrite`` is not set: a file this run did not create is never
    replaced unasked. A device, pipe or socket is never an output (``NotAFile``)."""
    claimed = list(paths)
    special = [p for p in claimed if p.exists() and not (p.is_file() or p.is_dir())]
    if special:  # a device or pipe: written over as a file, it would be replaced, --force or not
        raise OutputError(
            OutputVariant.NotAFile,
            f"{special[0]} is not a regular file (a device, pipe or socket): write to a file",
            field=str(special[0]),
        )
    if not overwrite:
        taken = [p for p in claimed if p.exists() or p.is_symlink()]
        if taken:
            shown = ", ".join(str(p) for p in taken[:3]) + (" ..." if len(taken) > 3 else "")
            raise OutputError(
                OutputVariant.Exists,
                f"{shown} exist{'s' if len(taken) == 1 else ''} (use --force to overwrite)",
                field=str(taken[0]),
            )
    return claimed

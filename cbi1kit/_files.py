"""Writing outputs without destroying anything: every command claims its output files first."""

from __future__ import annotations

import contextlib
import glob
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from cbi1kit.errors import OutputError, OutputVariant


def claim_outputs(paths: Iterable[Path], *, overwrite: bool) -> list[Path]:
    """The files a run is about to write, refused up front (before anything is written) if one
    already exists and ``overwrite`` is not set: a file this run did not create is never
    replaced unasked. A folder, device, pipe or socket is never an output (``NotAFile``)."""
    claimed = list(paths)
    special = [p for p in claimed if p.exists() and not p.is_file()]
    if special:  # written over as a file, it would be replaced (or fail), --force or not
        what = (
            "a folder" if special[0].is_dir() else "not a regular file (a device, pipe or socket)"
        )
        raise OutputError(
            OutputVariant.NotAFile,
            f"{special[0]} is {what}: write to a file",
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


@contextlib.contextmanager
def written_whole(outputs: Sequence[Path], *, overwrite: bool) -> Iterator[list[Path]]:
    """Partial files to write ``outputs`` into (hidden, beside them), put in place together
    when the block ends: a run cut short (an error, Ctrl-C, a full disk) leaves none of them,
    and an earlier output stays until then. A failed write is ``OutputError`` ``Unwritable``
    naming the outputs."""
    claim_outputs(outputs, overwrite=overwrite)  # never a device; an existing file if asked
    for out in outputs:
        _sweep_partials(out)
    partials = [o.with_name(f".{o.name}.{os.getpid()}.partial") for o in outputs]
    try:
        try:
            yield partials
            for partial, out in zip(partials, outputs, strict=True):
                if overwrite:
                    os.replace(partial, out)
                else:
                    _put_new(partial, out)
        except OSError as exc:
            raise unwritable(outputs, exc) from None
    finally:
        for partial in partials:
            partial.unlink(missing_ok=True)


def unwritable(outputs: Sequence[Path], exc: OSError) -> OutputError:
    """A write of ``outputs`` that failed, named (``Unwritable``)."""
    shown = str(outputs[0]) if len(outputs) == 1 else f"{outputs[0].parent}/"
    if len(outputs) > 1:
        shown += "{" + ",".join(o.name for o in outputs) + "}"
    # pyarrow's: "Error writing bytes to file. Detail: [errno 28] No space left on device"
    why = re.sub(r"^\[errno \d+\] ", "", (exc.strerror or str(exc)).split("Detail: ")[-1])
    return OutputError(
        OutputVariant.Unwritable, f"cannot write {shown}: {why}", field=str(outputs[0])
    )


def _put_new(partial: Path, out: Path) -> None:
    """``partial`` at ``out``, which must not exist: a file another run put there meanwhile is
    not replaced (``OutputError`` ``Exists``)."""
    try:
        os.link(partial, out)
    except FileExistsError:
        claim_outputs([out], overwrite=False)  # refuses it, as for any output that exists
        raise
    except OSError:  # a file system without hard links: the same check, not atomic
        claim_outputs([out], overwrite=False)
        os.replace(partial, out)


def _sweep_partials(out: Path) -> None:
    """Remove what a run killed while writing ``out`` left beside it (``.NAME.PID.partial``
    of a process that is gone); a live run's are its own."""
    if not out.parent.is_dir():
        return
    for partial in out.parent.glob(f".{glob.escape(out.name)}.*.partial"):
        pid = partial.name[len(out.name) + 2 : -len(".partial")]
        if pid.isdigit() and not _running(int(pid)):
            partial.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        return True
    return True

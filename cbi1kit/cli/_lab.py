"""``cbi1kit lab``: JupyterLab on the notebooks, this environment's kernel."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from cbi1kit.cli._common import no_notebooks, ranged

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def run(args: argparse.Namespace) -> int:

    from cbi1kit.viz._lab import kernel_environment, lab_command

    folder: Path = args.notebooks
    if not folder.is_dir():
        raise no_notebooks(folder, "give --notebooks DIR")
    argv = lab_command(folder.resolve(), port=args.port, open_browser=not args.no_browser)
    os.execve(argv[0], argv, kernel_environment())  # Lab takes this process over


def register(sub: Commands) -> None:
    """``cbi1kit lab``."""
    p = sub.add_parser(
        "lab",
        help="JupyterLab on the notebooks: this environment's kernel, saves kept output-free",
        description="JupyterLab on the notebooks folder with this environment as the kernel. "
        "Saving a notebook writes its .py source and its output-free .ipynb, so neither "
        "autosave nor Ctrl+S changes a tracked file with outputs; runs as root too.",
    )
    p.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="notebooks folder")
    p.add_argument("--port", type=ranged(0, 65535), default=0, help="port (0 picks a free one)")
    p.add_argument("--no-browser", action="store_true", help="only print Lab's address")
    p.set_defaults(handler=run)

"""``cbi1kit data``: the files that ship with cbi1kit, and where they are."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from cbi1kit._text import table
from cbi1kit.cli._common import EXIT_OK
from cbi1kit.data import FILES, FOLDER

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def run(args: argparse.Namespace) -> int:
    if args.name is not None:  # the path alone, for a shell: replay "$(cbi1kit data sample)"
        print(FILES[args.name]())
        return EXIT_OK
    rows = []
    for name, where in FILES.items():
        path = where()
        about = " ".join((where.__doc__ or "").split(":")[0].split("(")[0].split())
        rows.append((name, path.relative_to(FOLDER), f"{path.stat().st_size:,}", about))
    print(f"in {FOLDER} (ck.data in Python):\n")
    print(table(rows, ("name", "file", "bytes", "what")))
    return EXIT_OK


def register(sub: Commands) -> None:
    """``cbi1kit data``."""
    p = sub.add_parser(
        "data",
        help="the bundled sample capture, trace and frames, and where they are",
        description="List the files that ship with cbi1kit (ck.data in Python), or print one's "
        'path: cbi1kit replay "$(cbi1kit data sample)".',
    )
    p.add_argument("name", nargs="?", choices=tuple(FILES), help="print this file's path alone")
    p.set_defaults(handler=run)

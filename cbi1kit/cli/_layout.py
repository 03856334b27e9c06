"""``cbi1kit layout``: the CBI1 byte layout, from the layout tables."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from cbi1kit._text import table
from cbi1kit.cli._common import EXIT_OK
from cbi1kit.wire._layout import DELTA_IMAGE, DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX, layout_markdown

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def run(args: argparse.Namespace) -> int:
    for title, layout in (
        ("header (both kinds)", HEADER),
        ("delta body prefix", DELTA_PREFIX),
        ("delta image (12 bytes, packed)", DELTA_IMAGE),
        ("snapshot chunk body prefix", SNAPSHOT_PREFIX),
    ):
        print(f"### {title}\n")
        if args.markdown:
            print(layout_markdown(layout))
        else:
            rows = [(f.offset, f.size, f.path, f.kind, f.doc) for f in layout]
            print(table(rows, ("offset", "size", "field", "type", "meaning")))
        print()
    return EXIT_OK


def register(sub: Commands) -> None:
    """``cbi1kit layout``."""
    p = sub.add_parser(
        "layout",
        help="the CBI1 byte layout, from the layout tables",
        description="Print the CBI1 frame's byte layout (header, snapshot-chunk and delta "
        "bodies): every field's offset, width, type and meaning, from the one table the "
        "decoder, the encoder and the hex view read.",
    )
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.set_defaults(handler=run)

"""``cbi1kit layout``: the CBI1 byte layout, from the layout tables."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from cbi1kit._text import table
from cbi1kit.cli._common import EXIT_OK, EXIT_UNREADABLE
from cbi1kit.errors import CliError
from cbi1kit.wire._layout import DELTA_IMAGE, DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX, layout_markdown

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def _write(folder: Path, texts: dict[str, str], force: bool) -> None:
    """Each of ``texts`` into ``folder`` under its name, all of them or none."""
    from cbi1kit._files import written_whole

    if not folder.is_dir():
        raise CliError(f"{folder}: no such folder", EXIT_UNREADABLE)
    outputs = [folder / name for name in texts]
    with written_whole(outputs, overwrite=force) as partials:
        for partial, text in zip(partials, texts.values(), strict=True):
            partial.write_text(text)
    print(f"wrote {', '.join(str(o) for o in outputs)}")


def _write_ksy(folder: Path, force: bool) -> None:
    """``cbi1.ksy`` and ``kvrcap.ksy`` (Kaitai Struct) into ``folder``."""
    from cbi1kit.capture._kaitai import cbi1_ksy, ksy_text, kvrcap_ksy

    _write(folder, {"cbi1.ksy": ksy_text(cbi1_ksy()), "kvrcap.ksy": ksy_text(kvrcap_ksy())}, force)


def _write_wireshark(folder: Path, force: bool) -> None:
    """``cbi1.lua`` (the Wireshark plugin) into ``folder``, and where its ``.proto`` is."""
    from cbi1kit.relay._wireshark import PROTO_DIR, wireshark_lua

    _write(folder, {"cbi1.lua": wireshark_lua()}, force)
    print(f"protobuf search path (Wireshark's, load all files): {PROTO_DIR}")


def run(args: argparse.Namespace) -> int:
    if args.ksy is not None:
        _write_ksy(args.ksy, args.force)
        return EXIT_OK
    if args.wireshark is not None:
        _write_wireshark(args.wireshark, args.force)
        return EXIT_OK
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
    writes = p.add_mutually_exclusive_group()
    writes.add_argument(
        "--ksy",
        type=Path,
        metavar="DIR",
        help="write cbi1.ksy and kvrcap.ksy (Kaitai Struct) into DIR instead",
    )
    writes.add_argument(
        "--wireshark",
        type=Path,
        metavar="DIR",
        help="write cbi1.lua, a Wireshark plugin (CBI1 in FilterUpdate payloads, a .kvrcap "
        "file reader), into DIR instead",
    )
    p.add_argument("--force", action="store_true", help="replace files that exist")
    p.set_defaults(handler=run)

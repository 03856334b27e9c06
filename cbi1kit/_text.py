"""Text that fits the terminal: lines wrapped between words, tables whose columns narrow (or turn
into ``name  value`` blocks) to fit. The CLI prints with it, and results format themselves with it,
so a notebook and the CLI show the same thing."""

from __future__ import annotations

import itertools
import shutil
import textwrap
from collections.abc import Sequence


def terminal_width() -> int:
    """The columns output is laid out for: the terminal's, else ``COLUMNS``, else 80."""
    return shutil.get_terminal_size((80, 24)).columns


def wrapped(text: str, indent: str = "   ") -> str:
    """Each line of ``text`` wrapped to the terminal, continuation lines indented; a word is
    never broken (an identity or a path stays whole, to be copied)."""
    width = terminal_width()
    return "\n".join(
        textwrap.fill(
            line, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False
        )
        for line in text.splitlines()
    )


def shortened(text: str, width: int) -> str:
    """``text`` on one line of at most ``width``, cut after a whole word with " …" (a word is
    never broken: a path too long for the line is left out, not cut)."""
    return textwrap.fill(
        text, width, max_lines=1, placeholder=" …", break_on_hyphens=False, break_long_words=False
    )


def _wrap(cell: str, width: int) -> list[str]:
    """A cell's lines at ``width``, words whole."""
    return textwrap.wrap(cell, width, break_long_words=False) or [""]


def _fit(natural: list[int], floors: list[int], room: int) -> list[int]:
    """Column widths narrowed, the one with the most to give first, none below its floor,
    until they fit ``room`` (or can narrow no more: then the table runs wide)."""
    widths = list(natural)
    while sum(widths) > room:
        give = max(range(len(widths)), key=lambda i: widths[i] - floors[i])
        if widths[give] <= floors[give]:
            break
        widths[give] -= 1
    return widths


def _cell(value: object) -> str:
    """A table cell: a value not known (None) is a dash, never Python's ``None``."""
    return "-" if value is None else str(value)


def table(rows: Sequence[Sequence[object]], header: Sequence[str], width: int | None = None) -> str:
    """Rows under a header, columns two spaces apart, fitted to ``width`` (the terminal's):
    the columns with most to give wrap between words first. When even whole words do not fit,
    each row is a block of ``name  value`` lines instead (psql's expanded display)."""
    width = width or terminal_width()
    cells = [[str(c) for c in header]] + [[_cell(c) for c in r] for r in rows]
    natural = [max(len(r[i]) for r in cells) for i in range(len(header))]
    floors = [max(len(w) for r in cells for w in r[i].split() or [""]) for i in range(len(header))]
    room = width - 2 * (len(header) - 1)
    if sum(floors) > room and len(header) <= 2:  # name and value: a long word runs over
        floors[-1] = max(12, room - floors[0])
    elif sum(floors) > room:
        return _expanded(cells[1:], cells[0], width)
    widths = _fit(natural, floors, room)
    lines = []
    for i, row in enumerate(cells):
        parts = [_wrap(c, w) for c, w in zip(row, widths, strict=True)]
        for line in itertools.zip_longest(*parts, fillvalue=""):
            lines.append("  ".join(p.ljust(w) for p, w in zip(line, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _expanded(rows: list[list[str]], header: list[str], width: int) -> str:
    """Each row as a block: a rule naming it by its first column, then a line per column."""
    name = max(len(h) for h in header[1:])
    lines = []
    for row in rows:
        rule = f"-[ {header[0]} {row[0]} ]"
        lines.append(rule + "-" * max(0, min(width, 40) - len(rule)))
        for h, c in zip(header[1:], row[1:], strict=True):
            text = _wrap(c, max(20, width - name - 2))
            lines += [f"{h if k == 0 else '':<{name}}  {t}".rstrip() for k, t in enumerate(text)]
    return "\n".join(lines)


def hex_id(value: int | None) -> str:
    """A u64 id as 16 hex digits, ``-`` for none."""
    return "-" if value is None else f"{value:016x}"


def spans(ranges: Sequence[tuple[int, int]], most: int = 4) -> str:
    """Sequence ranges as ``a..=b``, the middle ones elided past ``most``."""
    shown = [f"{a}..={b}" for a, b in ranges]
    if len(shown) > most:
        shown = [*shown[: most - 1], f"… ({len(shown) - most} more)", shown[-1]]
    return ", ".join(shown) or "none"

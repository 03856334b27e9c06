"""A frame's bytes to hover and to edit: every byte named from the layout tables, one byte
changed and the frame inspected again, and "Try it" edits that each break the frame as a golden
vector (``tests/vectors/cbi1``) does. The layout: docs/wire-format.md.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace
from typing import Any, Final

from cbi1kit.viz._display import interactive_charts
from cbi1kit.wire._format import HEADER_LEN, IMAGE_BYTES, WORD_BYTES, FrameKind
from cbi1kit.wire._inspect import Inspection, inspect
from cbi1kit.wire._layout import ALL_LAYOUTS, DELTA_IMAGE


@dataclass(frozen=True)
class ByteSpan:
    """Bytes ``[start, end)`` of a frame: the field they hold and its value."""

    start: int
    end: int
    field: str
    value: str
    region: str


def _unit_spans(ins: Inspection, body: int, body_units: int) -> tuple[list[ByteSpan], int]:
    """The body's images (or words) from ``body``, the first ``body_units`` of them named."""
    data, spans = ins.data, []
    if ins.kind is FrameKind.DELTA:
        count = min((len(data) - body) // IMAGE_BYTES, body_units)
        for i in range(count):
            at = body + i * IMAGE_BYTES
            for f in DELTA_IMAGE.fields:
                value = int.from_bytes(data[at + f.offset : at + f.end], "little")
                shown = f"0x{value:016x}" if f.size == 8 else str(value)
                spans.append(
                    ByteSpan(at + f.offset, at + f.end, f"images[{i}].{f.name}", shown, "images")
                )
        return spans, body + count * IMAGE_BYTES
    if ins.kind is FrameKind.SNAPSHOT_CHUNK:
        count = min((len(data) - body) // WORD_BYTES, body_units)
        for i in range(count):
            at = body + i * WORD_BYTES
            value = int.from_bytes(data[at : at + WORD_BYTES], "little")
            spans.append(ByteSpan(at, at + WORD_BYTES, f"words[{i}]", f"0x{value:016x}", "words"))
        return spans, body + count * WORD_BYTES
    return spans, body


def byte_spans(frame: bytes | Inspection, *, body_units: int = 64) -> list[ByteSpan]:
    """Every header and prefix field, then the body image by image (or word by word), from the
    layout tables; the first ``body_units`` units of the body are named, the rest summarised."""
    ins = frame if isinstance(frame, Inspection) else inspect(frame)
    spans = [
        ByteSpan(f.offset, f.offset + len(f.raw), f.path, f.display, f.path.split(".", 1)[0])
        for f in ins.fields
        if f.raw
    ]
    units, named = _unit_spans(ins, max((s.end for s in spans), default=0), body_units)
    spans += units
    if named < len(ins.data):
        rest = len(ins.data) - named
        spans.append(ByteSpan(named, len(ins.data), "rest of the body", f"{rest} B", "rest"))
    return spans


_REGION_COLOURS: Final = {
    "header": "#dbe9f6",
    "delta": "#fde2c8",
    "snapshot": "#fde2c8",
    "images": "#d9f2d9",
    "words": "#d9f2d9",
    "rest": "#eeeeee",
}


# ------------------------------------------------------------------------------------ try it


def _field_offset(path: str) -> int:
    """Where the field at dotted ``path`` starts, from the layout tables; ``body`` is byte 48."""
    if path == "body":
        return HEADER_LEN
    region, name = path.split(".", 1)
    return next(layout for layout in ALL_LAYOUTS if layout.region == region).field(name).offset


@dataclass(frozen=True)
class TryIt:
    """An edit for a learner to make, and the golden vector upstream's codec rejects the same
    way (its id in ``tests/vectors/cbi1/manifest.json`` and that case's ``checks`` line)."""

    prompt: str
    field: str  # a dotted field path, or ``body``
    byte: int  # which byte of the field
    value: int | None  # the byte's new value; None flips every bit of it
    vector: str
    checks: str

    @property
    def offset(self) -> int:
        """The frame offset this edit changes."""
        return _field_offset(self.field) + self.byte

    def value_for(self, data: bytes) -> int:
        """The new value of the byte in ``data``."""
        return data[self.offset] ^ 0xFF if self.value is None else self.value

    def __str__(self) -> str:
        return f"{self.prompt} (golden vector {self.vector}: {self.checks})"


#: The "Try it" prompts of notebook 01, in the order upstream checks what each breaks.
TRIES: Final = (
    TryIt(
        "Turn the magic into CBI2: set byte 3 to 0x32",
        "header.magic",
        3,
        0x32,
        "bad-magic",
        "magic CBI2 -> Magic",
    ),
    TryIt(
        "Flip every bit of the first body byte: the header's checksum no longer matches",
        "body",
        0,
        None,
        "body-first-byte-flipped",
        "first body byte flipped -> Checksum",
    ),
    TryIt(
        "Set flags to 3, as if it were a bitmask of both kinds",
        "header.flags",
        0,
        0x03,
        "flags-0x0003",
        "flags 0x0003 is not 1 or 2 -> Flags (flags is an enum, not a bitmask)",
    ),
    TryIt(
        "Flip the seed's low byte: the frame is no longer in the lane's format",
        "header.seed",
        0,
        None,
        "seed-mismatch",
        "frame seed 0x5EED, expected seed 0x5EEC -> Format(Mismatch)",
    ),
)


@dataclass(frozen=True)
class ByteEdit:
    """One byte changed and the frame inspected again: what broke, where, and which golden
    vector shows the same (for a "Try it" edit)."""

    offset: int
    before: int
    after: int
    field: str
    inspection: Inspection
    tried: TryIt | None = None

    @property
    def ok(self) -> bool:
        """The edited frame still decodes."""
        return self.inspection.ok

    def __repr__(self) -> str:
        said = f"{len(self.inspection.problems)} problem(s)" if not self.ok else "decodes"
        return f"<ByteEdit: byte {self.offset} 0x{self.before:02x} → 0x{self.after:02x}, {said}>"

    def __str__(self) -> str:
        lines = [f"Try it: {self.tried.prompt}"] if self.tried else []
        lines.append(f"byte {self.offset} ({self.field}): 0x{self.before:02x} → 0x{self.after:02x}")
        if self.ok:
            lines.append("the frame still decodes")
        else:
            lines.append(f"decode raises {self.inspection.problems[0]}")
            lines += [f"  then {p}" for p in self.inspection.problems[1:]]
        if self.tried:
            lines.append(f"golden vector {self.tried.vector}: {self.tried.checks}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The edit and what it broke, for ``--json`` and for tests."""
        problems = [
            {"variant": p.variant, "offset": p.offset, "field": p.field, "message": p.message}
            for p in self.inspection.problems
        ]
        tried = self.tried.vector if self.tried else None
        return {"offset": self.offset, "before": self.before, "after": self.after,
                "field": self.field, "problems": problems, "vector": tried}  # fmt: skip

    def _repr_html_(self) -> str:
        shown = ByteExplorer(self.inspection, tuple(byte_spans(self.inspection)), mark=self.offset)
        return f"<pre>{html.escape(str(self))}</pre>{shown._repr_html_()}"


# ----------------------------------------------------------------------------- the explorer


@dataclass(frozen=True)
class ByteExplorer:
    """A frame's bytes as HTML: hover a byte to see its field, value and offset (a ``title``
    on each byte, so it works in the static report too). ``poke`` and ``edit`` change a byte
    and inspect the frame again; ``tries`` are the prompts to start with."""

    inspection: Inspection
    spans: tuple[ByteSpan, ...]
    shown: int = 1024
    mark: int | None = None  # a byte to outline: the one just edited
    tries: tuple[TryIt, ...] = TRIES

    @property
    def data(self) -> bytes:
        """The frame's bytes as edited."""
        return self.inspection.data

    def field_at(self, offset: int) -> str:
        """The field (or image, or word) byte ``offset`` belongs to."""
        return next((s.field for s in self.spans if s.start <= offset < s.end), "rest of the body")

    def poke(self, offset: int, value: int) -> ByteEdit:
        """Set byte ``offset`` to ``value`` and inspect the frame again, against the format the
        explorer's frame was held to (``byte_explorer(ck.inspect(frame, fmt))``)."""
        after = self.inspection.poke(offset, value)
        return ByteEdit(offset, self.data[offset], value, self.field_at(offset), after)

    def try_it(self, n: int) -> ByteEdit:
        """Make "Try it" edit ``n`` (from 1) of ``tries`` on this frame."""
        tried = self.tries[n - 1]
        edit = self.poke(tried.offset, tried.value_for(self.data))
        return replace(edit, tried=tried)

    def edit(self) -> Any:
        """A live kernel's editor: pick a "Try it" prompt or set an offset and a value, and see
        the frame inspected again; elsewhere (a static report) the explorer itself."""
        return _editor(self) if interactive_charts() else self

    def __repr__(self) -> str:
        shown = min(self.shown, len(self.data))
        return f"<ByteExplorer: {len(self.data):,} bytes, {shown:,} shown, {len(self.spans)} spans>"

    def _byte_html(self, span: ByteSpan, offset: int) -> str:
        tip = html.escape(
            f"{span.field} = {span.value}\nbyte {offset} (field bytes {span.start}–{span.end - 1})",
            quote=True,
        )
        colour = _REGION_COLOURS.get(span.region, "#f6f6f6")
        outline = "; outline: 2px solid #d62728" if offset == self.mark else ""
        return (
            f'<span title="{tip}" data-field="{html.escape(span.field, quote=True)}" '
            f'data-offset="{offset}" style="background:{colour}; padding:1px{outline}">'
            f"{self.data[offset]:02x}</span>"
        )

    def _repr_html_(self) -> str:
        out = ['<div style="font-family: monospace; font-size: 12px; line-height: 1.7">']
        limit = min(self.shown, len(self.data))
        for span in self.spans:
            if span.start >= limit:
                break
            for offset in range(span.start, min(span.end, limit)):
                out.append(self._byte_html(span, offset))
                out.append("<br>" if offset % 16 == 15 else " ")
        if limit < len(self.data):
            out.append(f"<br>… {len(self.data) - limit} more bytes")
        out.append("</div>")
        return "".join(out)


class _Note:
    """A line the editor shows in place of an edit: why the value was refused."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        return f"<b>{html.escape(self.text)}</b>"


def _editor(explorer: ByteExplorer) -> Any:
    """The ipywidgets editor over ``explorer``: a prompt picker, offset, value, apply."""
    import ipywidgets as w
    from IPython.display import display

    options = [("your own edit", 0)] + [
        (f"Try it {n}: {t.prompt}", n) for n, t in enumerate(explorer.tries, 1)
    ]
    pick = w.Dropdown(options=options, layout=w.Layout(width="95%"))
    offset = w.BoundedIntText(value=0, min=0, max=len(explorer.data) - 1, description="offset")
    value = w.Text(value=f"0x{explorer.data[0]:02x}", description="value")
    apply, reset, out = w.Button(description="apply"), w.Button(description="reset"), w.Output()

    def show(shown: Any) -> None:
        out.clear_output(wait=True)
        with out:
            display(shown)  # type: ignore[no-untyped-call]

    def on_apply(_: Any) -> None:
        try:
            show(explorer.poke(offset.value, int(value.value.strip(), 0)))
        except ValueError as exc:
            show(_Note(f"{value.value}: {exc}"))

    def on_pick(change: dict[str, Any]) -> None:
        if change["new"]:
            tried = explorer.tries[change["new"] - 1]
            offset.value, value.value = tried.offset, f"0x{tried.value_for(explorer.data):02x}"
            show(explorer.try_it(change["new"]))

    apply.on_click(on_apply)
    reset.on_click(lambda _: show(explorer))
    pick.observe(on_pick, ["value"])
    show(explorer)
    return w.VBox([pick, w.HBox([offset, value, apply, reset]), out])


def byte_explorer(frame: bytes | Inspection, *, shown: int = 1024) -> ByteExplorer:
    """Hover a byte of ``frame`` to see the field it belongs to, its value and its offset; give
    an ``Inspection`` (``ck.inspect(frame, fmt)``) to have edits held to that format."""
    ins = frame if isinstance(frame, Inspection) else inspect(frame)
    return ByteExplorer(ins, tuple(byte_spans(ins)), shown)

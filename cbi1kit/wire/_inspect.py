"""Lenient inspection and the annotated hexdump: for teaching and for debugging bad frames.

``decode`` stops at the first problem, as a consumer must. ``inspect`` reads as far as the bytes
allow, labels every field from the layout tables, and lists *every* problem it finds, in the
order upstream checks them, so ``inspect(b).problems[0]`` names the same variant ``decode``
would raise.
"""

from __future__ import annotations

import html
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import xxhash

from cbi1kit.errors import Cbi1Error
from cbi1kit.wire._codec import decode
from cbi1kit.wire._format import (
    DELTA_BODY_PREFIX,
    FIXED_FIELDS,
    HEADER_LEN,
    IMAGE_BYTES,
    IMAGES_MAX_FRAME_BYTES,
    LEGACY_MAGIC,
    MAGIC,
    SNAPSHOT_BODY_PREFIX,
    SNAPSHOT_CHUNK_BUCKETS,
    WIRE_VERSION,
    WORD_BYTES,
    FilterFormat,
    FrameKind,
    max_delta_images,
)
from cbi1kit.wire._frames import Buffer, Frame
from cbi1kit.wire._layout import DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX, FieldSpec, Layout

_MAX_LISTED = 16  # per-item problems (bad buckets) listed before "and N more"


def show_u64(value: int) -> str:
    """An exact unsigned value in hex and decimal, as every view in the toolkit shows it."""
    return f"0x{value:x} ({value})"


@dataclass(frozen=True, slots=True)
class InspectedField:
    """One field as found in the bytes: where, the raw bytes, the value (None if cut off)."""

    path: str
    offset: int
    size: int
    raw: bytes
    value: int | bytes | None
    doc: str = ""

    @property
    def display(self) -> str:
        """The value as shown: a number in hex and decimal, bytes as a literal, or how much of a
        cut field there is."""
        if self.value is None:
            return f"(truncated: {len(self.raw)} of {self.size} bytes)"
        if isinstance(self.value, bytes):
            return repr(self.value)
        return show_u64(self.value)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a frame: the upstream variant, where, and what."""

    variant: str
    offset: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.field} (offset {self.offset})" if self.field else f"offset {self.offset}"
        return f"{self.variant} at {where}: {self.message}"


@dataclass(frozen=True)
class Inspection:
    """Everything ``inspect`` learned about one frame."""

    length: int
    kind: FrameKind | None
    fields: tuple[InspectedField, ...]
    problems: tuple[Problem, ...]
    frame: Frame | None = field(repr=False)
    data: bytes = field(repr=False)
    #: the format the frame's seed and bucket count were held to; None: not checked
    expected: FilterFormat | None = None

    @property
    def format_checked(self) -> bool:
        """Whether the frame's seed and bucket count were held to an expected format."""
        return self.expected is not None

    @property
    def ok(self) -> bool:
        """No problems: the frame decodes cleanly."""
        return not self.problems

    @property
    def verdict(self) -> str:
        """One line: how many problems, or that it decodes, and whether its format was checked."""
        if self.problems:
            return f"{len(self.problems)} problem(s):"
        if self.format_checked:
            return "valid: decodes cleanly, in the format expected"
        return "valid: decodes cleanly (its seed and bucket count not checked: no format given)"

    def field(self, path: str) -> InspectedField:
        """The field at dotted ``path`` (e.g. ``header.epoch``); ``KeyError`` if there is none."""
        for f in self.fields:
            if f.path == path:
                return f
        raise KeyError(path)

    def poke(self, offset: int, value: int) -> Inspection:
        """The same bytes with byte ``offset`` set to ``value`` (0..255), inspected again
        against the same expected format: what a learner sees after editing one byte."""
        if not 0 <= offset < len(self.data):
            raise IndexError(f"offset {offset} is outside the frame's {len(self.data)} bytes")
        if not 0 <= value <= 0xFF:
            raise ValueError(f"a byte holds 0..255, got {value}")
        edited = bytearray(self.data)
        edited[offset] = value
        return inspect(bytes(edited), self.expected, length=self.length)

    def hexdump(self, *, head: int = 8, tail: int = 4) -> AnnotatedHexdump:
        """The annotated hex dump: every field, then the first ``head`` and last ``tail`` items."""
        return AnnotatedHexdump.from_inspection(self, head=head, tail=tail)

    def __repr__(self) -> str:
        kind = self.kind.name if self.kind is not None else "unknown kind"
        said = f"{len(self.problems)} problem(s)" if self.problems else "ok"
        said += "" if self.problems or self.format_checked else " (format not checked)"
        return f"<Inspection: {kind}, {self.length:,} bytes, {said}>"

    def __str__(self) -> str:
        kind = self.kind.name if self.kind is not None else "unknown"
        lines = [f"CBI1 frame, {self.length} bytes, kind {kind}"]
        lines += [f"  {f.path:<28} @{f.offset:<6} {f.display}" for f in self.fields]
        lines.append(self.verdict)
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return self.hexdump()._repr_html_()


class _Adder(Protocol):
    def __call__(
        self, variant: str, spec: FieldSpec | None, message: str, offset: int | None = None
    ) -> None: ...


def _int(value: int | bytes | None) -> int:
    return value if isinstance(value, int) else 0


def _read_layout(data: bytes, layout: Layout) -> list[InspectedField]:
    out = []
    for f in layout:
        raw = data[f.offset : f.end]
        value: int | bytes | None = None
        if len(raw) == f.size:
            value = raw if f.kind == "magic" else int.from_bytes(raw, "little")
        out.append(InspectedField(f.path, f.offset, f.size, raw, value, f.doc))
    return out


def inspect(
    data: Buffer, expected_format: FilterFormat | None = None, *, length: int | None = None
) -> Inspection:
    """Read a frame as far as its bytes allow and report every problem, in upstream order.

    Without ``expected_format`` the frame's own (seed, bucket_count) is taken as expected, so
    only an explicit format can produce a ``Format`` mismatch problem. ``length`` is the whole
    frame's length when ``data`` holds only its first bytes (the header and body prefix of a
    file too large to be a frame, so that saying so does not read the file): the problems the
    header shows are listed, ``FrameTooLarge`` first; the checksum and the body are not checked.
    """
    buf = bytes(data)
    n = len(buf) if length is None else length
    whole = n <= len(buf)
    problems: list[Problem] = []
    fields = _read_layout(buf, HEADER)
    hv = {f.path.split(".", 1)[1]: f.value for f in fields}
    bucket_count = _int(hv["bucket_count"])

    def add(variant: str, spec: FieldSpec | None, message: str, offset: int | None = None) -> None:
        problems.append(
            Problem(
                variant,
                spec.offset if offset is None and spec is not None else offset,
                spec.path if spec else None,
                message,
            )
        )

    _header_problems(buf, n, hv, expected_format, add)
    kind = _kind_of(hv["flags"], add)
    if kind is FrameKind.DELTA and n >= HEADER_LEN:
        fields += _inspect_delta(buf, n, bucket_count, add)
    elif kind is FrameKind.SNAPSHOT_CHUNK and n >= HEADER_LEN:
        fields += _inspect_chunk(buf, n, bucket_count, add)
    if not whole:  # the dump shows the bytes that were read, and no partial item
        buf = buf[: max(f.offset + len(f.raw) for f in fields)]

    frame: Frame | None = None
    if not problems and whole:
        fmt = expected_format or FilterFormat.unchecked(
            seed=_int(hv["seed"]), bucket_count=bucket_count
        )
        try:
            frame = decode(fmt, buf)
        except Cbi1Error as exc:  # pragma: no cover - inspect and decode disagree: a bug
            add(exc.variant, None, f"decode disagrees with inspect: {exc}", offset=exc.offset)
    return Inspection(n, kind, tuple(fields), tuple(problems), frame, buf, expected_format)


def _header_problems(
    buf: bytes, n: int, hv: dict[str, Any], expected: FilterFormat | None, add: _Adder
) -> None:
    """The header's problems, in upstream's order: length, magic, wire version, checksum (of
    a whole frame), the fixed format fields, and ``expected``'s seed and bucket count."""
    whole = n <= len(buf)
    if n < HEADER_LEN:
        add("Truncated", None, f"{n} bytes, the header alone is {HEADER_LEN}", offset=n)
    if n > IMAGES_MAX_FRAME_BYTES:
        add("FrameTooLarge", None, f"{n} bytes, maximum {IMAGES_MAX_FRAME_BYTES}", offset=n)
    magic = hv["magic"]
    if magic is not None and magic != MAGIC:
        legacy = " (legacy CKF1 prototype frame)" if magic == LEGACY_MAGIC else ""
        add("Magic", HEADER.field("magic"), f"found {magic!r}, expected {MAGIC!r}{legacy}")
    if hv["wire_version"] is not None and hv["wire_version"] != WIRE_VERSION:
        add("WireVersion", HEADER.field("wire_version"), f"version {_int(hv['wire_version'])}")
    if n >= HEADER_LEN and whole:
        actual = xxhash.xxh3_64_intdigest(buf[HEADER_LEN:]) & 0xFFFFFFFF
        if actual != hv["body_checksum"]:
            add(
                "Checksum",
                HEADER.field("body_checksum"),
                f"frame says 0x{_int(hv['body_checksum']):08x}, body hashes to 0x{actual:08x}",
            )
    for name, want, _what, subvariant in FIXED_FIELDS:
        got = hv[name]
        if got is not None and got != want:
            add(f"Format.{subvariant}", HEADER.field(name), f"found {_int(got)}, expected {want}")
    if expected is not None:
        for name, want in (("seed", expected.seed), ("bucket_count", expected.bucket_count)):
            got = hv[name]
            if got is not None and got != want:
                add(
                    "Format.Mismatch",
                    HEADER.field(name),
                    f"frame says {show_u64(_int(got))}, expected {show_u64(want)}",
                )


def _kind_of(flags: Any, add: _Adder) -> FrameKind | None:
    """The frame kind the flags name (None, and a ``Flags`` problem, for any other)."""
    if not isinstance(flags, int):
        return None
    if flags in (FrameKind.DELTA, FrameKind.SNAPSHOT_CHUNK):
        return FrameKind(flags)
    add("Flags", HEADER.field("flags"), f"0x{flags:04x} (1 = snapshot chunk, 2 = delta)")
    return None


def _inspect_delta(buf: bytes, n: int, bucket_count: int, add: _Adder) -> list[InspectedField]:
    """The body checks of a delta ``n`` bytes long; images are scanned as far as ``buf`` goes."""
    fields = _read_layout(buf, DELTA_PREFIX)
    body_len = n - HEADER_LEN
    if body_len < DELTA_BODY_PREFIX:
        add("Malformed", DELTA_PREFIX.field("image_count"), f"body is {body_len} bytes, prefix 12")
        return fields
    count = _int(fields[1].value)
    maximum = max_delta_images()
    if count > maximum:
        add("DeltaImageCount", DELTA_PREFIX.field("image_count"), f"{count} > {maximum}")
    expected_len = DELTA_BODY_PREFIX + IMAGE_BYTES * count
    if body_len != expected_len:
        add(
            "Malformed",
            None,
            f"image_count {count} needs a {expected_len}-byte body, found {body_len}",
            offset=HEADER_LEN + min(body_len, expected_len),
        )
    start = HEADER_LEN + DELTA_BODY_PREFIX
    whole = min(count, (min(n, len(buf)) - start) // IMAGE_BYTES)
    if whole <= 0:
        return fields
    buckets = np.frombuffer(buf, dtype="<u4", count=whole * 3, offset=start)[::3]
    bad = np.flatnonzero(buckets >= bucket_count)
    for i in bad[:_MAX_LISTED].tolist():
        add(
            "Malformed",
            None,
            f"delta.images[{i}].bucket is {int(buckets[i])}, the lane has {bucket_count}",
            offset=start + i * IMAGE_BYTES,
        )
    if bad.size > _MAX_LISTED:
        add("Malformed", None, f"... and {bad.size - _MAX_LISTED} more out-of-range buckets")
    return fields


def _inspect_chunk(buf: bytes, n: int, bucket_count: int, add: _Adder) -> list[InspectedField]:
    """The body checks of a snapshot chunk ``n`` bytes long (its prefix and length alone)."""
    fields = _read_layout(buf, SNAPSHOT_PREFIX)
    body_len = n - HEADER_LEN
    if body_len < SNAPSHOT_BODY_PREFIX:
        add(
            "Malformed",
            SNAPSHOT_PREFIX.field("chunk_index"),
            f"body is {body_len} bytes, prefix 16",
        )
        return fields
    index, count, offset = (_int(f.value) for f in fields)
    if count == 0:
        add("Malformed", SNAPSHOT_PREFIX.field("chunk_count"), "chunk_count is 0")
    elif index >= count:
        add("Malformed", SNAPSHOT_PREFIX.field("chunk_index"), f"{index} >= chunk_count {count}")
    words_len = body_len - SNAPSHOT_BODY_PREFIX
    if words_len % WORD_BYTES:
        add(
            "Malformed",
            None,
            f"{words_len} word bytes is not a whole number of words",
            offset=n - words_len % WORD_BYTES,
        )
    word_count = words_len // WORD_BYTES
    if word_count > SNAPSHOT_CHUNK_BUCKETS:
        add("SnapshotChunkWordCount", None, f"{word_count} words > {SNAPSHOT_CHUNK_BUCKETS}")
    if offset + word_count > bucket_count:
        add(
            "Malformed",
            SNAPSHOT_PREFIX.field("bucket_offset"),
            f"offset {offset} + {word_count} words ends past the {bucket_count}-bucket lane",
        )
    return fields


# ------------------------------------------------------------------------------------ hexdump


#: bytes a row of a body of unknown kind shows: as many as a delta image, so a dump fits 80
#: columns whatever the frame
_BODY_ROW = IMAGE_BYTES


@dataclass(frozen=True, slots=True)
class HexRow:
    """One line of the dump: a field, one body item, or a marker for skipped rows."""

    offset: int
    raw: bytes
    label: str
    value: str
    region: str  # header | prefix | item | tail | skip


@dataclass(frozen=True)
class AnnotatedHexdump:
    """Every header field labelled from the layout; long bodies windowed to head/tail rows."""

    rows: tuple[HexRow, ...]
    title: str

    @classmethod
    def from_inspection(cls, ins: Inspection, *, head: int = 8, tail: int = 4) -> AnnotatedHexdump:
        """The dump of an inspection: every header and prefix field, then the first ``head`` and
        last ``tail`` items (images or words) of the body."""
        buf = ins.data
        rows = [
            HexRow(
                f.offset, f.raw, f.path, f.display, "header" if f.offset < HEADER_LEN else "prefix"
            )
            for f in ins.fields
        ]
        end = max((f.offset + len(f.raw) for f in ins.fields), default=0)
        if ins.kind is FrameKind.DELTA:
            rows += _item_rows(buf, end, IMAGE_BYTES, "delta.images", _image_value, head, tail)
        elif ins.kind is FrameKind.SNAPSHOT_CHUNK:
            base = _int(ins.fields[-1].value) if len(ins.fields) > len(HEADER.fields) else 0
            rows += _item_rows(
                buf, end, WORD_BYTES, "snapshot.words", _word_value(base), head, tail
            )
        elif end < len(buf):
            rows += _item_rows(buf, end, _BODY_ROW, "body", _no_value, head, tail)
        kind = ins.kind.name if ins.kind is not None else "unknown kind"
        status = "ok" if ins.ok else f"{len(ins.problems)} problem(s)"
        return cls(tuple(rows), f"CBI1 {kind}, {ins.length} bytes, {status}")

    def text(self, width: int | None = 80) -> str:
        """The dump as lines of at most ``width`` characters where it can: offset, bytes,
        label and value; a value that does not fit goes on its own line under the label.
        ``None``: every value beside its label (``str``: the same in a file as anywhere)."""
        hex_w = max((len(r.raw) * 3 - 1 for r in self.rows if r.region != "skip"), default=0)
        hex_w = max(hex_w, 0)
        label_w = max((len(r.label) for r in self.rows if r.region != "skip"), default=0)
        lines = [self.title]
        for r in self.rows:
            if r.region == "skip":
                lines.append(f"{'':>8}  {r.label}")
                continue
            line = f"{r.offset:08x}  {r.raw.hex(' '):<{hex_w}}  {r.label:<{label_w}}  {r.value}"
            if width is not None and len(line) > width:
                at = 8 + 2 + hex_w + 2
                lines += [line[: at + len(r.label)], " " * 10 + r.value]
            else:
                lines.append(line)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<AnnotatedHexdump {self.title!r}: {len(self.rows)} rows>"

    def __str__(self) -> str:
        return self.text(None)

    def _repr_html_(self) -> str:
        colours = {"header": "#e8f0fe", "prefix": "#fef7e0", "item": "#e6f4ea", "tail": "#fce8e6"}
        out = [
            f"<div><b>{html.escape(self.title)}</b><table style='font-family:monospace'>",
            "<tr><th>offset</th><th>bytes</th><th>field</th><th>value</th></tr>",
        ]
        for r in self.rows:
            bg = colours.get(r.region, "#ffffff")
            if r.region == "skip":
                out.append(f"<tr><td></td><td colspan='3'><i>{html.escape(r.label)}</i></td></tr>")
                continue
            out.append(
                f"<tr style='background:{bg}'><td>{r.offset}</td><td>{r.raw.hex(' ')}</td>"
                f"<td>{html.escape(r.label)}</td><td>{html.escape(r.value)}</td></tr>"
            )
        out.append("</table></div>")
        return "".join(out)


def _no_value(raw: bytes, i: int) -> str:
    return ""


def _image_value(raw: bytes, i: int) -> str:
    if len(raw) < IMAGE_BYTES:
        return f"(truncated: {len(raw)} of {IMAGE_BYTES} bytes)"
    bucket, word = struct.unpack("<IQ", raw)
    return f"bucket {bucket}, word {show_u64(word)}"


_ItemValue = Callable[[bytes, int], str]


def _word_value(base: int) -> _ItemValue:
    def value(raw: bytes, i: int) -> str:
        if len(raw) < WORD_BYTES:
            return f"(truncated: {len(raw)} of {WORD_BYTES} bytes)"
        word = int.from_bytes(raw, "little")
        return f"bucket {base + i}: {show_u64(word)}"

    return value


def _item_rows(
    buf: bytes, start: int, size: int, label: str, value: _ItemValue, head: int, tail: int
) -> Iterator[HexRow]:
    total = max(0, -(-(len(buf) - start) // size))
    shown = (
        range(total) if total <= head + tail else [*range(head), -1, *range(total - tail, total)]
    )
    for i in shown:
        if i < 0:
            skipped = total - head - tail
            first, last = start + head * size, start + (total - tail) * size - 1
            yield HexRow(
                first, b"", f"... {skipped} more rows (bytes {first}-{last}) ...", "", "skip"
            )
            continue
        at = start + i * size
        raw = buf[at : at + size]
        region = "item" if len(raw) == size else "tail"
        yield HexRow(at, raw, f"{label}[{i}]", value(raw, i), region)

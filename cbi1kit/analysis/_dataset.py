"""The partitioned dataset: the tables of many captures as hive-partitioned Parquet that more
captures append to without rewriting anything, read back lazily with polars. Layout
(``PARTITION_SCHEMA``), metadata and the commit protocol (a source's manifest is its commit;
:func:`dataset_lock`): docs/tables.md.

The unit of work is the capture file (:func:`convert_segment`): frames, then a replay pass for
images, snapshots and violations. A rotated recording's segments go in order, each taking the state
the one before left (:class:`Carry`), so a segment set converts as the unrotated capture would;
:func:`export_dataset` runs them in this process, ``cbi1kit.fleet.convert`` as one Dask task each.
"""

from __future__ import annotations

import contextlib
import copyreg
import fcntl
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import blake3
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from google.protobuf.message import Message

from cbi1kit._files import unwritable
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit._text import hex_id
from cbi1kit._version import __version__
from cbi1kit.analysis._capture import Capture
from cbi1kit.analysis._events import Violation
from cbi1kit.analysis._fast import feeder_of
from cbi1kit.analysis._replayer import Replayer
from cbi1kit.analysis._schema import (
    _FRAME_KEYS,
    DATASET_SCHEMA_VERSION,
    DATASET_TABLES,
    PARTITION_SCHEMA,
    VIOLATIONS_SCHEMA,
    arrow_schema,
    parquet_writer,
)
from cbi1kit.analysis._tables import Collector
from cbi1kit.capture._file import is_capture_file
from cbi1kit.capture._items import ReadCursor
from cbi1kit.capture._segments import CaptureSet, capture_segments, read_segment_info
from cbi1kit.errors import (
    CaptureError,
    CaptureVariant,
    DatasetError,
    DatasetVariant,
    OutputError,
    OutputVariant,
    one_line,
)

#: captures as ``export_dataset`` takes them: a path, a recording, or a list of them
Captures = str | os.PathLike[str] | CaptureSet | Sequence[str | os.PathLike[str] | CaptureSet]

DATASET_FILE: Final = "cbi1kit-dataset.json"
_SOURCES: Final = "sources"
_OWN: Final = ".cbi1kit-dataset"  # the lock, and a description being written, start so
_LOCK: Final = f"{_OWN}.lock"
_FORMAT: Final = "cbi1kit partitioned dataset"
TABLES: Final = tuple(DATASET_TABLES)


# ------------------------------------------------------------------------------ the sources


@dataclass(frozen=True, slots=True)
class SegmentSource:
    """One capture file to convert: its path, the capture it belongs to (a rotated recording's
    set id, or this file's hash when it stands alone), its segment number, its content hash."""

    path: Path
    capture: str
    segment: int
    source: str


def _content_hash(path: Path) -> str:
    h = blake3.blake3(max_threads=1)
    h.update_mmap(path)
    return h.hexdigest()[:32]


def segment_source(path: str | os.PathLike[str]) -> SegmentSource:
    """What a capture file is to the dataset (its content hashed: one read of the file)."""
    path = Path(path)
    source = _content_hash(path)
    info = read_segment_info(path)
    if info is None:
        return SegmentSource(path, source, 0, source)
    return SegmentSource(path, info.set_id, info.segment, source)


def capture_files(captures: Captures) -> list[list[Path]]:
    """Each capture's files, in order: a path (a rotated recording's first segment finds the
    rest) or a ``CaptureSet``, or a list of them (a list of plain paths is several captures).
    A file named twice is converted once. A file that is no capture (CBI1 frames, a grpcurl
    dump, anything else) is refused before anything is written: ``CaptureError``
    ``Unreadable`` (the dataset's rows are a capture's records and streams)."""
    if isinstance(captures, (str, os.PathLike)):
        captures = [captures]
    out: list[list[Path]] = []
    seen: set[Path] = set()
    for capture in captures:
        files = []
        for path in capture_segments(capture):
            if not is_capture_file(path):
                raise CaptureError(
                    CaptureVariant.Unreadable,
                    "not a kvrcap capture: a dataset holds captures (`cbi1kit export` writes "
                    "the tables of other sources)",
                    source=str(path),
                    offset=0,
                    record_index=0,
                )
            key = path.resolve()
            if key not in seen:
                seen.add(key)
                files.append(path)
        if files:
            out.append(files)
    return out


# ------------------------------------------------------------------------- the dataset file


def _json_file(
    path: Path, variant: DatasetVariant, wrong: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The JSON object in ``path``; one that does not read, or that ``wrong`` refuses, is
    ``DatasetError`` ``variant`` naming it."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        why = _printable(exc)
    else:
        if isinstance(value, dict) and not wrong(value):
            return value
        why = "not what cbi1kit writes there"
    raise DatasetError(variant, f"{path} cannot be read: {why}", field=str(path))


def _read_meta(out: Path) -> dict[str, Any]:
    meta = _json_file(
        out / DATASET_FILE, DatasetVariant.NotADataset, lambda m: m.get("format") != _FORMAT
    )
    if meta.get("schema_version") != DATASET_SCHEMA_VERSION:
        raise DatasetError(
            DatasetVariant.SchemaVersion,
            f"{out} holds tables of schema version {meta.get('schema_version')} (written by "
            f"cbi1kit {meta.get('created_by', '?')}); this cbi1kit ({__version__}) reads and "
            f"writes version {DATASET_SCHEMA_VERSION}: use another directory",
            field=str(out),
            expected=DATASET_SCHEMA_VERSION,
            actual=meta.get("schema_version"),
        )
    return meta


def prepare_dataset(out_dir: str | os.PathLike[str]) -> Path:
    """The dataset at ``out_dir``, made when new (or an empty directory); an existing one is
    appended to when its schema version is this cbi1kit's (``DatasetError`` ``SchemaVersion``
    otherwise), and a directory holding anything else is refused (``OutputError`` ``Exists``)."""
    out = Path(out_dir)
    if (out / DATASET_FILE).exists():
        _read_meta(out)
        return out
    if out.exists() and not out.is_dir() and not out.is_file():
        raise OutputError(
            OutputVariant.NotAFile,
            f"{out} is a device, pipe or socket: a dataset is a directory",
            field=str(out),
        )
    if out.exists() and (
        not out.is_dir() or any(not p.name.startswith(_OWN) for p in out.iterdir())
    ):
        raise OutputError(
            OutputVariant.Exists,
            f"{out} exists and is not a cbi1kit dataset (no {DATASET_FILE}): give a new or "
            "empty directory, or a dataset to append to",
            field=str(out),
        )
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": _FORMAT,
        "schema_version": DATASET_SCHEMA_VERSION,
        "created_by": __version__,
        "tables": list(TABLES),
        "partitioning": list(PARTITION_SCHEMA),
    }
    # written aside and linked into place: the description appears whole or not at all
    tmp = out / f"{_OWN}.json.{os.getpid()}{_PART}"
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True))
    try:
        os.link(tmp, out / DATASET_FILE)
    except FileExistsError:  # made meanwhile by another writer: append to it
        _read_meta(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


@contextlib.contextmanager
def dataset_lock(out_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the dataset at ``out_dir`` (made by :func:`prepare_dataset`) for one export: another
    export of it meanwhile is ``DatasetError`` ``Busy``. The holder first sweeps what no
    manifest lists: the files of a conversion that was killed."""
    out = Path(out_dir)
    fd = os.open(out / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatasetError(
                DatasetVariant.Busy,
                f"{out}: another export is writing to this dataset; run again when it ends",
                field=str(out),
            ) from None
        _sweep(out)
        yield out
    finally:
        os.close(fd)  # and the lock with it


def _sweep(out: Path) -> None:
    """Remove what no manifest lists: table files of an unfinished conversion (renamed or
    not), manifests and descriptions being written. Under the lock only."""
    published = {f for m in _manifests(out).values() for f in m.get("files", ())}
    for table in TABLES:
        for path in sorted((out / table).rglob("*")) if (out / table).exists() else ():
            name = path.relative_to(out).as_posix()
            ours = path.name.endswith((".parquet", f".parquet{_PART}"))
            if ours and path.is_file() and name not in published:
                path.unlink()
    for path in (*(out / _SOURCES).glob(f".*{_PART}"), *out.glob(f"{_OWN}.json.*{_PART}")):
        path.unlink(missing_ok=True)


def _damage(manifest: dict[str, Any]) -> tuple[int, str | None]:
    """A converted file's damaged ranges and the first one (none in a manifest from before
    they were recorded)."""
    found = manifest.get("damage") or {}
    return int(found.get("ranges", 0)), found.get("first")


def _manifests(out: Path) -> dict[str, dict[str, Any]]:
    """Every published source's manifest, by source. One is written aside and renamed into
    place, so one that does not read is damage, named (``Unreadable``)."""
    found = {}
    for p in sorted((out / _SOURCES).glob("*.json")):
        found[p.stem] = _json_file(
            p, DatasetVariant.Unreadable, lambda m: not isinstance(m.get("files"), list)
        )
    return found


def _published(out: Path) -> dict[str, list[Path]]:
    """Each table's files that a manifest lists: the dataset's whole content."""
    files: dict[str, list[Path]] = {t: [] for t in TABLES}
    for manifest in _manifests(out).values():
        for name in manifest["files"]:
            table = name.split("/", 1)[0]
            if table in files:
                files[table].append(out / name)
    return {t: sorted(found) for t, found in files.items()}


# ------------------------------------------------------------------------------- conversion


def _reduce_message(message: Message) -> tuple[Any, tuple[str, bytes]]:
    return _message, (message.DESCRIPTOR.name, message.SerializeToString())


def _message(name: str, data: bytes) -> Message:
    cls: Any = getattr(pb, name)
    return cls.FromString(data)  # type: ignore[no-any-return]


# The relay messages a replay holds pickle by their bytes, so that a conversion's state
# (:class:`Carry`) can go from one Dask worker to the next (the generated module's name is not
# importable as pickle would look it up).
for _name in pb.DESCRIPTOR.message_types_by_name:
    copyreg.pickle(getattr(pb, _name), _reduce_message)


@dataclass(slots=True)
class Carry:
    """What converting a rotated recording's next segment needs from the ones before: where the
    reader stands (frame numbers, open streams) and the replayer with every lane."""

    cursor: ReadCursor = field(default_factory=ReadCursor)
    collector: Collector = field(default_factory=Collector)
    player: Replayer | None = None

    def __post_init__(self) -> None:
        if self.player is None:
            self.player = Replayer(keep_history=False, keep_events=False, **self.collector.hooks())


@dataclass(frozen=True, slots=True)
class SegmentResult:
    """One capture file's conversion: ``skipped`` when the dataset already held it; the rows
    written per table and the files (relative to the dataset); the damaged ranges read past
    (``SOURCE_ERROR`` frames) and the first one's message (a skipped file's as its conversion
    recorded them, so that converting it again says so again)."""

    source: str
    capture: str
    segment: int
    path: str
    skipped: bool
    rows: dict[str, int]
    files: tuple[str, ...]
    damaged: int = 0
    first_damage: str | None = None


def _arrow_schema(table: str) -> pa.Schema:
    """A table's files' schema: its columns (its partitions are directories) and metadata."""
    return arrow_schema(DATASET_TABLES[table]).with_metadata(
        {
            "cbi1kit.schema_version": str(DATASET_SCHEMA_VERSION),
            "cbi1kit.version": __version__,
            "cbi1kit.table": table,
        }
    )


_PARTITION_OF: Final = (
    pl.col("dc_id").alias("dc"),
    pl.col("producer_incarnation").alias("producer"),
    pl.col("recv_time").dt.date().alias("date"),
)


def _provenance(seg: SegmentSource) -> list[pl.Expr]:
    return [
        pl.lit(seg.capture, pl.Utf8).alias("capture"),
        pl.lit(seg.segment, pl.UInt32).alias("segment"),
        pl.lit(seg.source, pl.Utf8).alias("source"),
    ]


_PART: Final = ".part"  # a file being written: not ``*.parquet`` until renamed


#: a partition directory's value where the row has none (as pyarrow's and polars' hive readers)
_NULL_PARTITION: Final = "__HIVE_DEFAULT_PARTITION__"


def _hive_dirs(key: tuple[Any, ...]) -> list[str]:
    """``name=value`` directories of one partition key (a DC id in hex, dates ISO, the other
    integers in decimal)."""
    return [
        f"{name}={_NULL_PARTITION if value is None else value}"
        for name, value in zip(PARTITION_SCHEMA, (_hex_dc(key[0]), *key[1:]), strict=True)
    ]


def _hex_dc(dc_id: int | None) -> str | None:
    return None if dc_id is None else hex_id(dc_id)


class _TableWriter:
    """One table's rows of one source, written straight into the table's partitions as hidden
    ``.<source>-<call>-<n>.parquet.part`` files (one per partition a call reaches, on this thread);
    :meth:`publish` renames them into place. Not pyarrow's dataset writer: its writer threads could
    abort the process at exit (``terminate called without an active exception``)."""

    def __init__(self, table: str, seg: SegmentSource, out: Path) -> None:
        self.table = table
        self.seg = seg
        schema = _arrow_schema(table)
        self.schema = schema.with_metadata(
            {**schema.metadata, b"cbi1kit.source": seg.source.encode()}
        )
        self.root = out / table
        self.rows = 0
        self.calls = 0
        self.written: list[Path] = []

    def parts(self, batches: Iterable[pl.DataFrame]) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
        """Each batch's rows, with their provenance, split by partition key."""
        columns = list(DATASET_TABLES[self.table])
        for df in batches:
            if not df.height:
                continue
            full = df.with_columns(*_provenance(self.seg), *_PARTITION_OF).select(
                *columns, *PARTITION_SCHEMA
            )
            self.rows += full.height
            for key, part in full.partition_by(
                list(PARTITION_SCHEMA), as_dict=True, maintain_order=True, include_key=False
            ).items():
                yield key, part.to_arrow().cast(self.schema)

    def write(self, batches: Iterable[pl.DataFrame]) -> None:
        self.calls += 1
        writers: dict[tuple[Any, ...], pq.ParquetWriter] = {}
        try:
            for key, rows in self.parts(batches):
                writer = writers.get(key)
                if writer is None:
                    name = f".{self.seg.source}-{self.calls}-{len(writers)}.parquet{_PART}"
                    path = self.root.joinpath(*_hive_dirs(key), name)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    writer = parquet_writer(path, self.schema, compression="zstd")
                    writers[key] = writer
                    self.written.append(path)
                writer.write_table(rows)
        finally:
            for writer in writers.values():
                writer.close()

    @staticmethod
    def _final(part: Path) -> Path:
        """Where a hidden ``.NAME.part`` file goes when published: ``NAME``."""
        return part.with_name(part.name[1 : -len(_PART)])

    def publish(self) -> list[str]:
        """Every file renamed into place; their paths relative to the dataset."""
        done = []
        for part in self.written:
            final = self._final(part)
            os.replace(part, final)
            done.append(final.relative_to(self.root.parent).as_posix())
        return sorted(done)

    def discard(self) -> None:
        """Every file written, renamed into place or not, removed."""
        for part in self.written:
            part.unlink(missing_ok=True)
            self._final(part).unlink(missing_ok=True)


def _violations_df(events: list[Violation]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "frame_index": [e.frame_index for e in events],
            "stream_id": [e.stream_id for e in events],
            "sequence": [e.sequence for e in events],
            "rule": [e.rule for e in events],
            "reason": [e.reason for e in events],
            "action": [e.action for e in events],
        },
        schema=VIOLATIONS_SCHEMA,
    )


def _replay_segment(
    capture: Capture, carry: Carry, flush_rows: int
) -> Iterator[tuple[str, pl.DataFrame]]:
    """(table, rows) of one file's replay pass, going on from ``carry``."""
    player, c = carry.player, carry.collector
    assert player is not None
    feeder = feeder_of("compiled", player)
    violations: list[Violation] = []
    seen = len(player._violations)
    for item in capture.items():
        feeder.feed(item)
        violations += player._violations[seen:]
        seen = len(player._violations)
        if c.image_rows >= flush_rows:
            images, _snapshots = c.take_images()
            yield "images", images
        if len(violations) >= flush_rows:
            yield "violations", _violations_df(violations)
            violations.clear()
    images, snapshots = c.take()
    yield "images", images
    yield "snapshots", snapshots
    yield "violations", _violations_df(violations)


def _keyed(table: str, rows: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """A replay table's rows with what they take from their frame."""
    own = [k for k in keys.columns if k == "frame_index" or k not in rows.columns]
    return rows.join(keys.select(own), on="frame_index", how="left").with_columns(
        pl.col("cache_semantics", "routing_scope").cast(pl.Utf8)
    )


@contextlib.contextmanager
def _all_or_nothing(writers: dict[str, _TableWriter], out: Path, source: str) -> Iterator[None]:
    """A conversion's files, kept only if it ends: a failed write (a full disk) removes every
    file it wrote and names the dataset (``OutputError`` ``Unwritable``)."""
    try:
        yield
    except OSError as exc:
        for writer in writers.values():
            writer.discard()
        _manifest_part(out, source).unlink(missing_ok=True)
        raise unwritable([out], exc) from None


def _manifest_part(out: Path, source: str) -> Path:
    """Where a source's manifest is written before it is renamed into place (the commit)."""
    return out / _SOURCES / f".{source}.json{_PART}"


def _refuse_conflict(seg: SegmentSource, out: Path, present: dict[str, dict[str, Any]]) -> None:
    """``DatasetError`` ``Conflict`` when the dataset holds this segment of the recording with
    other content."""
    for other in present.values():
        if (other.get("capture"), other.get("segment")) == (seg.capture, seg.segment):
            raise DatasetError(
                DatasetVariant.Conflict,
                f"{seg.path}: segment {seg.segment} of recording {seg.capture} is already in "
                f"{out} with other content (source {other.get('source')}; was it converted "
                "while still being written?)",
                field=str(seg.path),
            )


_KEY_COLUMNS: Final = ("frame_index", *_FRAME_KEYS)
_STRINGS: Final = pl.col("cache_semantics", "routing_scope").cast(pl.Categorical)


@dataclass(slots=True)
class _FramesPass:
    """One file's frames as they are written: each batch's keys (what the replay tables' rows
    take from their frame) and the damaged ranges read past (``SOURCE_ERROR`` frames)."""

    keys: list[pl.DataFrame] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)

    def batches(self, capture: Capture, batch_records: int) -> Iterator[pl.DataFrame]:
        for df in capture.frame_batches(batch_rows=batch_records):
            self.keys.append(df.select(_KEY_COLUMNS).with_columns(_STRINGS))
            self.damage.extend(
                df.filter(pl.col("kind") == "SOURCE_ERROR").get_column("validation_error")
            )
            yield df

    def key(self) -> pl.DataFrame:
        """Every frame's keys, by ``frame_index``."""
        if self.keys:
            return pl.concat(self.keys)
        schema = DATASET_TABLES["frames"]
        return pl.DataFrame(schema={k: schema[k] for k in _KEY_COLUMNS}).with_columns(_STRINGS)


def _write_replay(
    writers: dict[str, _TableWriter], tables: Iterable[tuple[str, pl.DataFrame]], key: pl.DataFrame
) -> None:
    """The replay pass's tables, each row with its frame's keys: each flush of images written
    at once, the snapshots and violations at the end."""
    small: dict[str, list[pl.DataFrame]] = {"snapshots": [], "violations": []}
    for table, df in tables:
        if not df.height:
            continue
        if table == "images":  # a flush of up to ``flush_rows`` images: written at once
            writers[table].write([_keyed(table, df, key)])
        else:
            small[table].append(df)
    for table, dfs in small.items():
        writers[table].write(_keyed(table, df, key) for df in dfs)


def convert_segment(
    seg: SegmentSource | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    carry: Carry | None = None,
    *,
    batch_records: int = 65536,
    flush_rows: int = 1 << 20,
) -> tuple[SegmentResult, Carry]:
    """Convert one capture file into the dataset (made beforehand: :func:`prepare_dataset`),
    going on from ``carry`` (the segment before's; None for a capture's first file); the
    result and the state the next segment takes. A file the dataset holds is replayed for that
    state, not written again."""
    out = Path(out_dir)
    if not isinstance(seg, SegmentSource):
        seg = segment_source(seg)
    carry = carry if carry is not None else Carry()
    first = carry.cursor.frames
    present = _manifests(out)
    capture = Capture(seg.path, keep_tables=False, cursor=carry.cursor)
    held = (seg.source, seg.capture, seg.segment, str(seg.path))
    if seg.source in present:  # replayed for the state; its damage as its conversion found it
        for _ in _replay_segment(capture, carry, flush_rows):
            pass
        return SegmentResult(*held, True, {}, (), *_damage(present[seg.source])), carry
    _refuse_conflict(seg, out, present)
    frames = _FramesPass()
    writers = {t: _TableWriter(t, seg, out) for t in TABLES}
    with _all_or_nothing(writers, out, seg.source):
        writers["frames"].write(frames.batches(capture, batch_records))
        _write_replay(writers, _replay_segment(capture, carry, flush_rows), frames.key())
        files = [f for w in writers.values() for f in w.publish()]
        rows, damage = {t: w.rows for t, w in writers.items()}, frames.damage
        manifest = {
            "source": seg.source,
            "capture": seg.capture,
            "segment": seg.segment,
            "path": str(seg.path),
            "rows": rows,
            "files": files,
            "frames": [first, carry.cursor.frames],
            "damage": {"ranges": len(damage), "first": damage[0] if damage else None},
            "schema_version": DATASET_SCHEMA_VERSION,
            "cbi1kit_version": __version__,
        }
        (out / _SOURCES).mkdir(exist_ok=True)
        tmp = _manifest_part(out, seg.source)
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
        os.replace(tmp, out / _SOURCES / f"{seg.source}.json")  # the file is in the dataset now
    return SegmentResult(*held, False, rows, tuple(files), *_damage(manifest)), carry


def export_dataset(
    captures: Captures, out_dir: str | os.PathLike[str], *, batch_records: int = 65536
) -> list[SegmentResult]:
    """Append captures to the partitioned dataset at ``out_dir`` in this process: a capture path
    (a rotated recording's first segment finds the rest), a list of them, or a ``CaptureSet``
    (a list of plain paths is several captures; ``[CaptureSet.of([...])]`` one recording).
    Files already in the dataset are skipped; nothing written before is rewritten."""
    captured = capture_files(captures)  # a file that is no capture: refused before any write
    out = prepare_dataset(out_dir)
    results = []
    with dataset_lock(out):
        for files in captured:
            carry = None
            for path in files:
                result, carry = convert_segment(path, out, carry, batch_records=batch_records)
                results.append(result)
    return results


# ---------------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class Dataset:
    """A partitioned dataset, read lazily: each table a polars ``LazyFrame`` over its files with
    the hive partitions ``dc``, ``producer`` and ``date`` as columns, so that a filter on them
    reads only the partitions it keeps (``frames``, ``images``, ``snapshots``,
    ``violations``; ``sources()``: what has been converted into it, with the damage each file
    had)."""

    path: Path
    schema_version: int
    tables: dict[str, pl.LazyFrame]
    #: each table's published files (those a source's manifest lists) when it was opened
    published: dict[str, list[Path]]

    @property
    def frames(self) -> pl.LazyFrame:
        """One row per message (``FRAMES_SCHEMA`` with provenance; ``docs/tables.md``)."""
        return self.tables["frames"]

    @property
    def images(self) -> pl.LazyFrame:
        """One row per image of every applied delta, with the word it replaced."""
        return self.tables["images"]

    @property
    def snapshots(self) -> pl.LazyFrame:
        """One row per installed snapshot."""
        return self.tables["snapshots"]

    @property
    def violations(self) -> pl.LazyFrame:
        """One row per rule violation the replay found."""
        return self.tables["violations"]

    def files(self, table: str) -> list[Path]:
        """Every published file of one of the tables."""
        return list(self.published[table])

    def sources(self) -> pl.DataFrame:
        """Each converted capture file (capture, segment, path, damage), by capture and segment."""
        found = _manifests(self.path)
        damage = [_damage(m) for m in found.values()]
        return pl.DataFrame(
            {
                "source": list(found),
                "capture": [m["capture"] for m in found.values()],
                "segment": [m["segment"] for m in found.values()],
                "path": [m["path"] for m in found.values()],
                "damaged_ranges": [ranges for ranges, _ in damage],
                "first_damage": [first for _, first in damage],
            },
            schema={
                "source": pl.Utf8,
                "capture": pl.Utf8,
                "segment": pl.UInt32,
                "path": pl.Utf8,
                "damaged_ranges": pl.UInt32,
                "first_damage": pl.Utf8,
            },
        ).sort("capture", "segment")


def scan_table(table: str, files: list[str] | list[Path] | str) -> pl.LazyFrame:
    """One dataset table's files (or a glob) as a LazyFrame in the table's schema."""
    schema = {**DATASET_TABLES[table], **PARTITION_SCHEMA}
    if not files:
        return pl.LazyFrame(schema=schema)
    # the schema is given, not read from a file: every file was written in it, and a filter
    # on the partitions then reaches the scan with nothing in between (and opens no other file)
    return pl.scan_parquet(
        files if isinstance(files, str) else [str(f) for f in files],
        schema=pl.Schema(DATASET_TABLES[table]),
        hive_partitioning=True,
        hive_schema=pl.Schema(PARTITION_SCHEMA),
    )


def collect_table(frame: pl.LazyFrame, table: str, files: Iterable[str | Path]) -> pl.DataFrame:
    """``frame`` (a query over the ``table`` files ``files``) collected; a file that cannot be
    read (damaged, cut short, gone) is ``DatasetError`` ``Unreadable`` naming it, found by
    its Parquet footer (polars' own error names no file)."""
    try:
        return frame.collect()
    except (pl.exceptions.ComputeError, OSError) as exc:
        named = [Path(f) for f in files]
        bad = next((f for f in named if _unreadable_parquet(f)), None)
        where = str(bad) if bad is not None else f"one of the {len(named)} {table} file(s)"
        raise DatasetError(
            DatasetVariant.Unreadable, f"{where} cannot be read: {_printable(exc)}", field=table
        ) from None


def _printable(exc: BaseException) -> str:
    """An error on one line of plain text (polars quotes the damaged bytes it found)."""
    return one_line(str(exc)).encode("ascii", "backslashreplace").decode()


def _unreadable_parquet(path: Path) -> bool:
    try:
        pq.read_metadata(path)
    except (OSError, pa.ArrowException):
        return True
    return False


def open_dataset(path: str | os.PathLike[str]) -> Dataset:
    """The dataset at ``path`` (``DatasetError`` ``NotADataset`` / ``SchemaVersion``)."""
    out = Path(path)
    if not (out / DATASET_FILE).exists():
        raise DatasetError(
            DatasetVariant.NotADataset,
            f"{out} is not a cbi1kit dataset (no {DATASET_FILE}; `cbi1kit export --dataset` "
            "or `cbi1kit fleet convert` make one)",
            field=str(out),
        )
    meta = _read_meta(out)
    published = _published(out)
    tables = {table: scan_table(table, files) for table, files in published.items()}
    return Dataset(out, int(meta["schema_version"]), tables, published)

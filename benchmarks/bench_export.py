"""``export_parquet`` of a capture against one read of the same file (issue #16: <= 5x).

For each mix of ``_harness.MIXES`` a seeded capture is generated (``bench_tables.generate_mix``)
and exported to Parquet (frames, images and snapshots: every table past the frames table goes
through replay) in alternating rounds with ``bench_tables.read_once`` (every byte of the file
read once into a buffer allocated once, page cache warm for both): the least any reader of those
bytes does. Goal: export within 5x that read (>= 0.2x), judged on the CPU median.

Beside it, the export's two passes alone, each against the same read: the frames table
(``frames_table(path).collect()``) and the replay every other table comes from (``replay(path,
keep_events=False, keep_history=False)``, what ``cbi1kit replay`` runs). The export can be no
quicker than its replay, so the replay's ratio bounds what the export's can reach. And the
export's own tables, already in memory, written again by pyarrow's Parquet writer with nothing
before it (as the export writes them, and set to do the least it can: no compression, dictionary
or statistics): a floor under any Parquet export of these tables, whatever computes them.

    .venv/bin/python benchmarks/bench_export.py [--size-mib 256] [--rounds 3] [--quick]
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from _harness import MIXES, Comparison, MiB, Report, compare, measure, parser
from bench_tables import generate_mix, read_once


def write_tables(tables: dict[str, pa.Table], out: Path, *, cheapest: bool) -> None:
    """The floor under any export of these tables: an export's own tables, already in memory
    (read back from its files), written again with no work before the writer: by the export's
    own writer, or (``cheapest``) by the least work pyarrow's Parquet writer can be set to do
    (no compression, no dictionary, no statistics)."""
    from cbi1kit.analysis._schema import parquet_writer

    out.mkdir(exist_ok=True)
    for name, table in tables.items():
        writer = (
            pq.ParquetWriter(
                out / name,
                table.schema,
                compression="none",
                use_dictionary=False,
                write_statistics=False,
            )
            if cheapest
            else parquet_writer(out / name, table.schema)
        )
        with writer:
            writer.write_table(table)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--size-mib", type=int, default=256, help="capture size per mix")
    args = ap.parse_args()
    size = (8 if args.quick else args.size_mib) * MiB
    rounds = args.rounds or (1 if args.quick else 3)
    report = Report("export_parquet vs one read of the file", args.quick)

    from cbi1kit.analysis import frames_table, replay
    from cbi1kit.analysis._export import export_parquet

    with tempfile.TemporaryDirectory(prefix="cbi1kit-bench-export-") as scratch:
        for mix in MIXES.values():
            path = Path(scratch) / f"{mix.name}.kvrcap"
            generate_mix(path, size, mix)
            out = Path(scratch) / "out"

            def export(path: Path = path, out: Path = out) -> None:
                shutil.rmtree(out, ignore_errors=True)
                export_parquet(path, out)

            cand, base = compare(export, lambda path=path: read_once(path), rounds=rounds)
            written = sum(p.stat().st_size for p in out.iterdir())
            report.figure(
                Comparison(
                    f"export [{mix.name}, {path.stat().st_size / MiB:.0f} MiB]",
                    cand,
                    base,
                    "export_parquet",
                    "readinto the whole file once",
                    work=path.stat().st_size / MiB,
                    unit="MiB/s",
                ),
                goal_ratio=0.2,
                note=f"{written / MiB:.1f} MiB of Parquet written",
            )
            read = base.cpu_median
            frames = measure(lambda path=path: frames_table(path).collect(), rounds=rounds)
            alone = measure(
                lambda path=path: replay(path, keep_events=False, keep_history=False),
                rounds=rounds,
            )
            t_frames, t_replay, t_export = frames.cpu_median, alone.cpu_median, cand.cpu_median
            tables = {p.name: pq.read_table(p) for p in sorted(out.glob("*.parquet"))}
            written_alone = [
                measure(
                    lambda tables=tables, cheapest=cheapest: write_tables(
                        tables, Path(scratch) / "alone", cheapest=cheapest
                    ),
                    rounds=rounds,
                )
                for cheapest in (False, True)
            ]
            report.value(
                f"export's replay pass [{mix.name}]",
                f"export {t_export:.3g} s ({t_export / read:.1f}x the read)",
                f"the replay alone {t_replay:.3g} s ({t_replay / read:.1f}x the read)",
                t_replay / t_export,
                detail=(
                    f"the frames table alone {t_frames:.3g} s ({t_frames / read:.1f}x the read); "
                    "CPU medians. The export can be no quicker than its replay pass: here it "
                    f"cannot come within {t_replay / read:.1f}x the read"
                ),
            )
            t_write, t_bare = (t.cpu_median for t in written_alone)
            report.value(
                f"export's writing [{mix.name}]",
                f"export {t_export:.3g} s ({t_export / read:.1f}x the read)",
                f"its own tables written alone {t_write:.3g} s ({t_write / read:.1f}x the read)",
                t_write / t_export,
                detail=(
                    f"with no compression, dictionary or statistics {t_bare:.3g} s "
                    f"({t_bare / read:.1f}x the read): the export's frames, images and "
                    "snapshots, already in memory, through pyarrow's Parquet writer and nothing "
                    "else. No export writing these tables to Parquet comes within "
                    f"{t_bare / read:.1f}x the read; with its replay pass, "
                    f"{(t_bare + t_replay) / read:.1f}x"
                ),
            )
    report.done()


if __name__ == "__main__":
    main()

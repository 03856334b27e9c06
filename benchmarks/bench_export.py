"""``export_parquet`` of a capture against its replay plus writing its own tables (#27).

For each mix of ``_harness.MIXES`` a seeded capture is generated (``bench_tables.generate_mix``,
256 MiB, ``--quick`` 8) and exported to Parquet (frames, images and snapshots), in alternating
rounds with the baseline: the export's replay alone (the lean replay with the images and
snapshots tables collected, ``open(path, keep_tables=False).tables()``: the pass every table
past the frames table comes from) followed by pyarrow writing the export's own tables, read
back into memory beforehand, as the export writes them. Goals: the export <= 1.2x
that baseline (ratio >= 0.83x), and >= 150 MiB/s of capture, both by CPU median.

Beside them: the export against one read of the file (``bench_tables.read_once``), the frames
table alone, and the tables written with no compression, dictionary or statistics (a floor
under any Parquet writer of these tables).

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

GOAL_RATIO = 1 / 1.2  # the export <= 1.2x its replay + writing its tables alone
GOAL_RATE = 150  # MiB of capture per second


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
    report = Report("bench_export: export_parquet vs its replay + writing its tables", args.quick)

    from cbi1kit.analysis import frames_table, open_capture
    from cbi1kit.analysis._shorthands import export_parquet

    with tempfile.TemporaryDirectory(prefix="cbi1kit-bench-export-") as scratch:
        for mix in MIXES.values():
            path = Path(scratch) / f"{mix.name}.kvrcap"
            generate_mix(path, size, mix)
            out = Path(scratch) / "out"

            def export(path: Path = path, out: Path = out) -> None:
                shutil.rmtree(out, ignore_errors=True)
                export_parquet(path, out)

            export(path, out)
            tables = {p.name: pq.read_table(p) for p in sorted(out.glob("*.parquet"))}
            written = sum(p.stat().st_size for p in out.iterdir())
            alone = Path(scratch) / "alone"

            def baseline(
                path: Path = path, tables: dict[str, pa.Table] = tables, alone: Path = alone
            ) -> None:
                made = open_capture(path, keep_tables=False).tables()  # the export's replay
                made.images_df(), made.snapshots_df()
                write_tables(tables, alone, cheapest=False)

            cand, base = compare(export, baseline, rounds=rounds)
            mib = path.stat().st_size / MiB
            report.figure(
                Comparison(
                    f"export [{mix.name}, {mib:.0f} MiB]",
                    cand,
                    base,
                    "export_parquet",
                    "its replay + its tables written alone",
                    work=mib,
                    unit="MiB/s",
                ),
                goal_ratio=GOAL_RATIO,
                note=f"{written / MiB:.1f} MiB of Parquet written",
            )
            report.value(
                f"export rate [{mix.name}, {mib:.0f} MiB]",
                f"{mib / cand.cpu_median:.0f} MiB/s of capture",
                f"goal {GOAL_RATE} MiB/s",
                mib / cand.cpu_median / GOAL_RATE,
                ok=mib / cand.cpu_median >= GOAL_RATE,
                goal=f">= {GOAL_RATE} MiB/s by cpu median",
            )
            read = measure(lambda path=path: read_once(path), rounds=rounds).cpu_median
            frames = measure(lambda path=path: frames_table(path).collect(), rounds=rounds)
            bare = measure(
                lambda tables=tables, alone=alone: write_tables(tables, alone, cheapest=True),
                rounds=rounds,
            )
            t_export, t_frames = cand.cpu_median, frames.cpu_median
            report.value(
                f"export beside its parts [{mix.name}]",
                f"export {t_export:.3g} s ({t_export / read:.1f}x one read)",
                f"frames table alone {t_frames:.3g} s ({t_frames / read:.1f}x one read)",
                t_frames / t_export,
                detail=(
                    f"the tables written with no compression, dictionary or statistics "
                    f"{bare.cpu_median:.3g} s; CPU medians; no goal"
                ),
            )
    report.done()


if __name__ == "__main__":
    main()

"""Parquet export: the frames, images and snapshots tables as files, unsigned types kept."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cbi1kit._files import claim_outputs
from cbi1kit.analysis._frames import frames_batches
from cbi1kit.analysis._schema import (
    FRAMES_SCHEMA,
    IMAGES_SCHEMA,
    SNAPSHOTS_SCHEMA,
    arrow_schema,
    parquet_writer,
)
from cbi1kit.analysis._tables import _replay_batches

__all__ = [
    "export_parquet",
]


def export_parquet(
    source: Any,
    out_dir: str | os.PathLike[str],
    *,
    expected_format: Any = None,
    batch_records: int = 65536,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Write ``frames.parquet``, ``images.parquet`` and ``snapshots.parquet`` batch by batch.

    Unsigned columns stay unsigned in Parquet (``UINT_64`` etc. logical types), so
    ``pl.read_parquet`` gives back ``pl.UInt64`` with values up to ``2**64 - 1``. Existing
    files are refused (``OutputError`` ``Exists``) unless ``overwrite``, before any is written.
    """
    out = Path(out_dir)
    paths = {name: out / f"{name}.parquet" for name in ("frames", "images", "snapshots")}
    claim_outputs(paths.values(), overwrite=overwrite)
    out.mkdir(parents=True, exist_ok=True)
    with parquet_writer(paths["frames"], arrow_schema(FRAMES_SCHEMA)) as w:
        for df in frames_batches(source, batch_records=batch_records):
            w.write_table(df.to_arrow().cast(w.schema))
    with (
        parquet_writer(paths["images"], arrow_schema(IMAGES_SCHEMA)) as wi,
        parquet_writer(paths["snapshots"], arrow_schema(SNAPSHOTS_SCHEMA)) as ws,
    ):
        for images, snaps in _replay_batches(
            source, expected_format=expected_format, flush_rows=1 << 20
        ):
            if images is not None and images.height:
                wi.write_table(images.to_arrow().cast(wi.schema))
            if snaps is not None and snaps.height:
                ws.write_table(snaps.to_arrow().cast(ws.schema))
    return paths

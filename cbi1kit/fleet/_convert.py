"""Captures into the partitioned dataset as Dask tasks: one task per capture file.

Each task is :func:`cbi1kit.analysis._dataset.convert_segment` on its file, writing that file's own
Parquet files into the dataset. A rotated recording's segments are a chain (a task takes the
state the one before it left: the reader's cursor and the replayed lanes, which do not restart
at a rotation); different captures run side by side. The result is what
:func:`cbi1kit.analysis.export_dataset` writes in one process, row for row.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cbi1kit.analysis._dataset import (
    SegmentResult,
    capture_files,
    convert_segment,
    dataset_lock,
    prepare_dataset,
)
from cbi1kit.fleet._cluster import given_or_local

if TYPE_CHECKING:
    from distributed import Client


def convert_graph(
    captures: Any, out_dir: str | os.PathLike[str], *, batch_records: int = 65536
) -> list[Any]:
    """The conversion as ``dask.delayed`` values (one task per capture file), one result per
    file: compute them on any Dask scheduler. The dataset is made (or checked) here."""
    from dask import delayed

    captured = capture_files(captures)  # a file that is no capture: refused before any write
    out = prepare_dataset(out_dir)
    run = uuid.uuid4().hex[:8]  # keys of this conversion (a long-lived client runs several)
    results = []
    for c, files in enumerate(captured):
        carry = None
        for s, path in enumerate(files):
            result, carry = delayed(convert_segment, nout=2, pure=False)(
                os.path.abspath(path),
                os.path.abspath(out),
                carry,
                batch_records=batch_records,
                dask_key_name=f"convert-{path.name}-{c}.{s}-{run}",
            )
            results.append(result)
    return results


def convert(
    captures: Any,
    out_dir: str | os.PathLike[str],
    *,
    client: Client | None = None,
    batch_records: int = 65536,
    progress: Callable[[int], None] | None = None,
) -> list[SegmentResult]:
    """Convert captures into the dataset at ``out_dir`` on a Dask cluster: ``client`` (see
    :func:`cbi1kit.fleet.client`), or a local cluster started for the call and closed after.
    Each capture file is one task; files the dataset already holds are skipped. The results
    in the order of the captures and their segments; ``progress(1)`` as each file is done
    (``convert_graph``'s length in all)."""
    graph = convert_graph(captures, out_dir, batch_records=batch_records)
    if not graph:
        return []
    # the workers write under this process's hold
    with dataset_lock(out_dir), given_or_local(client) as dask_client:
        return _run(dask_client, graph, progress)


def _run(client: Client, graph: list[Any], progress: Callable[[int], None] | None) -> list[Any]:
    """The graph's results in its order, ``progress`` told of each task once it and those
    before it are done (``as_completed`` asks for a default client, which ours is not)."""
    futures = client.compute(graph)
    if progress is not None:
        for future in futures:
            future.result()  # a task's error is raised here, as gather would
            progress(1)
    return list(client.gather(futures))

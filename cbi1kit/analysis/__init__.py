"""Replay of a capture under the consumer's rules, the polars tables, Parquet export."""

from __future__ import annotations

from cbi1kit.analysis._replay import (
    EventKind,
    Replayer,
    ReplayEvent,
    ReplayReport,
    Violation,
    replay,
)
from cbi1kit.analysis._tables import (
    FRAMES_SCHEMA,
    IMAGES_SCHEMA,
    KINDS,
    OCCUPANCY_SCHEMA,
    SNAPSHOTS_SCHEMA,
    export_parquet,
    frames_batches,
    frames_table,
    images_table,
    occupancy_table,
    snapshots_table,
)

__all__ = [
    "FRAMES_SCHEMA",
    "IMAGES_SCHEMA",
    "KINDS",
    "OCCUPANCY_SCHEMA",
    "SNAPSHOTS_SCHEMA",
    "EventKind",
    "ReplayEvent",
    "ReplayReport",
    "Replayer",
    "Violation",
    "export_parquet",
    "frames_batches",
    "frames_table",
    "images_table",
    "occupancy_table",
    "replay",
    "snapshots_table",
]

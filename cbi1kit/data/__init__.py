"""The data that ships in the wheel, one function a file: ``ck.data.sample_capture()`` works
wherever cbi1kit is installed, as seaborn's and scikit-learn's loaders do (README, "Bundled
data"). Each returns the file's path; nothing is read until you open it."""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = [
    "FILES",
    "FOLDER",
    "delta_frame",
    "mooncake_trace",
    "real_capture",
    "sample_capture",
    "snapshot_frame",
]

#: the folder the bundled files sit in, inside the installed package
FOLDER: Final = Path(__file__).parent


def sample_capture() -> Path:
    """The Mooncake trace through a simulated relay of 4 DCs, DC 0 recorded: what the README
    and the notebooks open (`make sample` rebuilds it byte for byte)."""
    return FOLDER / "sample.kvrcap"


def real_capture() -> Path:
    """Dynamo's own relay recorded on loopback (``ai-dynamo-runtime`` 1.6.1, `make
    real-sample`); ``real_capture().with_name("real.kvrcap.workload.json")`` holds the token
    chains it was fed, evicted or not."""
    return FOLDER / "real.kvrcap"


def mooncake_trace() -> Path:
    """The Mooncake FAST'25 conversation trace, 12,031 requests (JSON lines; Apache-2.0, its
    notice in ``mooncake/README.md`` beside it): ``ck.read_mooncake(ck.data.mooncake_trace())``."""
    return FOLDER / "mooncake" / "conversation_trace.jsonl"


def delta_frame() -> Path:
    """A bare CBI1 delta frame from upstream's codec (1024 buckets, seed 0x5EED)."""
    return FOLDER / "frames" / "delta-upstream-fixture.cbi1"


def snapshot_frame() -> Path:
    """A bare CBI1 snapshot chunk, the one chunk of a 1024-bucket filter (seed 0x5EED)."""
    return FOLDER / "frames" / "snapshot-bc1024-chunk0.cbi1"


#: each bundled file by the short name ``cbi1kit data NAME`` takes, in the order it lists them
FILES: Final = {
    "sample": sample_capture,
    "real": real_capture,
    "trace": mooncake_trace,
    "delta": delta_frame,
    "snapshot": snapshot_frame,
}

"""cbi1kit: see inside NVIDIA Dynamo's KV-cache filter stream."""

from __future__ import annotations

from cbi1kit import errors

__all__ = ["errors"]
__version__ = "0.1.0"

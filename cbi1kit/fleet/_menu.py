"""The fleet queries by name, with what each answers: what ``cbi1kit fleet query --help`` lists
without importing polars or Dask (``_queries.QUERIES`` implements exactly these)."""

from __future__ import annotations

from typing import Final

QUERY_DOCS: Final[dict[str, str]] = {
    "churn": "deltas, images and delta bytes per pool per hour",
    "load": "each pool's slot load factor and estimated FPR (8α/65534) per minute",
    "violations": "replay's violations per relay (drt instance, incarnation) and rule",
    "snapshots": "every snapshot's chunks, bytes and words, per pool",
}

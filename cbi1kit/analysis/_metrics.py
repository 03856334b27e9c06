"""A watch's lanes in the Prometheus exposition format, served on loopback by default
(``cbi1kit watch --metrics``, ``ck.live(..., metrics=...)``). Names and a scrape config:
docs/watch.md.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any, Final

from cbi1kit._text import hex_id
from cbi1kit.analysis._watch import LaneFigures, WatchState
from cbi1kit.hashing._dc_names import dc_name

#: the labels of every per-lane metric
LABELS: Final = ("dc", "dc_name", "model", "pool")
#: gauges: (name, help, the figure)
_GAUGES: Final = (
    ("load_factor", "occupied slots over all slots of the lane", lambda f: f.load_factor),
    ("occupied_buckets", "buckets holding at least one fingerprint", lambda f: f.occupied_buckets),
    ("buckets", "the lane's bucket count", lambda f: f.bucket_count),
    ("ready", "1 while a snapshot is installed and no rule broke since", lambda f: int(f.ready)),
    ("stale", "1 when ready and silent past the max age", lambda f: int(f.stale)),
    (
        "last_message_age_seconds",
        "seconds since the lane's last frame or heartbeat was received",
        lambda f: math.nan if f.age_s is None else f.age_s,
    ),
)  # fmt: skip
#: counters: (name, help, the figure)
_COUNTERS: Final = (
    ("frames", "FilterUpdate messages received", lambda f: f.frames),
    ("deltas", "deltas applied", lambda f: f.deltas),
    ("images", "bucket images carried by the deltas applied", lambda f: f.images),
    ("bytes", "message bytes received", lambda f: f.bytes),
)


def _labels(lane: LaneFigures) -> list[str]:
    dc = "" if lane.dc_id is None else hex_id(lane.dc_id)
    name = "" if lane.dc_id is None else (dc_name(lane.dc_id) or "")
    return [dc, name, lane.model, lane.pool or ""]


class WatchCollector:
    """A Prometheus collector of the last :class:`WatchState` it was given (``update``)."""

    def __init__(self) -> None:
        self._state: WatchState | None = None
        self._lock = threading.Lock()

    def update(self, state: WatchState) -> None:
        with self._lock:
            self._state = state

    def collect(self) -> Iterator[Any]:
        """The metric families of the last state (none before the first)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            state = self._state
        lanes = () if state is None else state.lanes
        kinds = [(GaugeMetricFamily, _GAUGES), (CounterMetricFamily, _COUNTERS)]
        for kind, metrics in kinds:
            for name, text, figure in metrics:
                family = kind(f"cbi1kit_lane_{name}", text, labels=LABELS)
                for lane in lanes:
                    family.add_metric(_labels(lane), float(figure(lane)))
                yield family
        broken = CounterMetricFamily(
            "cbi1kit_lane_violations", "rules broken, by rule", labels=(*LABELS, "rule")
        )
        for lane in lanes:
            for rule, count in sorted(lane.violations.items()):
                broken.add_metric([*_labels(lane), rule], float(count))
        yield broken


class MetricsServer:
    """``collector`` served over HTTP at ``host:port`` (port 0: any free one) until
    :meth:`close`; ``url`` is where to scrape."""

    def __init__(self, collector: WatchCollector, host: str = "127.0.0.1", port: int = 0) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.host, self.port = host, int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

"""A **simulated** ``dynamo.kvrelay.v1`` relay server for demos, teaching and tests (never in
front of consumers): upstream's admission order, hubs, bounded queues, planes and faults on
demand. ``docs/simulator.md`` lists what it reproduces.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent import futures
from dataclasses import replace
from typing import Any

import grpc

from cbi1kit.hashing._dc_names import dc_text
from cbi1kit.relay._transport import KEEPALIVE_TIMEOUT, keepalive_options
from cbi1kit.sim._feeds import PoolFeed, trace_feed
from cbi1kit.sim._hub import _R, FaultPlan, ServerConfig, _Pool, _pool_key, _Relay
from cbi1kit.sim._rpc import _service_handler, _Servicer
from cbi1kit.sim._simulator import config_error


class RelayServer(_Relay):
    """The simulated relay: ``start()`` binds and serves; ``stop()`` ends every stream.

    Use as a context manager. ``address`` is ``host:port`` after ``start()`` (port 0 picks a
    free port). Streams and state are inspectable for tests: ``subscriptions`` (per-stream
    send stats), ``lagged_total``, ``relay_info_answers``, ``faults.fired``.
    """

    port: int = 0
    _server: grpc.Server | None = None

    @classmethod
    def from_simulation(
        cls,
        trace: str | os.PathLike[str],
        sim_config: Any = None,
        *,
        pace: float = 0.01,
        dc: int = 0,
        limit: int | None = None,
        server_config: ServerConfig | None = None,
        faults: FaultPlan | None = None,
    ) -> RelayServer:
        """A server whose pool is DC ``dc`` of the trace-driven simulator, one delta per step.

        ``pace`` (seconds between steps) overrides ``server_config.pace``. See ``trace_feed``.
        """
        feed = trace_feed(trace, sim_config, dc=dc, limit=limit)
        config = replace(server_config or ServerConfig(), pace=pace)
        return cls(feed, config, faults=faults)

    def set_ready(self, index: int = 0, ready: bool = True) -> None:
        """Pool ``index``'s workers leave (``False``) or come back. The catalog keeps the pool
        and its stream goes on; its topology turns UNAVAILABLE (READY) with the roles missing,
        and the load planes report no rank and no live worker for it: the contract's reason for
        a consumer not to route there though the pool is published."""
        pool = self._pool_at(index)
        with pool.lock:
            changed = pool.ready != ready
            pool.ready = ready
        if changed:
            self._bump_readiness()

    def change_generation(self, index: int = 0) -> None:
        """Re-attach pool ``index`` under a new layout generation (a fault, or a demo step)."""
        self._pool_at(index).change_generation()

    def add_pool(self, feed: PoolFeed) -> int:
        """A producer attaches: its pool is served and advertised from the next catalog (and
        readiness) update on. Its ``index``; a pool served already is ``SimulationError``
        ``Config``."""
        pool = _Pool(feed, self)
        key = _pool_key(pool.wire_producer)
        with self._lock:
            if key in self._pools:
                dc = dc_text(pool.wire_producer.pool_id.dc_id)
                raise config_error("feed", dc, "that pool is served already", what="pool")
            self._pools[key] = pool
            index = len(self._pools) - 1
        self._bump_catalog()
        self._bump_readiness()
        return index

    def withdraw_pool(self, index: int = 0) -> None:
        """Pool ``index``'s producer detaches: the next catalog no longer lists it (no
        tombstone: it is absent), its subscriptions end ``UNAVAILABLE`` /
        ``PUBLICATION_UNAVAILABLE``, a new one is ``POOL_NOT_FOUND``, its feed publishes nothing
        until :meth:`restore_pool`."""
        pool = self._pool_at(index)
        with pool.lock:
            pool.published = False
            pool.end_subscribers(
                _R.RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE, "pool withdrawn from the catalog"
            )
        self._bump_catalog()
        self._bump_readiness()

    def restore_pool(self, index: int = 0, *, new_generation: bool = True) -> None:
        """Pool ``index`` attaches again, advertised from the next catalog on. Upstream
        re-attaches a pool under a new ``layout_generation`` (relay.md §2.6), so by default its
        producer key changes; ``new_generation=False`` keeps the key it had."""
        pool = self._pool_at(index)
        with pool.lock:
            if new_generation:
                pool.next_generation()
            pool.published = True
        self._bump_catalog()
        self._bump_readiness()

    def refuse_pool(
        self, index: int = 0, reason: int = _R.RELAY_ERROR_REASON_UNSUPPORTED_FEATURE
    ) -> None:
        """Fault: pool ``index`` stays in the catalog, but its open subscriptions end with
        ``reason`` and every new one is refused with it (by default ``UNSUPPORTED_FEATURE``,
        which a client must not retry unchanged)."""
        pool = self._pool_at(index)
        with pool.lock:
            pool.refused = reason
            pool.end_subscribers(reason, "this pool is refused (injected fault)")

    def pool_feed(self, index: int = 0) -> PoolFeed:
        """The feed behind pool ``index`` (pools in the order they were added)."""
        return self._pool_at(index).feed

    def pool_exhausted(self, index: int = 0) -> bool:
        """Whether pool ``index``'s feed has run out (its streams then only heartbeat)."""
        return self._pool_at(index).exhausted

    # -- lifecycle
    @property
    def address(self) -> str:
        """``host:port`` to dial (the bound port once started)."""
        return f"{self.config.host}:{self.port}"

    def start(self) -> RelayServer:
        """Bind ``host:port`` (port 0: a free one) and serve, over TLS if configured; self."""
        options = [
            ("grpc.max_send_message_length", self.config.max_message_bytes),
            ("grpc.max_receive_message_length", self.config.max_message_bytes),
            ("grpc.so_reuseport", 0),
            # upstream's server keepalive, and room for clients that ping as often
            *keepalive_options(),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", int(KEEPALIVE_TIMEOUT * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            *self.config.grpc_options,
        ]
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=self.config.max_workers, thread_name_prefix="cbi1kit-relay"
            ),
            options=options,
            maximum_concurrent_rpcs=self.config.max_workers,
        )
        handler = _service_handler(_Servicer(self), self.config.unimplemented)
        server.add_generic_rpc_handlers((handler,))
        address = f"{self.config.host}:{self.config.port}"
        tls = self.config.tls
        if tls is None:
            self.port = server.add_insecure_port(address)
        else:
            self.port = server.add_secure_port(address, tls.credentials())
        if self.port == 0:
            raise OSError(f"cannot bind {self.config.host}:{self.config.port}")
        server.start()
        self._server = server
        self._window_start = time.monotonic()
        return self

    def restart(
        self,
        feeds: PoolFeed | Sequence[PoolFeed],
        *,
        relay_incarnation: int,
        drt_instance_id: int | None = None,
        faults: FaultPlan | None = None,
    ) -> RelayServer:
        """Stop this relay and start another on the same address: a relay restart. Upstream draws
        ``relay_incarnation`` afresh on every start and its producer incarnation is the relay's, so
        give ``feeds`` whose producer incarnation is the new one: every producer key changes,
        catalog revisions start over, nothing of the old hubs survives. Returns the new server,
        started (this one keeps its stats)."""
        config = replace(
            self.config,
            port=self.port or self.config.port,
            relay_incarnation=relay_incarnation,
            drt_instance_id=(
                self.config.drt_instance_id if drt_instance_id is None else drt_instance_id
            ),
        )
        self.stop(0)
        return RelayServer(feeds, config, faults=faults).start()

    def stop(self, grace: float | None = 0.5) -> None:
        """End every stream and stop serving, giving calls in flight ``grace`` seconds (a
        release that drops its streams on shutdown drops them at once)."""
        release = self.config.release
        if release is not None and release.drops_streams_on_shutdown and self._server is not None:
            self._server.stop(0).wait(5.0)  # before the streams see _stopping and end cleanly
            self._server = None
        self._stopping.set()
        for cond in (self._catalog_cond, self._readiness_cond):
            with cond:
                cond.notify_all()
        if self._server is not None:
            self._server.stop(grace).wait(5.0)
            self._server = None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped (or ``timeout``); True if stopped."""
        return self._stopping.wait(timeout)

    def __enter__(self) -> RelayServer:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

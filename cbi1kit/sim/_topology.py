"""What the simulated relay's readiness and load planes report, derived from the published
pools' state as upstream derives it: topology entries, pool load, serving load.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.sim._feeds import PoolLoad

_LOAD: Final = "load"
_SERVING_LOAD: Final = "serving-load"
_W = pb.WorkerRole


@dataclass(frozen=True, slots=True)
class _PoolState:
    descriptor: pb.KvPoolDescriptor
    producer: pb.ProducerIdentity
    ready: bool
    load: PoolLoad | None  # asked of the feed only for the load planes


def _load_of(state: _PoolState) -> PoolLoad:
    assert state.load is not None
    return state.load


def _serves(present: set[pb.WorkerRole]) -> bool:
    """Whether live roles can serve a request: an aggregated (or role-less legacy) worker, or
    prefill and decode together (upstream's role disjunctive normal form)."""
    return bool(
        present & {_W.WORKER_ROLE_AGGREGATED, _W.WORKER_ROLE_LEGACY}
        or {_W.WORKER_ROLE_PREFILL, _W.WORKER_ROLE_DECODE} <= present
    )


def _base_models(pools: Sequence[_PoolState]) -> dict[tuple[str, str], list[_PoolState]]:
    """Pools by (namespace, canonical model) of their base registrations (the simulated pools
    register base models only, so there are no adapter entries)."""
    out: dict[tuple[str, str], list[_PoolState]] = {}
    for state in pools:
        namespace = state.descriptor.serving_endpoint.namespace
        for reg in state.descriptor.registrations:
            if reg.target.WhichOneof("target") == "base":
                out.setdefault((namespace, reg.canonical_model_id), []).append(state)
    return dict(sorted(out.items()))


def _topology(pools: Sequence[_PoolState]) -> list[pb.TopologyEntry]:
    """One entry per (namespace, model); one member per endpoint, linked to its first pool."""
    entries = []
    for (namespace, model), states in _base_models(pools).items():
        endpoints: dict[tuple[str, str, str], list[_PoolState]] = {}
        for state in states:
            ep = state.descriptor.serving_endpoint
            endpoints.setdefault((ep.namespace, ep.component, ep.endpoint), []).append(state)
        members = []
        declared: set[pb.WorkerRole] = set()
        present: set[pb.WorkerRole] = set()
        declared_by: collections.Counter[pb.WorkerRole] = collections.Counter()
        for group in endpoints.values():
            roles = sorted({r for st in group for r in st.descriptor.pool_roles})
            declared.update(roles)
            declared_by.update(roles)
            if any(st.ready for st in group):
                present.update(roles)
            members.append(
                pb.TopologyMember(
                    endpoint=group[0].descriptor.serving_endpoint,
                    roles=roles,
                    pool_id=group[0].producer.pool_id,
                )
            )
        readiness = (
            pb.SERVING_READINESS_STATE_READY
            if _serves(present)
            else pb.SERVING_READINESS_STATE_UNAVAILABLE
        )
        typed = (_W.WORKER_ROLE_PREFILL, _W.WORKER_ROLE_DECODE)
        entries.append(
            pb.TopologyEntry(
                namespace=namespace,
                canonical_model_id=model,
                state=readiness,
                present_roles=sorted(present),
                missing_roles=sorted(declared - present),
                members=members,
                duplicate_role_endpoints=[r for r in typed if declared_by[r] > 1],
                legacy_fallback_active=_W.WORKER_ROLE_LEGACY in declared,
            )
        )
    return entries


def _load_entry(state: _PoolState, ranks_only: bool = False) -> pb.KvPoolLoadEntry:
    """A pool whose workers are gone reports no rank: coverage 0 of its ranks, never load 0;
    ``ranks_only``: only the ranks expected, as a relay no worker reports metrics to."""
    load = _load_of(state)
    if not state.ready or ranks_only:
        return pb.KvPoolLoadEntry(producer=state.producer, kv_expected_ranks=load.ranks)
    return pb.KvPoolLoadEntry(
        producer=state.producer,
        kv_used_blocks=load.used_blocks,
        total_kv_blocks=load.total_blocks,
        kv_observed_ranks=load.ranks,
        kv_expected_ranks=load.ranks,
    )


def _serving_load(
    pools: Sequence[_PoolState],
) -> tuple[list[pb.PoolServingLoad], list[pb.ModelServingLoad]]:
    """No router and no frontend reports to the simulated relay, so every view is UNAVAILABLE
    with its gauges unset, the cumulative totals are 0 (set whatever the status, as upstream
    requires), and only the deployment facts the relay knows itself are given."""
    unavailable = pb.DATA_STATUS_UNAVAILABLE
    pool_loads = [
        pb.PoolServingLoad(
            producer=st.producer,
            load=pb.LoadView(tokens=pb.TokenLoadStats(), status=unavailable),
            deployment=pb.PoolDeploymentStatus(
                live_workers=_load_of(st).workers if st.ready else 0
            ),
        )
        for st in pools
    ]
    model_loads = []
    for (namespace, model), states in _base_models(pools).items():
        serving: list[pb.KvPoolId] = []
        for st in states:
            if st.producer.pool_id not in serving:
                serving.append(st.producer.pool_id)
        model_loads.append(
            pb.ModelServingLoad(
                namespace=namespace,
                canonical_model_id=model,
                load=pb.LoadView(
                    requests=pb.RequestLifecycleStats(),
                    tokens=pb.TokenLoadStats(input_tokens_total=0, output_tokens_total=0),
                    status=unavailable,
                ),
                deployment=pb.ModelDeploymentStatus(serving_pools=serving),
            )
        )
    return pool_loads, model_loads

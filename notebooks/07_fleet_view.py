# %% [markdown]
# # The router's view of a fleet
#
# A global router does not see one filter. For every model it consults up to 16 **DC lanes** —
# one cuckoo filter per data-centre pool, all of one *indexer domain* (same model, block size,
# hash format and serving endpoint) — and routes a request to the DC whose lane holds the
# longest prefix of the request's blocks.
#
# Here a simulated fleet — 4 DCs × 2 models, one model with a LoRA adapter reached through an
# alias, the other hashed in the EAGLE space — is served by a simulated relay on loopback and
# recorded by the recorder into one capture, the way `cbi1kit serve` → `cbi1kit record` does.
# Then we look at it as the router does: the consumer tables over time, why a request was
# routed where it was (`explain`), and what changed between two moments (`diff`).

# %% tags=["parameters"]
fleet_capture = ""  # a path to keep the recording at (rewritten each run); empty: a temporary file
dcs = 4
seed = 7

# %%
import tempfile
from pathlib import Path

import polars as pl

import cbi1kit as ck

ck.setup_notebook()  # every chart draws here with no network

# %% [markdown]
# ## Serve and record the fleet
#
# `FleetModel` names a model, its hash space and (for LoRA) each adapter with the alias
# requests use. Each model is simulated on its own over `dcs` DCs; every DC of every model is
# one pool of the relay. `record_fleet` records until every pool has published everything.

# %%
models = [
    ck.sim.FleetModel("fleet/chat", "lora", {"adapter-support": "support-bot"}, seed=seed),
    ck.sim.FleetModel("fleet/draft", "eagle", seed=seed + 1),
]
scratch = Path(tempfile.mkdtemp(prefix="cbi1kit-fleet-"))
capture = Path(fleet_capture) if fleet_capture else scratch / "fleet.kvrcap"
pools = ck.sim.record_fleet(models, capture, dcs=dcs, overwrite=True)
report = ck.replay(capture)
print(f"{len(report.lanes)} lanes, violations: {len(report.violations)}, {report.counts()}")
assert report.ok and len(report.lanes) == dcs * len(models)

# %% [markdown]
# The catalog the relay served is in the capture too: every pool, its registrations and query
# semantics. The LoRA registration's alias is what a request names; the adapter's canonical
# name is what salts its block hashes.

# %%
catalog = ck.global_view(report).catalogs[-1]  # the newest catalog the view used
ck.viz.full_table(
    pl.DataFrame(
        [
            {
                "dc_id": f"{pool.producer.pool_id.dc_id.value:016x}",
                "registrations": ", ".join(
                    f"{r.model.value} ({r.target.kind}"
                    + (f", alias {', '.join(a.value for a in r.aliases)}" if r.aliases else "")
                    + ")"
                    for r in pool.registrations
                ),
                "hash_format": pool.query_semantics.hash_format.serde_name,
                "block_size": pool.query_semantics.kv_block_size,
            }
            for pool in catalog.pools
        ]
    )
)

# %% [markdown]
# ## The global view over time
#
# At any moment the router holds, per model, one consumer table of that model's DC lanes. A
# lane is *ready* from its snapshot on; before it (or after a violation, until the next
# snapshot) the router cannot use it. Each model's lanes, at 24 moments of the capture:

# %%
timeline = pl.concat(
    [
        ck.analysis.global_timeline(report, model=m.model, points=24).with_columns(
            pl.lit(m.model).alias("model")
        )
        for m in models
    ]
)
ck.viz.lanes_over_time_chart(timeline, by="model")

# %% [markdown]
# The view at the end, for the LoRA model asked by its alias: the table a router consults,
# each lane with where its words came from (producer generation, sequence, receive time).

# %%
view = ck.global_view(report, model="support-bot")
ck.viz.full_table(view.to_frame().drop("domain"))

# %% [markdown]
# Each lane is the producer's own filter, bit for bit: the recorder lost nothing and the
# consumer's rules accepted every message.

# %%
(domain,) = view.domains
by_dc = {lane.pool.dc_id: lane for lane in domain.lanes}
for feed in pools.feeds["fleet/chat"]:
    lane = by_dc[feed.identity.pool_id.dc_id]
    assert (domain.table.lane_words(lane.lane) == feed.words()).all()
print("every fleet/chat lane equals its producer's filter")

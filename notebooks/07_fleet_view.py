# %% [markdown]
# # The router's view of a fleet
#
# *New words (lane, pool, epoch, image, ...): the [glossary](../docs/glossary.md).*
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

renderer = ck.setup_notebook()  # every chart draws here with no network

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
cap = ck.open(capture)  # scanned once; the views below read its replay
report = cap.replay()
print(f"{len(report.lanes)} lanes, violations: {len(report.violations)}, {report.counts}")
assert report.ok and len(report.lanes) == dcs * len(models)

# %% [markdown]
# The catalog the relay served is in the capture too: every pool, its registrations and query
# semantics. The LoRA registration's alias is what a request names; the adapter's canonical
# name is what salts its block hashes.

# %%
catalog = cap.view().catalogs[-1]  # the newest catalog the view used
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
        cap.timeline(model=m.model, points=24).with_columns(pl.lit(m.model).alias("model"))
        for m in models
    ]
)
ck.viz.lanes_over_time_chart(timeline, by="model")

# %% [markdown]
# The view at the end, for the LoRA model asked by its alias: the table a router consults,
# each lane with where its words came from (producer generation, sequence, receive time).

# %%
view = cap.view(model="support-bot")
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

# %% [markdown]
# ## Why was this request routed there? `explain`
#
# Take the last short request (at most 20 blocks) the simulator routed under the LoRA adapter
# and ask the fleet about it as the router saw it at the end of the capture. Every step is
# shown: the catalog's registration for the alias (its canonical adapter salts the hashes), the
# block hashes, each block's fingerprint and buckets a/b, then per DC lane which slot holds it
# and since which delta, the prefix depth, where each lane's chain breaks, and the DC the router
# prefers (the deepest; the stream does not carry the gateway's prefill and occupancy terms, so
# ties go to the lowest pool id).

# %%
chat = pools.workloads["fleet/chat"]
asked = max(
    i
    for i, name in enumerate(chat.lora_names)
    if name == "adapter-support" and chat.block_counts[i] <= 20
)
why = cap.explain(model="fleet/chat", lora="support-bot", request=chat.request(asked))
print(why)

# %% [markdown]
# The same answer as a table, one row per DC lane. The preferred lane is the deepest one:

# %%
lanes = pl.DataFrame(
    [
        {
            "dc_id": f"{lane.dc_id.value:016x}",
            "depth (blocks)": lane.depth,
            "chain breaks at block": lane.first_missing,
            "removed by sequence": None if lane.removed is None else lane.removed.sequence,
        }
        for lane in why.lanes
    ]
)
best = why.preferred
assert best is not None and best.depth == lanes["depth (blocks)"].max()
print(f"preferred: DC {best.dc_id.value:016x}, {best.depth} of {len(why.blocks)} blocks")
ck.viz.full_table(lanes)

# %% [markdown]
# ## What changed between two moments? `diff`
#
# One DC lane of `fleet/chat`, halfway through its stream against its end: every bucket whose
# word changed, with the fingerprints that left and arrived.

# %%
lane = view.lanes[0]
assert lane.sequence is not None
halfway = lane.sequence // 2
change = cap.diff(dc=lane.pool.dc_id, model="fleet/chat", at_a=halfway, at_b=lane.sequence)
print(change)

# %% [markdown]
# The lane replay kept, read back at both sequences, differs in exactly those buckets:

# %%
import numpy as np

history = report.lane(pool=lane.pool)  # a DC serves both models: name the pool
before, after = history.lane_at(halfway), history.lane_at(lane.sequence)
changed = np.flatnonzero(before != after)
assert changed.tolist() == change.table["bucket"].to_list()
print(
    f"{change.differing_buckets} buckets differ: {change.fingerprints_added} fingerprints "
    f"arrived, {change.fingerprints_removed} left"
)

# %% [markdown]
# # Delta churn
#
# *New words (lane, pool, epoch, image, ...): the [glossary](../docs/glossary.md).*
#
# After the snapshot, a relay ships **deltas**: the absolute words of every bucket a publication
# touched. How many buckets that is, and how often, decides the stream's bandwidth — and whether a
# delta grows past 349,525 images and forces a fresh snapshot instead.

# %% tags=["parameters"]
import cbi1kit as ck

capture = ck.data.sample_capture()  # the bundled files (ck.data): replace with your own
trace = ck.data.mooncake_trace()
requests = 2000  # trace prefix for each run of the sweeps and the explorer
dask_workers = 0  # the fleet's conversion and query on a local Dask cluster of this many worker
# processes (2 adds about 7 s: the workers start and load the kernels); 0 runs them here

# %%
import tempfile
from pathlib import Path

import polars as pl

ck.setup_notebook()  # every chart draws here with no network

cap = ck.open(capture)  # scanned once: the tables and the replay below read this scan
bucket_count = ck.viz.charted_lane(cap.replay()).format.bucket_count  # or why there is none
frames = cap.frames.collect()
images = cap.images.collect()

# %% [markdown]
# ## Churn in the capture
#
# The capture is the `capture` parameter (the bundled sample unless you pass another). Images
# per delta, bytes on the wire per second by message kind, how often each bucket range is
# rewritten, and the snapshot's bytes against all the deltas'.

# %%
ck.viz.churn_chart(frames, images, bucket_count=bucket_count)

# %% [markdown]
# A rewrite does not always change occupancy: a kicked fingerprint moves between buckets, and a
# bucket can be rewritten with a different fingerprint in the same slot count.

# %%
images.with_columns(
    (pl.col("occupied_after").cast(pl.Int8) - pl.col("occupied_before").cast(pl.Int8)).alias(
        "slot_change"
    )
).group_by("slot_change").agg(pl.len().alias("images")).sort("slot_change")

# %% [markdown]
# ## The effect of `publish_every_n_events`
#
# The simulator's producers publish as the relay's do. `ck.viz.what_if` runs it on the trace's
# first `requests` requests (one DC of two workers, exact routing here); each `update` moves a
# knob, simulates again and returns the run's figures, among them the deltas, images and bytes
# published per second of simulated time. Publishing after every engine event ships small,
# frequent deltas; batching N events per publication ships fewer, larger ones — and a bucket
# touched twice in the window is sent once, with its final word (a net reversion is not sent
# at all).

# %%
explorer = ck.viz.what_if(trace, requests=requests, dcs=1, workers_per_dc=2, policy="exact")
churn = ["deltas_per_second", "images_per_second", "bytes_per_second", "images_per_delta"]
per_delta = (pl.col("images_per_second") / pl.col("deltas_per_second")).alias("images_per_delta")
publish = pl.concat([explorer.update(publish_every_n_events=n) for n in (1, 4, 16, 64)])
publish.with_columns(per_delta).select("publish_every_n_events", *churn)

# %% [markdown]
# ## Eviction pressure
#
# Smaller caches evict more: every eviction is a `Removed` event, and every removal rewrites a
# bucket word. Same trace, shrinking per-worker capacity (each filter still sized for its
# workers' blocks):

# %%
pressure = pl.concat(
    [explorer.update(publish_every_n_events=1, capacity_blocks=c) for c in (8192, 4096, 2048, 1024)]
).with_columns(per_delta)
pressure.select("capacity_blocks", "hit_rate", *churn)

# %%
ck.viz.compare_runs_chart(
    pressure.with_columns(pl.lit("capacity sweep").alias("sweep")),
    x="capacity_blocks",
    metrics=churn,
    by="sweep",
)

# %% [markdown]
# ## Churn across a fleet, on Dask
#
# A fleet is many captures: a relay per region, a recorder per relay, a capture per day.
# `ck.fleet` converts them into one partitioned Parquet dataset (`dc=/producer=/date=`), one Dask
# task per capture file, and runs fleet queries over it as Dask computations: with
# `dask_workers=2`, on a local cluster of two worker processes on this machine
# (`ck.fleet.client("tcp://HOST:8786")` would use an existing cluster instead; the README says
# what its workers need). By default the same conversion and query run in this process
# (`ck.export_dataset`, `ck.fleet.run_local`): a cluster's start costs more than these small
# captures. Three simulated captures, each a different model served on two DCs: six pools.

# %%
fleet_dir = Path(tempfile.mkdtemp(prefix="cbi1kit-fleet-"))
fleet_captures = {}
for i, model in enumerate(["fleet/alpha", "fleet/beta", "fleet/gamma"]):
    sim = ck.SimulatorConfig(
        dcs=2, workers_per_dc=2, capacity_blocks=1024, policy="ckf", seed=i, model=model
    )
    relay = ck.sim.RelayConfig(heartbeat_interval_ms=5_000, drt_instance_id=0x100 + i)
    path = fleet_dir / f"{model.split('/')[1]}.kvrcap"
    ck.simulate_capture(ck.synthetic_chat(300, seed=i), path, ck.sim.SimRelayConfig(sim, relay))
    fleet_captures[model] = path

dataset = fleet_dir / "dataset"
if dask_workers:
    with ck.fleet.client(workers=dask_workers) as client:  # closed, with its cluster, after
        print("Dask dashboard:", client.dashboard_link)
        ck.fleet.convert(list(fleet_captures.values()), dataset, client=client)
        fleet_churn = ck.fleet.churn_per_pool_per_hour(dataset, client=client, every="1m")
else:
    ck.export_dataset(list(fleet_captures.values()), dataset)
    fleet_churn = ck.fleet.run_local("churn", dataset, every="1m")
fleet_churn.head()

# %% [markdown]
# The query on Dask and in one process give the same table, row for row
# (`ck.fleet.run_local("churn", ...)`). Each pool's indexer domain is named by its model:

# %%
names = {
    ck.frames_table(path).select("cache_semantics").drop_nulls().head(1).collect().item(): model
    for model, path in fleet_captures.items()
}
assert fleet_churn.equals(ck.fleet.run_local("churn", dataset, every="1m"))
ck.viz.fleet_churn_chart(fleet_churn, names=names, bin_words="minute")

# %% [markdown]
# ## What if …?
#
# The explorer the sweeps ran on, back at the first run's knobs and on sliders: each move
# simulates the trace prefix again and redraws its four charts in place — the measured
# false-positive rate against load, CKF against exact depth, the DC's load over time and the
# churn it publishes, images and bytes per second (brush a window of time in either of those two
# to see the other then) — with the headline figures above them. Try `publish_every_n_events`
# up (fewer deltas, fewer images and bytes), `dcs` up (more caches: fewer evictions, less churn)
# and `expected_blocks_per_dc` down to 2,048: near full load every insert kicks, and the churn
# jumps.

# %%
explorer.update(capacity_blocks=4096)
explorer

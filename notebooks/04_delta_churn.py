# %% [markdown]
# # Delta churn
#
# After the snapshot, a relay ships **deltas**: the absolute words of every bucket a publication
# touched. How many buckets that is, and how often, decides the stream's bandwidth — and whether a
# delta grows past 349,525 images and forces a fresh snapshot instead.

# %% tags=["parameters"]
capture = "../data/sample.kvrcap"
trace = "../data/mooncake/conversation_trace.jsonl"
requests = 2000  # trace prefix for each run of the sweeps

# %%
import tempfile
from pathlib import Path

import polars as pl

import cbi1kit as ck

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
# Publishing after every engine event ships small, frequent deltas; batching N events per
# publication ships fewer, larger ones — and a bucket touched twice in the window is sent once,
# with its final word (a net reversion is not sent at all).


# %%
def run(**knobs: int) -> dict[str, object]:
    workload = ck.read_mooncake(trace, limit=requests)
    sim = ck.SimulatorConfig(dcs=1, workers_per_dc=2, policy="exact", **knobs)
    with tempfile.TemporaryDirectory() as tmp:
        result = ck.simulate_capture(
            workload, Path(tmp) / "run.kvrcap", ck.sim.SimRelayConfig(simulator=sim)
        )
        table = ck.frames_table(result.path).collect()
    by_kind = table.group_by("kind").agg(
        pl.col("raw_len").sum().alias("bytes"), pl.len().alias("n")
    )
    get = dict(zip(by_kind["kind"].cast(pl.String), by_kind["bytes"], strict=True))
    count = dict(zip(by_kind["kind"].cast(pl.String), by_kind["n"], strict=True))
    return knobs | {
        "deltas": count.get("DELTA", 0),
        "delta_bytes": get.get("DELTA", 0),
        "snapshot_bytes": get.get("SNAPSHOT_CHUNK", 0),
        "images_per_delta": table.filter(pl.col("kind") == "DELTA")["image_count"].mean(),
    }


publish = pl.DataFrame([run(publish_every_n_events=n) for n in (1, 4, 16, 64)])
publish

# %% [markdown]
# ## Eviction pressure
#
# Smaller caches evict more: every eviction is a `Removed` event, and every removal rewrites a
# bucket word. Same trace, shrinking per-worker capacity:

# %%
pressure = pl.DataFrame([run(capacity_blocks=c) for c in (8192, 4096, 2048, 1024)])
pressure

# %%
ck.viz.compare_runs_chart(
    pressure.with_columns(pl.lit("capacity sweep").alias("sweep")),
    x="capacity_blocks",
    metrics=["deltas", "delta_bytes", "images_per_delta"],
    by="sweep",
)

# %% [markdown]
# ## Churn across a fleet, on Dask
#
# A fleet is many captures: a relay per region, a recorder per relay, a capture per day.
# `ck.fleet` converts them into one partitioned Parquet dataset (`dc=/producer=/date=`), one Dask
# task per capture file, and runs fleet queries over it as Dask computations: here on a local
# cluster of two worker processes on this machine (`ck.fleet.client("tcp://HOST:8786")` would use
# an existing cluster instead; the README says what its workers need). Three simulated captures,
# each a different model served on two DCs: six pools.

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

with ck.fleet.client() as client:  # closed (with its cluster) at the end of the block
    print("Dask dashboard:", client.dashboard_link)
    ck.fleet.convert(list(fleet_captures.values()), fleet_dir / "dataset", client=client)
    fleet_churn = ck.fleet.churn_per_pool_per_hour(fleet_dir / "dataset", client=client, every="1m")
fleet_churn.head()

# %% [markdown]
# The same query in one process gives the same table, row for row
# (`ck.fleet.run_local("churn", ...)`). Each pool's indexer domain is named by its model:

# %%
names = {
    ck.frames_table(path).select("cache_semantics").drop_nulls().head(1).collect().item(): model
    for model, path in fleet_captures.items()
}
assert fleet_churn.equals(ck.fleet.run_local("churn", fleet_dir / "dataset", every="1m"))
ck.viz.fleet_churn_chart(fleet_churn, names=names, bin_words="minute")

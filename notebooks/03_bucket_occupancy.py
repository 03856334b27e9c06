# %% [markdown]
# # Bucket occupancy
#
# *New words (lane, pool, epoch, image, ...): the [glossary](../docs/glossary.md).*
#
# A CKF lane is `bucket_count` words of four 16-bit slots. How full it is — the slot **load
# factor** α — decides both how often an insert fails (a *capacity failure*: the item is simply
# not in the filter, a hole a router cannot see) and how often a probe for an absent item says
# "present" (a *false positive*, about 8α/65534 per probe).
#
# We look at the lane the capture ends with (the `capture` parameter: the bundled sample unless
# you pass another), compare it with theory, and then re-simulate with smaller filters to watch
# one fill up and fail.

# %% tags=["parameters"]
import cbi1kit as ck

capture = ck.data.sample_capture()  # the bundled files (ck.data): replace with your own
trace = ck.data.mooncake_trace()
requests = 2000  # trace prefix for the re-simulations (keeps the notebook fast)

# %%
import polars as pl

ck.setup_notebook()  # every chart draws here with no network

cap = ck.open(capture)  # scanned once: every table and the replay below read this scan
report = cap.replay()
lane = ck.viz.charted_lane(report).final_lane  # the lane to chart, or why there is none
stats = ck.lane_stats(lane)
pl.DataFrame([stats.as_dict()]).select(
    "buckets", "slots", "occupied_slots", "load_factor", "bits_per_item", "estimated_fpr"
)

# %% [markdown]
# ## Where the fingerprints sit
#
# Each stripe is a range of buckets, coloured by its slot load. Brush the top strip to zoom the
# bottom one: in a live JupyterLab the brushed range comes back to Python and its words are
# listed under the chart. Until a brush moves (and in a headless run), the first buckets are listed.

# %%
ck.viz.occupancy_explorer(lane, bins=512)

# %% [markdown]
# ## Slots per bucket against theory
#
# If fingerprints landed independently, the number of occupied slots in a bucket would be
# Binomial(4, α). Cuckoo insertion is not independent: an item tries bucket *a*, then *b*, then
# evicts, so the real histogram is where the filter's behaviour shows.

# %%
ck.viz.slots_histogram_chart(lane)

# %% [markdown]
# ## Fingerprint values
#
# A fingerprint is the low 16 bits of `xxh3_64(hash, seed)` (0 is reserved for "empty" and
# maps to 1). A good hash spreads them evenly; a skew would raise the false-positive rate.

# %%
ck.viz.fingerprint_chart(lane)

# %% [markdown]
# ## Load over the stream
#
# From the stream alone: each installed snapshot's occupied slots, plus every delta image's
# change in occupied slots. At four sequences the lane is rebuilt and probed with 100,000
# distinct random hashes: the measured false-positive rate, with its 95 % Wilson interval,
# beside the 8α/65534 estimate (notebook 06 measures it over a whole run).

# %%
seed = cap.frames.select("cbi1_seed").drop_nulls().head(1).collect().item()
health = ck.viz.filter_health_table(
    cap.snapshots.collect(),
    cap.images.collect(),
    report=report,
    seed=seed,
    fpr_points=4,
    fpr_probes=100_000,
    max_points=300,  # the load at 300 sequences: the chart stays light to draw and to store
)
ck.viz.filter_health_chart(health)

# %% [markdown]
# ## Watching a filter fill up and fail
#
# `expected_blocks_per_dc` sizes the filter (`bucket_count` is the next power of two that keeps
# the load under the target). The simulated pools hold up to 2 × 4,096 blocks each; below that
# the filter runs out of room and inserts start failing.

# %%
workload = ck.read_mooncake(trace, limit=requests)
runs = []
for expected in (8192, 2048, 512):
    config = ck.SimulatorConfig(
        dcs=1,
        workers_per_dc=2,
        capacity_blocks=4096,
        policy="exact",
        expected_blocks_per_dc=expected,
    )
    result = ck.Simulator(config).run(workload, health_every=32)
    runs.append(
        result.health_table().with_columns(
            pl.lit(f"{expected} expected ({config.ckf_config().bucket_count()} buckets)").alias(
                "filter"
            )
        )
    )
sweep = pl.concat(runs)
ck.viz.compare_runs_chart(
    sweep, x="request", metrics=["load_factor", "resident_items", "capacity_failures"], by="filter"
)

# %%
sweep.group_by("filter", maintain_order=True).agg(
    pl.col("load_factor").max().alias("peak_load"),
    pl.col("capacity_failures").max().alias("capacity_failures"),
)

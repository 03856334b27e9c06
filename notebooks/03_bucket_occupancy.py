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
# ## The false-positive rate, derived
#
# A router looks up an item the lane does not hold in its two buckets: 2 × 4 = 8 slots, of which
# a fraction α is occupied, so about 8α fingerprints to compare. One comparison matches by chance
# with probability 65,538 / 2^32 ≈ 1 / 65,534: 2^16 equally likely 16-bit values, except that 0
# is promoted to 1, so the value 1 comes up twice as often. Hence about 8α / 65,534 per lookup.
# With this lane's numbers:

# %%
alpha = stats.load_factor
match = 65538 / 2**32  # one slot compared: the chance its fingerprint equals the item's
print(f"load factor α = {alpha:.4f}: about 8α = {8 * alpha:.2f} occupied slots compared")
print(f"8α × 65538/2^32 = {8 * alpha * match:.3g} per lookup of an absent item")
print(f"the package's estimate: {ck.ckf.estimated_false_positive_rate(alpha):.3g}")

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
# How to read it: each bar counts the buckets with 0 to 4 occupied slots; each diamond is what
# Binomial(4, α) predicts at the same load. An item goes to bucket *a* whenever *a* has room and
# only then to *b*, so buckets fill unevenly: the bundled sample has more empty and more full
# buckets than the diamonds. A full bucket is where the next insert must kick a resident; a
# filter near its limit has most of its buckets at 4.

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
#
# A **capacity failure** is one item the producer could not insert: both its buckets were full
# and `max_kicks` evictions found no free slot, so the walk is rolled back and the item is not in
# the filter at all (a block the DC holds that no router will see). `capacity_failures` counts
# them from the start of the run (items, not requests); `load_factor` is α, the share of slots
# occupied, so 1.0 means every slot of the lane is full.

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

# %% [markdown]
# # Filter accuracy
#
# *New words (lane, pool, epoch, image, ...): the [glossary](../docs/glossary.md).*
#
# A global router asks the CKF "how many leading blocks of this request does each pool hold?"
# (`find_prefix_depths`). Two things make the answer differ from the truth:
#
# - **false positives**: an absent block's fingerprint happens to be in one of its two buckets
#   (about 8α/65534 per probe at slot load α), which can only *lengthen* a prefix;
# - **capacity holes**: an insert that failed leaves a resident block out of the filter, which
#   can only *shorten* one.
#
# We route the Mooncake trace twice — by the CKF and by exact prefix matching — and compare.

# %% tags=["parameters"]
import cbi1kit as ck

trace = ck.data.mooncake_trace()  # the bundled trace (ck.data): or a Mooncake-format file
requests = 3000

# %%
import polars as pl

ck.setup_notebook()  # every chart draws here with no network

workload = ck.read_mooncake(trace, limit=requests)
pools = {"dcs": 4, "workers_per_dc": 2, "capacity_blocks": 2048}  # 4 DCs of 2 workers
ckf = ck.Simulator(ck.SimulatorConfig(**pools, policy="ckf")).run(workload)
exact = ck.Simulator(ck.SimulatorConfig(**pools, policy="exact")).run(workload)
print(f"hit rate: CKF routing {ckf.hit_rate:.4f}, exact routing {exact.hit_rate:.4f}")
print(f"CKF routing's measured FPR: {ckf.fpr}")
print(f"8α/65534 at the probes' mean load α = {ckf.mean_probe_load:.3f}: ", end="")
print(ckf.fpr.against(ckf.estimated_fpr))

# %% [markdown]
# ## CKF depth against exact depth
#
# One cell per (exact, CKF) depth pair over every request and pool. Everything on the diagonal
# is a correct answer; above it, a false positive extended the prefix.

# %%
depths = ckf.depth_table()
ck.viz.prefix_depth_chart(depths)

# %%
depths.select(
    (pl.col("ckf_depth") == pl.col("exact_depth")).mean().alias("exact answers"),
    (pl.col("ckf_depth") > pl.col("exact_depth")).sum().alias("over (false positive)"),
    (pl.col("ckf_depth") < pl.col("exact_depth")).sum().alias("under (hole)"),
)

# %% [markdown]
# ## Measured false-positive rate against load
#
# Shrinking `expected_blocks_per_dc` packs the same blocks into fewer buckets, and the load
# rises. Does the measured rate follow the 8α/65534 estimate? Each distinct absent block counts
# once per lane (a recurring absent prefix is one trial, not one per request that repeats it),
# and each rate carries its 95 % Wilson interval; the table under the chart says where the
# estimate falls.

# %%
runs = []
for expected in (16384, 8192, 4096, 3072):
    cfg = ck.SimulatorConfig(**pools, policy="ckf", expected_blocks_per_dc=expected)
    result = ck.Simulator(cfg).run(workload)
    runs.append(
        {
            "expected_blocks_per_dc": expected,
            "load_factor": result.mean_probe_load,
            **result.fpr.columns(),
            "estimated_fpr": result.estimated_fpr,
            "against_the_estimate": result.fpr.against(result.estimated_fpr),
            "capacity_failures": sum(result.capacity_failures),
            "depth_underestimates": result.depth_underestimates,
        }
    )
sweep = pl.DataFrame(runs)
ck.viz.fpr_vs_load_chart(
    sweep, subtitle=f"simulations of {len(workload):,} requests of {str(trace).rsplit('/', 1)[-1]}"
)

# %%
ck.viz.full_table(
    sweep.select(
        "expected_blocks_per_dc",
        "load_factor",
        "false_positives",
        "fpr_probes",
        "measured_fpr",
        "estimated_fpr",
        "against_the_estimate",
    )
)

# %% [markdown]
# ## Capacity holes
#
# When the filter is too small, inserts fail. A failed block is resident in a worker's cache
# but absent from the filter, so a request for it stops matching early (`depth_underestimates`).

# %%
sweep.select("expected_blocks_per_dc", "load_factor", "capacity_failures", "depth_underestimates")

# %% [markdown]
# ## What if …?
#
# The run above, with its knobs on sliders: each move simulates the same requests again and redraws
# the four charts in place — the measured rate against load beside 8α/65534, CKF against exact
# depth, each DC's load over time and the churn its producer publishes (brush a window of time in
# either of those two) — with the headline figures above them. Try `expected_blocks_per_dc` down to
# 2,048 and 1,024: the load climbs towards 1, the measured rate follows the estimate up, capacity
# failures appear, and the kicks rewrite so many buckets that the churn jumps; then `max_kicks`
# down to a handful at that size: inserts give up sooner, so fewer buckets are rewritten and more
# blocks are left out. Without a browser, `explorer.update(expected_blocks_per_dc=1024)` returns
# the same figures as a table.

# %%
explorer = ck.viz.what_if(workload, policy="ckf", **pools)  # `trace`: up to the whole trace
explorer

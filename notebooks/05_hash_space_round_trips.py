# %% [markdown]
# # Hash-space round trips
#
# The filter stores 64-bit *canonical sequence hashes*. How tokens become those hashes depends on
# the pool's **hash space**:
#
# - **standard** (`DynamoStandardV1`): blocks of `block_size` tokens;
# - **EAGLE** (`DynamoEagleV1`): windows of `block_size + 1` tokens, stride `block_size`;
# - **LoRA**: the adapter's name salts the block seed;
# - **cache namespace**: a tenant's namespace salts it too (independently of LoRA).
#
# Here each space gets its own pool and consumer lane. Tokens travel the whole way —
# block hashes, sequence hashes, a Stored event at the producer, a barrier snapshot as CBI1
# chunks, assembly at the consumer, a child Stored event as a CBI1 delta — and then every
# space's query is searched in every lane.

# %% tags=["parameters"]
block_size = 16
seed = 2026
adapter = "acme/qwen3-support-lora"
namespace = "tenant-a"

# %%
import numpy as np
import polars as pl

import cbi1kit as ck

# %% [markdown]
# ## A LoRA reached through an alias
#
# Requests name a model or an alias; the hash salt is the *canonical* adapter name the alias
# resolves to, so every alias of one adapter lands in the same space.

# %%
registrations = (
    ck.CanonicalModelRegistration.new("Qwen/Qwen3-0.6B", aliases=["qwen3-small"]),
    ck.CanonicalModelRegistration.with_target(
        adapter, ck.ModelTarget.lora("Qwen/Qwen3-0.6B", adapter), aliases=["support-bot"]
    ),
)
for requested in ("Qwen/Qwen3-0.6B", "qwen3-small", "support-bot", adapter):
    print(f"{requested!r:28} -> lora salt {ck.resolve_lora_name(registrations, requested)!r}")

# %%
lora = ck.resolve_lora_name(registrations, "support-bot")
spaces = [
    ck.HashSpace("standard"),
    ck.HashSpace("eagle", ck.KvQueryHashFormat.DYNAMO_EAGLE_V1),
    ck.HashSpace("lora (via alias)", lora_name=lora),
    ck.HashSpace("namespace", cache_namespace=namespace),
    ck.HashSpace("eagle + lora", ck.KvQueryHashFormat.DYNAMO_EAGLE_V1, lora_name=lora),
]
rng = np.random.default_rng(seed)
initial = rng.integers(0, 150_000, 5 * block_size + 3, dtype=np.uint32)
expanded = np.concatenate([initial, rng.integers(0, 150_000, 4 * block_size, dtype=np.uint32)])

# %% [markdown]
# ## Same tokens, different hashes
#
# The first block hash of the same tokens in each space (hex: these are u64 values):

# %%
pl.DataFrame(
    {
        "space": [s.name for s in spaces],
        "blocks": [len(s.block_hashes(expanded, block_size)) for s in spaces],
        "first block hash": [ck.hex64(s.block_hashes(expanded, block_size)[:1])[0] for s in spaces],
    }
)

# %% [markdown]
# ## The round trip
#
# Every stage checks out when the consumer's lane equals the producer's words, after the
# snapshot and again after the delta:

# %%
trip = ck.sim.hash_space_round_trip(spaces, initial, expanded, block_size=block_size)
trip.stages()

# %% [markdown]
# ## Each space finds itself, and not the others
#
# Rows: the space a query was hashed in. Columns: the lane of each space's pool. The diagonal is
# the full query length; everything else is 0 (a cuckoo filter can report a false positive, but
# a chain of them across consecutive blocks is vanishingly unlikely).

# %%
trip.depth_matrix()

# %% [markdown]
# ## Cross-checked against the compiled upstream implementation
#
# When `dynamo._core` (PyPI `ai-dynamo-runtime`) is installed, the block hashes above are
# recomputed by the real Rust code. Without it this cell says so and checks nothing.

# %%
try:
    from dynamo import _core
except ImportError:
    print("dynamo._core is not installed: pip install 'cbi1kit[oracle]' to cross-check")
else:
    rows = []
    for space in spaces:
        ours = space.block_hashes(expanded, block_size).tolist()
        theirs = _core.compute_block_hash_for_seq(
            expanded.tolist(),
            block_size,
            lora_name=space.lora_name,
            is_eagle=space.hash_format.is_eagle,
            cache_namespace=space.cache_namespace,
        )
        rows.append(
            {"space": space.name, "blocks": len(ours), "dynamo._core agrees": ours == theirs}
        )
    print(pl.DataFrame(rows))

# %% [markdown]
# # Hash-space round trips
#
# *New words (lane, pool, epoch, image, ...): the [glossary](../docs/glossary.md).*
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
# upstream's acceptance test, walked through below: which of its four cases
seed_hash_format = "dynamo_eagle_v1"  # or "dynamo_standard_v1"
seed_via_lora_alias = True

# %%
import numpy as np
import polars as pl

import cbi1kit as ck

renderer = ck.setup_notebook()  # every chart draws here with no network

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
stages = trip.stages()
assert stages["snapshot_matches_producer"].all() and stages["delta_matches_producer"].all()
ck.viz.full_table(stages)

# %% [markdown]
# ## One consumer table per indexer domain
#
# A global router's consumer table (upstream's `GlobalCkfManifest`) covers exactly one indexer
# domain: the model's cache semantics (block size and hash format) and the endpoint's routing
# scope, with at most one lane per DC. Standard and EAGLE pools are different domains, so they
# can never share a table; LoRA and cache-namespace salts live inside the token hashes, so those
# pools stay in the standard domain. Each pool here sits in a DC of its own: two tables, a lane
# per pool.

# %%
trip.stages().select("space", "domain", "lane")

# %% [markdown]
# ## Each space finds itself, and not the others
#
# Rows: the space a query was hashed in. Columns: the lane of each space's pool, searched in its
# own domain's table. The diagonal is the full query length; everything else is 0 (a cuckoo
# filter can report a false positive, but a chain of them across consecutive blocks is
# vanishingly unlikely).

# %%
matrix = trip.depth_matrix()
for row in matrix.iter_rows(named=True):
    assert all(row[s.name] == (row["blocks"] if s.name == row["query"] else 0) for s in spaces)
ck.viz.full_table(matrix)

# %% [markdown]
# ## Cross-checked against the compiled upstream implementation
#
# When `dynamo._core` (PyPI `ai-dynamo-runtime`) is installed, the block hashes above are
# recomputed by the real Rust code, and the cell fails unless every space agrees. Without it
# this cell says so and checks nothing.

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
        assert ours == theirs, f"{space.name}: cbi1kit and dynamo._core disagree"
    print(pl.DataFrame(rows))

# %% [markdown]
# ## Upstream's acceptance test, step by step
#
# Upstream's relay adapter (`kv_dc_relay/publication.rs`) carries one round-trip test,
# `cbi1_snapshot_and_delta_preserve_standard_eagle_and_lora_query_spaces`; cbi1kit runs it in
# `tests/test_seed_round_trip.py`. It has four cases (standard and EAGLE, each for the base model
# and for a LoRA reached through an alias); the parameters pick one. Here it is with the
# adapter's own frames, using upstream's values: block size 4, tokens `0..13` then `0..21`, cache
# namespace `"tenant-ns"`, a producer sized for 64 blocks that publishes after every event.
#
# **1. Resolve the requested model.** The advertised registration is the base model `llama`,
# or the adapter `tenant-a` on `llama` with the alias `tenant-chat`. A request through the alias
# salts its hashes with the *canonical* adapter name.

# %%
semantics = ck.hashing.KvQuerySemantics(4, ck.KvQueryHashFormat.from_serde_name(seed_hash_format))
llama = ck.hashing.CanonicalModelId("llama")
tenant_a = ck.hashing.CanonicalModelId("tenant-a")
if seed_via_lora_alias:
    advertised = [
        ck.CanonicalModelRegistration.with_target(
            tenant_a, ck.ModelTarget.lora(llama, tenant_a), [ck.hashing.ModelAlias("tenant-chat")]
        )
    ]
    requested_model = "tenant-chat"
else:
    advertised = [ck.CanonicalModelRegistration.new(llama, [])]
    requested_model = "llama"
resolved = ck.hashing.resolve_registration(advertised, requested_model)
canonical_lora = resolved.lora_name
print(f"{requested_model!r} -> {resolved.model.value!r} ({resolved.target.kind})")
print(f"block hashes are salted with lora_name={canonical_lora!r}")

# %% [markdown]
# **2. Block hashes, then 3. sequence hashes.** The expanded request extends the initial one, so
# its block hashes start with the initial ones. The producer's events name blocks by an engine
# id; here, as upstream, that is the sequence hash XOR `0xC0DE_CAFE_D15C_0A11`, so the filter
# must derive the sequence hashes itself rather than copy the ids.

# %%
hash_options = {
    "lora_name": canonical_lora,
    "cache_namespace": "tenant-ns",
    "is_eagle": semantics.hash_format.is_eagle,
}
initial_local = ck.compute_block_hash_for_seq(
    list(range(13)), semantics.kv_block_size, **hash_options
)
expanded_local = ck.compute_block_hash_for_seq(
    list(range(21)), semantics.kv_block_size, **hash_options
)
assert expanded_local[: len(initial_local)].tolist() == initial_local.tolist()
assert len(expanded_local) > len(initial_local)
initial_sequence = ck.compute_seq_hash_for_block(initial_local)
expanded_sequence = ck.compute_seq_hash_for_block(expanded_local)
external_mask = np.uint64(0xC0DE_CAFE_D15C_0A11)
pl.DataFrame(
    {
        "block": range(len(expanded_local)),
        "event": [
            "initial" if i < len(initial_local) else "child" for i in range(len(expanded_local))
        ],
        "local (tokens_hash)": ck.hex64(expanded_local),
        "sequence (stored)": ck.hex64(expanded_sequence),
        "engine id (block_hash)": ck.hex64(expanded_sequence ^ external_mask),
    }
)

# %% [markdown]
# **4. The producer stores the initial blocks** (worker 1, dp_rank 0) and publishes, then takes a
# barrier snapshot: a copy of every bucket word.

# %%
producer = ck.DcCkfState(ck.CkfConfig(64, publish_every_n_events=1))
n_initial = len(initial_local)
initial_outcome = producer.apply(
    ck.ckf.KvStored(
        1,
        tuple(
            ck.ckf.StoredBlock(s, t)
            for s, t in zip(
                (initial_sequence ^ external_mask).tolist(), initial_local.tolist(), strict=True
            )
        ),
        dp_rank=0,
    )
)
assert initial_outcome.error is None
assert initial_outcome.batch is not None
_, snapshot_buckets = producer.barrier_snapshot()
print(f"{producer.resident_count} blocks in {producer.bucket_count} buckets")

# %% [markdown]
# **5. The adapter turns the snapshot into frames.** The hub snapshot is at sequence 1 under the
# producer's identity (pool digests `v` and `v + 1`, where `v` is the format's identity version,
# plus 10 for the LoRA case; DC 7) and a lease on lane 0. Every frame carries that identity and
# the snapshot-chunk kind; the payload is opaque CBI1.

# %%
pool_byte = semantics.hash_format.identity_version + (10 if seed_via_lora_alias else 0)
pool = ck.hashing.PoolId(
    ck.hashing.IndexerDomainId(
        ck.hashing.CacheSemanticsId(bytes([pool_byte] * 16), ck.hashing.IdentitySource.EXPLICIT),
        ck.hashing.RoutingScopeId(bytes([pool_byte + 1] * 16), ck.hashing.IdentitySource.EXPLICIT),
    ),
    ck.hashing.DcId(7),
)
identity = ck.hashing.ProducerIdentity(pool, 11, 1, producer.format)
lease = ck.hashing.LaneLease(ck.hashing.ConsumerInstanceId(13), 0, 1)
snapshot_frames = list(
    ck.encode_snapshot_publication(ck.HubSnapshot(identity, 1, snapshot_buckets, lease=lease))
)
for frame in snapshot_frames:
    assert frame.identity == identity
    assert frame.kind == ck.relay.PublicationFrameKind.SNAPSHOT_CHUNK
pl.DataFrame(
    {
        "kind": [f.kind.value for f in snapshot_frames],
        "base_sequence": [f.base_sequence for f in snapshot_frames],
        "sequence": [f.sequence for f in snapshot_frames],
        "payload bytes": [len(f.payload) for f in snapshot_frames],
        "queued bytes": [f.queued_bytes for f in snapshot_frames],
    }
)

# %% [markdown]
# **6. The consumer assembles the snapshot.** It decodes each payload against the format it
# expects, absorbs the chunks in order, and writes the assembled images into its lane: the lane
# equals the producer's words at sequence 1.

# %%
wire_format = ck.FilterFormat(seed=identity.format.seed, bucket_count=identity.format.bucket_count)
assembly = ck.SnapshotAssembly(wire_format)
assembled = None
for frame in snapshot_frames:
    done = assembly.absorb(ck.decode(wire_format, frame.payload))
    if done is not None:
        assembled = done
assert assembled is not None, "all CBI1 snapshot chunks must assemble"
consumer_lane = np.zeros(wire_format.bucket_count, dtype=np.uint64)
consumer_lane[assembled.images["bucket"]] = assembled.images["word"]
assert assembled.epoch == 1
assert consumer_lane.tolist() == snapshot_buckets.tolist()
print(f"assembled at sequence {assembled.epoch}: {assembled.image_count} nonzero buckets")

# %% [markdown]
# **7. The child event and its delta frame.** The expanded request's new blocks arrive as a
# Stored event whose parent is the last initial block (by engine id). The producer publishes
# the buckets it changed, as absolute words; the adapter makes them one delta frame, 1 → 2.

# %%
child_outcome = producer.apply(
    ck.ckf.KvStored(
        1,
        tuple(
            ck.ckf.StoredBlock(s, t)
            for s, t in zip(
                (expanded_sequence[n_initial:] ^ external_mask).tolist(),
                expanded_local[n_initial:].tolist(),
                strict=True,
            )
        ),
        parent_hash=int(initial_sequence[-1] ^ external_mask),
        dp_rank=0,
    )
)
assert child_outcome.error is None
assert child_outcome.batch is not None, "publication threshold emits the delta"
producer_delta = ck.DcCkfDelta(
    identity, lease, 1, 2, child_outcome.batch.buckets, child_outcome.batch.values
)
delta_frame = ck.encode_delta_publication(producer_delta)
assert delta_frame.kind == ck.relay.PublicationFrameKind.DELTA
ck.inspect(delta_frame.payload, wire_format)

# %% [markdown]
# **8. Decode, apply, compare.** The delta names the pool's DC and advances base epoch 1 to
# epoch 2; written into the consumer's lane, its images give the producer's words exactly.

# %%
decoded_delta = ck.decode(wire_format, delta_frame.payload)
assert isinstance(decoded_delta, ck.wire.Delta), "encoded Relay delta decoded as a snapshot chunk"
assert decoded_delta.header.dc_id == int(identity.dc_id)
assert decoded_delta.base_epoch == 1
assert decoded_delta.header.epoch == 2
before = consumer_lane[decoded_delta.buckets]
consumer_lane[decoded_delta.buckets] = decoded_delta.words
_, producer_words = producer.barrier_snapshot()
assert consumer_lane.tolist() == producer_words.tolist()
pl.DataFrame(
    {
        "bucket": decoded_delta.buckets,
        "word before": ck.hex64(before),
        "word after": ck.hex64(decoded_delta.words),
    }
)

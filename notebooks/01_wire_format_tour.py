# %% [markdown]
# # A byte-by-byte tour of CBI1
#
# *New words (lane, pool, epoch, image, ...): the [glossary](../docs/glossary.md).*
#
# Dynamo's KV DC relay ships each data-centre pool's **cuckoo filter** to global routers as
# **CBI1** frames ("Cuckoo Bucket Images"). A lane of the filter is an array of 64-bit *bucket
# words*; each word packs four 16-bit fingerprint slots. The relay sends the whole lane once (a
# **snapshot**, cut into ordered chunks of at most 524,288 words), then **deltas**: the absolute new
# value of every bucket a publication touched.
#
# In this notebook we build a tiny filter, encode a delta and a snapshot, read both back byte by
# byte, break them on purpose, and watch every check fire. Nothing here is hand-written bytes:
# the tables and dumps come from the same layout definition the decoder uses.

# %% tags=["parameters"]
seed = 0x5EED  # the CKF xxh3 seed: part of the filter's format
bucket_count = 1024  # a power of two in 2..=2**24
dc_id = 7  # the producing pool's DcId (informational inside the frame)

# %%
import numpy as np
import polars as pl

import cbi1kit as ck

ck.setup_notebook()  # every chart draws here with no network

fmt = ck.FilterFormat(seed=seed, bucket_count=bucket_count)
fmt

# %% [markdown]
# ## 1. A tiny filter
#
# An item is a 64-bit *canonical sequence hash* (a prefix of a token sequence). The filter maps
# it to a 16-bit fingerprint and two candidate buckets with `xxh3_64(h, seed)`; insertion puts the
# fingerprint in the first free slot of bucket *a*, else *b*, else starts kicking residents along.

# %%
tokens = list(range(64))  # 4 blocks of 16 tokens
block_hashes = ck.compute_block_hash_for_seq(tokens, 16)
items = ck.compute_seq_hash_for_block(block_hashes)
addressing = ck.CkfAddressing(seed=seed, bucket_count=bucket_count)
table = ck.CuckooTable(addressing)
rng = ck.ckf.SplitMix64(ck.ckf.lane_rng_seed(seed))
touched: dict[int, int] = {}
for item in items.tolist():
    for bucket, before in table.insert(item, rng, ck.ckf.DEFAULT_MAX_KICKS) or []:
        touched.setdefault(bucket, before)  # first-touch original, as the producer keeps it

fp, bucket_a, bucket_b = addressing.prepare_many(items)
pl.DataFrame(
    {
        "item": ck.hex64(items),
        "fingerprint": [f"0x{v:04x}" for v in fp.tolist()],
        "bucket_a": bucket_a,
        "bucket_b": bucket_b,
    }
)

# %% [markdown]
# ### The anatomy of an item and of a word
#
# One item, step by step: `xxh3_64` of its 8 little-endian bytes under the format's seed; the
# **fingerprint** is the low 16 bits (0 becomes 1, as 0 marks an empty slot); **bucket a** is the
# bits above, masked to the table; **bucket b** is a XOR delta(fp), and delta depends on the
# fingerprint alone, so a resident can be kicked to its other bucket without its item.

# %%
anatomy = addressing.anatomy(int(items[0]))
print(anatomy)

# %% [markdown]
# A bucket is one 64-bit **word** of four 16-bit slots, and slot 0 is the word's **low** 16 bits
# (a frame stores the word little-endian, so slot 0 is also its first two bytes). The bucket that
# holds the item's fingerprint:

# %%
print(ck.ckf.slots_text(table.word(table.bucket_of(int(items[0])))))

# %% [markdown]
# ## 2. A delta, field by field
#
# A delta carries `(bucket u32, word u64)` images — 12 bytes each, packed — for every bucket that
# changed, advancing the stream from `base_epoch` N to `epoch` N+1.

# %%
images = [(bucket, table.word(bucket)) for bucket in touched]
delta_bytes = ck.encode_delta(fmt, dc_id, 0, 1, images)
ck.inspect(delta_bytes).hexdump()

# %% [markdown]
# The field table is generated from the layout the codec itself runs on (shown whole: every
# field and its meaning):

# %%
ck.viz.full_table(pl.DataFrame(ck.wire.layout_rows()))

# %% [markdown]
# And the same layout as a picture: every header field to scale, then the whole frame.

# %%
ck.viz.byte_map_chart(delta_bytes)

# %% [markdown]
# Hover any byte below: its field, value and offset (in the layout tables' words).

# %%
ck.viz.byte_explorer(delta_bytes)

# %% [markdown]
# ### A filter to play with
#
# Sixteen buckets of four slots, half full. Insert a hash (or leave the box empty for a random
# one) and watch its fingerprint and buckets *a*/*b*; once both buckets are full the insert
# kicks a resident fingerprint to its other bucket, and so on. Every step publishes the delta
# frame a relay would ship: the absolute words of the buckets it wrote, bytes labelled.

# %%
ck.viz.filter_playground(seed=seed, bucket_count=16, fill=32)

# %% [markdown]
# ## 3. Deltas are absolute, and step a sequence
#
# A delta does not say "add fingerprint x": each image is its bucket's **whole new word**. A
# consumer lane (`ck.ckf.Lane`) installs a snapshot at sequence N (a snapshot is N→N: it
# replaces the lane whole) and then takes deltas N→N+1, one step at a time. The frame's `epoch`
# is the envelope's `sequence` under another name, and a delta's `base_epoch` its
# `base_sequence`. Below: the filter above installed at sequence 1, then one publication that
# inserts 600 more items (words filled, and words already holding fingerprints overwritten) and
# deletes the first item (its word back to 0); two images of each kind:

# %%
consumer = ck.ckf.Lane(bucket_count)
consumer.install(1, table.words())
before = table.words()
writes: dict[int, int] = {}
more = np.random.default_rng(1).integers(0, 2**64, 600, dtype=np.uint64)  # seeded
for item in more.tolist():
    for bucket, old in table.insert(item, rng, ck.ckf.DEFAULT_MAX_KICKS) or []:
        writes.setdefault(bucket, old)
bucket, old = table.delete(int(items[0]))
writes.setdefault(bucket, old)
publication = [(b, table.word(b)) for b in writes]
ck.viz.word_changes(before, publication).group_by("what", maintain_order=True).head(2)

# %% [markdown]
# The lane takes the delta 1→2, ignores the same delta sent again (nothing changes: the images
# are absolute, so a repeat could not double-count anyway), and faults on a delta whose base is
# not the sequence it holds; the lane is then out of service until a new lease and snapshot.

# %%
step = ck.decode(fmt, ck.encode_delta(fmt, dc_id, 1, 2, publication))
buckets, words = step.images["bucket"], step.images["word"]
print("delta 1→2:      ", consumer.apply(step.base_epoch, step.epoch, buckets, words))
print("the same again: ", consumer.apply(step.base_epoch, step.epoch, buckets, words))
print("words now equal the producer's:", bool((consumer.words == table.words()).all()))
try:
    consumer.apply(5, 6, buckets, words)
except ck.errors.LaneError as exc:
    print("delta 5→6:      ", exc)

# %% [markdown]
# ## 4. The checksum
#
# The last header field is the low 32 bits of `xxh3_64` over everything after byte 48. The decoder
# checks it before it trusts a single body byte.

# %%
print(f"header says 0x{int.from_bytes(delta_bytes[44:48], 'little'):08x}")
print(f"body hashes to 0x{ck.wire.body_checksum(delta_bytes):08x}")

# %% [markdown]
# The checksum covers the **body** only. Flip the header's `epoch` or `dc_id` and the frame still
# decodes: those two are checked a layer up, against the FilterUpdate envelope that carried the
# frame and the pool its stream subscribed to (the rules `cbi1-epoch` and `cbi1-dc-id`, which
# `cbi1kit replay` applies to a capture).

# %%
rules = {r.id: r for r in ck.wire.RULES}
for name, rule in (("epoch", "cbi1-epoch"), ("dc_id", "cbi1-dc-id")):
    flipped_header = bytearray(delta_bytes)
    flipped_header[ck.inspect(delta_bytes).field(f"header.{name}").offset] ^= 0x01
    header = ck.decode(fmt, bytes(flipped_header)).header
    print(f"{name} flipped: decodes ({name} = {getattr(header, name)}); caught by {rule}:")
    print("   ", rules[rule].message)

# %% [markdown]
# ## 5. Breaking frames on purpose
#
# `decode` stops at the first problem, exactly as upstream does; `inspect` keeps going and lists
# them all, in the order upstream checks them.

# %%
flipped = bytearray(delta_bytes)
flipped[-1] ^= 0x01
truncated = delta_bytes[:40]
other_format = ck.FilterFormat(seed=seed + 1, bucket_count=bucket_count)
broken = {
    "a flipped body bit": (bytes(flipped), fmt),
    "truncated to 40 bytes": (truncated, fmt),
    "the wrong format (seed)": (delta_bytes, other_format),
    "a CKF1 prototype frame": (b"CKF1" + delta_bytes[4:], fmt),
}
rows = []
for what, (data, expected) in broken.items():
    try:
        ck.decode(expected, data)
        outcome = "decoded"
    except ck.errors.Cbi1Error as exc:
        outcome = f"{exc.name}: {exc}"
    rows.append({"damage": what, "decode raises": outcome})
ck.viz.full_table(pl.DataFrame(rows))

# %%
report = ck.inspect(bytes(flipped), other_format)
print(report)

# %% [markdown]
# ### Now you: change a byte
#
# Pick a **Try it** prompt or set an offset and a value, then *apply*: the frame is inspected
# again against `fmt`, the byte you changed is outlined, and the first problem is what `decode`
# raises, with its field and offset. Each prompt breaks the frame the way one of upstream's golden
# vectors does (`tests/vectors/cbi1/frames/invalid/`, listed with their `checks` lines in
# [`manifest.json`](../tests/vectors/cbi1/manifest.json)).

# %%
explorer = ck.viz.byte_explorer(ck.inspect(delta_bytes, fmt))
explorer.edit()

# %% [markdown]
# The same prompts without a browser, each with the vector that shows it. Note the order: the
# body checksum (Try it 2) is checked before the flags (Try it 3), so a frame whose body was
# damaged in flight is reported as damaged, whatever its header claims.

# %%
for n in range(1, len(explorer.tries) + 1):
    print(explorer.try_it(n), end="\n\n")

# %% [markdown]
# ## 6. A snapshot in chunks, and assembly
#
# A lane of `bucket_count` words goes out as `ceil(bucket_count / 524288)` chunks. The consumer's
# `SnapshotAssembly` insists on chunk 0 first, then strictly the next one, same epoch, contiguous
# offsets, and full coverage.

# %%
big = ck.FilterFormat(seed=seed, bucket_count=1 << 21)  # four chunks
lane = table.words()
big_lane = np.zeros(big.bucket_count, dtype=np.uint64)
big_lane[: lane.shape[0]] = lane
chunks = ck.encode_snapshot_chunks(big, dc_id, 1, big_lane)
print(f"{len(chunks)} chunks, {[len(c) for c in chunks]} bytes each")
print(ck.inspect(chunks[1], big).hexdump(head=2, tail=1))
assembly = ck.SnapshotAssembly(big)
for i in (0, 1, 3):
    try:
        print(i, assembly.absorb(ck.decode(big, chunks[i])))
    except ck.errors.Cbi1Error as exc:
        print(i, "->", exc)

# %%
assembly = ck.SnapshotAssembly(big)
done = None
for chunk in chunks:
    done = assembly.absorb(ck.decode(big, chunk))
print(done, "nonzero buckets:", done.image_count if done else None)

# %% [markdown]
# ## 7. Size limits
#
# A frame is at most 4,194,368 bytes (a header, a 16-byte chunk prefix and 524,288 words), so a
# delta can carry at most 349,525 images; a larger publication is sent as a fresh snapshot instead.
# A chunk holds 2^19 = 524,288 words, 4 MiB of them: with the header and the chunk's prefix
# that is the largest frame, and a lane of the largest size, 2^24 buckets, is 32 chunks.

# %%
pl.DataFrame(
    {
        "limit": [
            "IMAGES_MAX_FRAME_BYTES",
            "max_delta_images()",
            "SNAPSHOT_CHUNK_BUCKETS",
            "MAX_BUCKET_COUNT",
        ],
        "value": [
            ck.wire.IMAGES_MAX_FRAME_BYTES,
            ck.wire.max_delta_images(),
            ck.wire.SNAPSHOT_CHUNK_BUCKETS,
            ck.wire.MAX_BUCKET_COUNT,
        ],
    }
)

# %%
try:
    ck.encode_delta(fmt, dc_id, 0, 1, [(0, 0)] * (ck.wire.max_delta_images() + 1))
except ck.errors.Cbi1Error as exc:
    print(exc)

# %% [markdown]
# # Loading captured frames
#
# *New words (lane, pool, epoch, image, ...): the [glossary](../docs/glossary.md).*
#
# A relay stream reaches cbi1kit in one of three shapes:
#
# | you have | read it with |
# |---|---|
# | a **kvrcap capture** (`cbi1kit record`, `cbi1kit simulate`) | `ck.read_capture(path)` |
# | a **grpcurl dump** (`grpcurl … > dump.json`) | `ck.capture.read_grpcurl_json(path)` |
# | **bare CBI1 frames** (one or more payloads per file) | `ck.capture.read_cbi1_files(path)` |
#
# `ck.read_frames(path)` looks at the first bytes and picks the right one. Every reader yields
# the same `FrameRecord`s, so everything below works on all three.
#
# The bundled capture (`ck.data`, shipped with the package) was simulated from the real Mooncake
# conversation trace (Apache-2.0) by `cbi1kit simulate`; replace `capture` with your own file.

# %% tags=["parameters"]
import cbi1kit as ck

capture = ck.data.sample_capture()  # the bundled files (ck.data): replace with your own
bare_frames = ck.data.delta_frame()
real = ck.data.real_capture()

# %%
import itertools
import tempfile
from pathlib import Path

import polars as pl

renderer = ck.setup_notebook()  # every chart draws here with no network

# %% [markdown]
# ## The frames table
#
# One row per received message: the envelope (kind, base sequence, sequence, producer), the CBI1
# header, whether its checksum holds, sizes, and the first per-message rule it breaks (if any).
# `ck.open` scans the capture once; the capture's tables and its replay all read that scan.
# `cap.frames` is a polars `LazyFrame`, built batch by batch.

# %%
cap = ck.open(capture)
frames = cap.frames.collect()
ck.viz.full_table(
    frames.select(
        "frame_index",
        "recv_time",
        "kind",
        "base_sequence",
        "sequence",
        "payload_len",
        "cbi1_checksum_ok",
        "image_count",
        "validation_error",
    ).head(8)
)

# %%
frames.group_by("kind").agg(
    pl.len().alias("messages"),
    pl.col("raw_len").sum().alias("bytes"),
    pl.col("image_count").mean().alias("mean_images"),
).sort("kind")

# %% [markdown]
# ## Replaying the stream
#
# Replay walks the messages in order with the consumer's rules — snapshot chunks in order, each
# delta exactly one step past the installed sequence, heartbeats at the installed sequence — and
# reports every event instead of stopping at the first problem. After a violation it waits for
# the next snapshot, as a real consumer does.

# %%
report = cap.replay()  # kept: asking again costs nothing
print("violations:", len(report.violations), "| events:", report.counts)
print("snapshots and the deltas after them:", report.sequence_ranges)

# %% [markdown]
# ## The lane at any sequence
#
# `lane_at(sequence)` rebuilds the lane as it was right after that sequence was applied: the
# snapshot that covers it plus the deltas up to it.

# %%
first, last = ck.viz.charted_lane(report).sequence_ranges[-1]  # or why there is no lane
middle = (first + last) // 2
lane = report.lane_at(middle)
print(f"sequence {middle}: {ck.ckf.lane_occupancy(lane)} occupied slots of {4 * lane.shape[0]}")
ck.viz.occupancy_chart(lane, bins=256)

# %% [markdown]
# The words of a bucket range (what a brush on the chart above selects), with their four
# 16-bit fingerprints:

# %%
ck.viz.bucket_words_table(lane, 0, 12)

# %% [markdown]
# ### Scrub through the stream
#
# Move the slider: the lane as the consumer held it right after that sequence, its load, and
# the delta that made it (every bucket word it wrote, before and after). Between two snapshot
# sessions there is no lane a router could use, and the scrubber says so. (In the static
# report: the view at the final sequence.)

# %%
ck.viz.stream_scrubber(capture, report=report)

# %% [markdown]
# ## Your own files
#
# A grpcurl dump reads back identically. Here we write the first messages of the capture the way
# grpcurl prints them, then read them as a user would:

# %%
records = list(itertools.islice(ck.read_capture(capture), 50))
with tempfile.TemporaryDirectory() as tmp:
    dump = Path(tmp) / "subscribe.json"
    ck.capture.write_grpcurl_json(records, dump)
    print(dump.read_text()[:400], "...")
    again = list(ck.read_frames(dump))
print("identical messages:", [r.update for r in again] == [r.update for r in records])

# %% [markdown]
# Bare CBI1 frames have no envelope: the reader takes sequence numbers from the CBI1 header.

# %%
for record in ck.read_frames(bare_frames):
    print(record.index, ck.decode(ck.peek_format(record.payload), record.payload))

# %% [markdown]
# ## A recording of Dynamo's own relay
#
# `ck.data.real_capture()` is not simulated: `make real-sample` started the relay that ships in
# `ai-dynamo-runtime` (`KvDcRelay`) on loopback, a worker published 200 seeded chains of
# 16-token blocks and evicted 60 of them whole, and `cbi1kit record` recorded it. Its
# `.workload.json` holds each chain's tokens, so the filter can be asked about every one: a live
# chain is found at full depth, an evicted one not at all.

# %%
import json

recorded = ck.open(real)
print(recorded.replay())
chains = json.loads(Path(f"{real}.workload.json").read_text())
depths = pl.DataFrame(
    {
        "blocks": [c["blocks"] for c in chains],
        "evicted": [c["evicted"] for c in chains],
        "depth": [
            recorded.explain(model="cbi1kit-tiny", tokens=c["tokens"]).lanes[0].depth
            for c in chains
        ],
    }
)
depths.group_by("evicted").agg(
    pl.len().alias("chains"),
    (pl.col("depth") == pl.when(pl.col("evicted")).then(0).otherwise(pl.col("blocks")))
    .all()
    .alias("all as expected"),
)

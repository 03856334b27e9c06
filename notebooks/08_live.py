# %% [markdown]
# # Watching a relay live
#
# *New words (lane, pool, epoch, stale, ...): the [glossary](../docs/glossary.md).*
#
# The other notebooks open a capture after the fact. `ck.live(target)` watches a relay as it
# runs: it subscribes in the background as `cbi1kit record` does (into a scratch capture, or
# `output=`), follows that capture, and `live.dashboard()` redraws every lane twice a second:
# its sequence, load factor and occupancy stripe, the estimated false-positive rate, the churn
# (images and bytes per second), the age of its last message (stale past `max_age_s`, as a
# router's scorer judges) and the rules it broke. `cbi1kit watch` shows the same in a terminal
# and serves it to Prometheus ([docs/watch.md](../docs/watch.md)).
#
# Here the relay is the simulated one, driven by the bundled Mooncake trace (Apache-2.0) on
# loopback; set `target` to your relay's `host:port` instead.

# %% tags=["parameters"]
import cbi1kit as ck

target = None  # a relay's host:port; None: a simulated relay on loopback, from the bundled trace
seconds = 8.0  # how long the cell below watches before the relay is stopped

# %%
import time

ck.setup_notebook()
relay = None
if target is None:
    relay = ck.sim.RelayServer.from_simulation(ck.data.mooncake_trace(), pace=0.02).start()
    target = relay.address
live = ck.live(target, max_age_s=5.0)
live

# %% [markdown]
# ## The dashboard
#
# Each row is a lane (a DC's pool); the stripe shades each stretch of buckets by how many of its
# four slots hold a fingerprint. *pause* stops the redrawing (the recording goes on), the picker
# shows one lane, *stop* ends the subscription.

# %%
live.dashboard()

# %%
time.sleep(seconds)  # the dashboard above moves meanwhile
print(live.state)

# %% [markdown]
# ## What the dashboard shows is what replay gives
#
# The watcher replays the recording by the consumer's rules as it grows, keeping only the lanes.
# The lane it shows at a sequence is the lane a replay of the same capture gives at that sequence.

# %%
sequence, words = live.watch.lane(0)
replayed = ck.replay(live.watch.path).lane_at(sequence)
print(f"sequence {sequence}: the same {len(words):,} words as replay: {(words == replayed).all()}")

# %% [markdown]
# ## Stopping
#
# `live.stop()` ends the subscription and every thread (so does the kernel's shutdown); the
# dashboard keeps its last picture.

# %%
live.stop()
if relay is not None:
    relay.stop()
live

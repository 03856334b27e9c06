"""Shared hypothesis strategies: formats, images, lanes and whole frames."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from cbi1kit.wire._codec import IMAGE_DTYPE
from cbi1kit.wire._format import U64_MAX, FilterFormat

u64 = st.integers(min_value=0, max_value=U64_MAX)
u64_edges = st.one_of(u64, st.sampled_from([0, 1, U64_MAX, U64_MAX - 1, 1 << 63, (1 << 63) - 1]))


@st.composite
def formats(draw: st.DrawFn, max_log2: int = 12) -> FilterFormat:
    """A valid format; lanes stay small (<= 2**max_log2 buckets) so examples are cheap."""
    return FilterFormat(draw(u64_edges), 1 << draw(st.integers(1, max_log2)))


@st.composite
def images_for(draw: st.DrawFn, fmt: FilterFormat, max_size: int = 64) -> np.ndarray:
    n = draw(st.integers(0, max_size))
    buckets = draw(st.lists(st.integers(0, fmt.bucket_count - 1), min_size=n, max_size=n))
    words = draw(st.lists(u64_edges, min_size=n, max_size=n))
    out = np.empty(n, dtype=IMAGE_DTYPE)
    out["bucket"] = buckets
    out["word"] = np.array(words, dtype=np.uint64)
    return out


@st.composite
def lanes_for(draw: st.DrawFn, fmt: FilterFormat) -> np.ndarray:
    """A lane with a drawn density of nonzero words (seeded from hypothesis, reproducible)."""
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
    rng = np.random.default_rng(seed)
    words = rng.integers(0, U64_MAX, fmt.bucket_count, dtype=np.uint64, endpoint=True)
    words[rng.random(fmt.bucket_count) >= density] = 0
    return words

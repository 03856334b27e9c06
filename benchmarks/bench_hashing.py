"""Block- and sequence-hash throughput, against the compiled upstream binding in the same run.

Run: ``.venv/bin/python benchmarks/bench_hashing.py``. Ratios are oracle time / our time on the
same input (higher is better); targets: >= 1.0x from numpy, >= 0.5x from a list, and >= 10 M
blocks/s for a batch of 10,000 chains of 32 blocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from cbi1kit.hashing._blocks import (
    compute_block_hash_for_seq,
    compute_seq_hash_batch,
    compute_seq_hash_for_block,
    compute_seq_hash_ragged,
)


def best_of(fn: Callable[..., Any], *args: Any, repeat: int = 15) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    try:
        import dynamo._core as core
    except ImportError:
        core = None
        print("dynamo._core not importable: ratios skipped")
    rng = np.random.default_rng(0)
    n_tokens = 131_072
    tokens = rng.integers(0, 2**32, n_tokens, dtype=np.uint64).astype(np.uint32)
    as_list = tokens.tolist()
    print(f"block hashing, {n_tokens:,} tokens (best of 15)")
    for bs in (16, 64):
        ours_np = best_of(compute_block_hash_for_seq, tokens, bs)
        ours_list = best_of(compute_block_hash_for_seq, as_list, bs)
        line = (
            f"  bs={bs:>2}: ours numpy {ours_np * 1e3:7.3f} ms, ours list {ours_list * 1e3:7.3f} ms"
        )
        if core is not None:
            assert compute_block_hash_for_seq(tokens, bs).tolist() == (
                core.compute_block_hash_for_seq(as_list, bs)
            )
            oracle_np = best_of(core.compute_block_hash_for_seq, tokens, bs)
            oracle_list = best_of(core.compute_block_hash_for_seq, as_list, bs)
            line += (
                f" | oracle numpy {oracle_np * 1e3:7.3f} ms, list {oracle_list * 1e3:7.3f} ms"
                f" | ratio numpy {oracle_np / ours_np:5.2f}x, list {oracle_list / ours_list:5.2f}x"
            )
        print(line)

    print("sequence hashes")
    one = rng.integers(0, 2**64, 100_000, dtype=np.uint64)
    t = best_of(compute_seq_hash_for_block, one, repeat=5)
    print(f"  one chain of {one.size:,} blocks: {one.size / t / 1e6:6.2f} M blocks/s")
    batch = rng.integers(0, 2**64, (10_000, 32), dtype=np.uint64)
    t = best_of(compute_seq_hash_batch, batch, repeat=10)
    print(f"  batch 10,000 x 32 (2-D):        {batch.size / t / 1e6:6.2f} M blocks/s")
    lengths = np.full(10_000, 32)
    t = best_of(compute_seq_hash_ragged, batch.ravel(), lengths, repeat=10)
    print(f"  batch 10,000 x 32 (ragged API): {batch.size / t / 1e6:6.2f} M blocks/s")
    lengths = rng.integers(1, 64, 10_000)
    flat = rng.integers(0, 2**64, int(lengths.sum()), dtype=np.uint64)
    t = best_of(compute_seq_hash_ragged, flat, lengths, repeat=10)
    print(f"  ragged 10,000 chains of 1..63:  {flat.size / t / 1e6:6.2f} M blocks/s")


if __name__ == "__main__":
    main()

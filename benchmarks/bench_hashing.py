"""Block hashes and sequence-hash chains, each against the plainest fair loop in the same run.

Baselines, and why each is fair:

* **Block hashing from numpy** (``compute_block_hash_for_seq(tokens_u32_array, bs)``) against
  **a per-block ``xxhash.xxh3_64_intdigest`` loop from the same numpy array**: the tokens'
  little-endian bytes once (``tobytes``), then one call per window with the same seed into a
  ``uint64`` array. That is what anyone would write with python-xxhash, the library our hashes
  are pinned to, and it does exactly our work (same windows, same seed, same output type).
  Goal >= 1.5x at ``bs`` 16 (the issue's figure), 64, and Mooncake's 512 (2 KiB windows,
  XXH3's long path: there the C hash is a larger share of the loop's time, and ours calls the
  same C function per window, so the ratio is the share of the loop's time spent slicing
  windows and calling from Python). Below ``COMPILED_MIN_BLOCKS`` (64) blocks a call takes the
  Python loop itself, and for a few dozen blocks the fixed cost of a call (argument checks,
  the tokens' bytes) is most of either side: the ``--quick`` sizes show that.
* The compiled upstream binding ``dynamo._core`` (when installed) **given a list**, its fast
  input path, beside it (no goal). Giving it a numpy array, its slow path (a Python sequence
  walk), is what inflated the old "ratio numpy" from 2x to 6.5x; that figure is gone.
* **Sequence hashes** on Mooncake-shaped batches (100 chains x 3,200 blocks: ragged API and 2-D
  batch) and on a wide batch (10,000 x 32) against **the per-call loop**: for each chain, one
  ``xxh3_64_intdigest(pack(parent, block), 1337)`` per block. Goal >= 20 M blocks/s on the
  Mooncake shapes.

The first call of each compiled path loads (or compiles, once) its kernel: the warm-up round,
reported on its own line, not in the timed rounds.

    .venv/bin/python benchmarks/bench_hashing.py [--quick] [--rounds N]
"""

from __future__ import annotations

import struct
import time
from itertools import repeat

import numpy as np
import xxhash
from _harness import Comparison, Report, compare, measure, parser

from cbi1kit.hashing._blocks import (
    CHAIN_XXH3_SEED,
    XXH3_SEED,
    compute_block_hash_for_seq,
    compute_seq_hash_batch,
    compute_seq_hash_ragged,
)

_xxh3 = xxhash.xxh3_64_intdigest
_PAIR = struct.Struct("<QQ").pack


def loop_block_hashes(tokens: np.ndarray, bs: int) -> np.ndarray:
    """The baseline: a per-block xxhash loop from the numpy array."""
    raw = tokens.astype("<u4", copy=False).tobytes()
    width = 4 * bs
    n = len(raw) // width
    windows = (raw[i : i + width] for i in range(0, n * width, width))
    return np.fromiter(map(_xxh3, windows, repeat(XXH3_SEED, n)), dtype=np.uint64, count=n)


def loop_chains(flat: list[int], lengths: list[int]) -> list[int]:
    """The baseline: every chain by the per-call loop."""
    out: list[int] = []
    at = 0
    for n in lengths:
        if n:
            parent = flat[at]
            out.append(parent)
            for b in flat[at + 1 : at + n]:
                parent = _xxh3(_PAIR(parent, b), CHAIN_XXH3_SEED)
                out.append(parent)
        at += n
    return out


def bench_blocks(report: Report, n_tokens: int, rounds: int) -> None:
    try:
        import dynamo._core as core
    except ImportError:
        core = None
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 2**32, n_tokens, dtype=np.uint64).astype(np.uint32)
    as_list = tokens.tolist()
    t = time.perf_counter()
    compute_block_hash_for_seq(tokens, 16)
    print(f"(first compiled call, loading the kernel: {time.perf_counter() - t:.2f} s)")
    for bs in (16, 64, 512):
        n = n_tokens // bs
        ours = compute_block_hash_for_seq(tokens, bs)
        assert np.array_equal(ours, loop_block_hashes(tokens, bs))
        cand, base = compare(
            lambda bs=bs: compute_block_hash_for_seq(tokens, bs),
            lambda bs=bs: loop_block_hashes(tokens, bs),
            rounds=rounds,
        )
        note = ""
        if core is not None:
            assert ours.tolist() == core.compute_block_hash_for_seq(as_list, bs)
            oracle = measure(
                lambda bs=bs: core.compute_block_hash_for_seq(as_list, bs), rounds=rounds
            )
            note = (
                f"dynamo._core given a list (its fast input): {n / oracle.cpu_median / 1e6:.2f} M"
                f" blocks/s, ours from numpy {oracle.cpu_median / cand.cpu_median:.2f}x that"
            )
        report.figure(
            Comparison(
                f"block hashing from numpy, bs {bs} [{n_tokens:,} tokens, {n:,} blocks]",
                cand,
                base,
                "compute_block_hash_for_seq",
                "per-block xxhash loop from numpy",
                work=n,
                unit="M blocks/s",
                scale=1e6,
            ),
            goal_ratio=1.5,
            note=note,
        )


def bench_chains(report: Report, quick: bool, rounds: int) -> None:
    rng = np.random.default_rng(1)
    chains, length = (10, 320) if quick else (100, 3200)
    shapes = {
        f"Mooncake-shaped, ragged API [{chains} chains x {length:,}]": (
            rng.integers(0, 2**64, chains * length, dtype=np.uint64),
            np.full(chains, length),
            20e6,
        ),
        f"Mooncake-shaped, ragged lengths [{chains} chains of 1..{2 * length:,}]": (
            None,
            rng.integers(1, 2 * length, chains),
            20e6,
        ),
        f"Mooncake-shaped, 2-D batch [{chains} x {length:,}]": (
            rng.integers(0, 2**64, (chains, length), dtype=np.uint64),
            None,
            20e6,
        ),
        "wide 2-D batch [10,000 x 32]": (
            rng.integers(0, 2**64, (1000 if quick else 10_000, 32), dtype=np.uint64),
            None,
            None,
        ),
    }
    compute_seq_hash_ragged(np.zeros(64, np.uint64), [64])  # load the kernel (not timed)
    for name, (given, lengths, goal) in shapes.items():
        blocks = given
        if blocks is None:
            blocks = rng.integers(0, 2**64, int(lengths.sum()), dtype=np.uint64)
        if blocks.ndim == 2:
            flat_list = blocks.ravel().tolist()
            lens = [blocks.shape[1]] * blocks.shape[0]

            def ours(blocks: np.ndarray = blocks) -> np.ndarray:
                return compute_seq_hash_batch(blocks)
        else:
            flat_list, lens = blocks.tolist(), lengths.tolist()

            def ours(blocks: np.ndarray = blocks, lengths: np.ndarray = lengths) -> np.ndarray:
                return compute_seq_hash_ragged(blocks, lengths)

        assert ours().ravel().tolist() == loop_chains(flat_list, lens)
        cand, base = compare(ours, lambda f=flat_list, ls=lens: loop_chains(f, ls), rounds=rounds)
        report.figure(
            Comparison(
                f"sequence hashes, {name}",
                cand,
                base,
                "compute_seq_hash_*",
                "per-call xxhash loop per chain",
                work=blocks.size,
                unit="M blocks/s",
                scale=1e6,
            ),
            goal_rate=None if goal is None else goal / 1e6,
        )


def main() -> None:
    args = parser(__doc__).parse_args()
    report = Report("bench_hashing: block hashes and sequence-hash chains", args.quick)
    rounds = args.rounds or (2 if args.quick else 9)
    bench_blocks(report, 16_384 if args.quick else 131_072, rounds)
    bench_chains(report, args.quick, args.rounds or (2 if args.quick else 5))
    report.done()


if __name__ == "__main__":
    main()

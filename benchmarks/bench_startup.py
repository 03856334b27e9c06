"""Cold start (#17): what a fresh process pays before it does any work, each in fresh processes
against a baseline in the same run, alternating rounds.

* ``import cbi1kit`` and ``cbi1kit --help``, against the bare interpreter (``python -c pass``):
  heavy dependencies (polars, pyarrow, numba, altair) are imported where they are used, so
  neither pays for them. Goal: each <= 0.15 s by CPU median, the interpreter included.
* A notebook's first cell (``import cbi1kit as ck; ck.setup_notebook()`` in a live kernel's
  setting), with the offline chart bundle cached as ``make`` leaves it, against the same with an
  empty cache (altair bundles vega, vega-lite and vega-embed afresh). No goal.
* The first use of every compiled kernel (the frames table and replay of the bundled capture, a
  batch of block and sequence hashes, a kick walk), with numba's disk cache as ``make`` leaves
  it (``python -m cbi1kit._warm``), against the same compiled from nothing (``NUMBA_CACHE_DIR``
  an empty folder). Goal: <= 3 s by CPU median. ``--quick`` compares it with ``import cbi1kit``
  instead (a smoke run: compiling from nothing takes 15-20 s).
* The first ``ck.open(sample).replay()`` of a user (#47): in a fresh cache against the same
  with the cache warm. Goal: at most 4x, by wall median. The sample is under ``SMALL_INPUT``,
  so neither compiles (docs/kernels.md); beside it, a 9 MB fleet capture past it, whose fresh
  run compiles the walk and replay kernels (and says so on stderr). No goal.

CPU time is the child's and every process it waited for (``RUSAGE_CHILDREN``).

    .venv/bin/python benchmarks/bench_startup.py [--rounds 9] [--quick]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from subprocess import DEVNULL

from _harness import Comparison, Report, child_env, compare_processes, parser, time_process

from cbi1kit.data import mooncake_trace
from cbi1kit.viz._display import STATIC_ENV

PY = sys.executable

FIRST_CELL = "import cbi1kit as ck; ck.setup_notebook()"
FIRST_USE = """
import numpy as np
import cbi1kit as ck
from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._table import CuckooTable, SplitMix64, lane_rng_seed
from cbi1kit.hashing import compute_block_hash_for_seq, compute_seq_hash_batch

sample = ck.data.sample_capture()
ck.frames_table(sample).collect()
ck.replay(sample, keep_events=False)
blocks = compute_block_hash_for_seq(np.arange(16 * 256, dtype=np.uint32), 16)
compute_seq_hash_batch(blocks.reshape(16, 16))
addressing = CkfAddressing(seed=7, bucket_count=1 << 10)
fp, a, b = addressing.prepare_many(np.arange(1, 5000, dtype=np.uint64) * 0x9E3779B97F4A7C15)
CuckooTable(addressing).insert_many(fp, a, b, SplitMix64(lane_rng_seed(7)), 500)
"""


FIRST_REPLAY = "import cbi1kit as ck; ck.open(ck.data.sample_capture()).replay()"


def run(code_or_argv: str | list[str], **env: str) -> tuple[float, float]:
    argv = [PY, *code_or_argv] if isinstance(code_or_argv, list) else [PY, "-c", code_or_argv]
    # a live kernel's setting: charts are widgets, whatever this shell set
    return time_process(argv, env=child_env(**env) | {STATIC_ENV: ""})


def main() -> None:
    args = parser(__doc__).parse_args()
    rounds = args.rounds or (2 if args.quick else 9)
    report = Report("bench_startup: cold start", args.quick)
    bare = ("python -c pass", lambda: run("pass"))

    for name, candidate in (
        ("import cbi1kit", lambda: run("import cbi1kit")),
        ("cbi1kit --help", lambda: run(["-m", "cbi1kit", "--help"])),
    ):
        run("import cbi1kit")  # warm-up: the page cache and the bytecode
        cand, base = compare_processes(candidate, bare[1], rounds=rounds)
        report.figure(
            Comparison(name, cand, base, "", bare[0]),
            goal_time=0.15,
            note="a fresh process each round, the interpreter's own start included",
        )

    with tempfile.TemporaryDirectory() as scratch:
        rounds_made = iter(range(1_000_000))

        def empty() -> str:
            """A folder no round has used: every baseline round starts from nothing."""
            return str(Path(scratch) / f"empty-{next(rounds_made)}")

        run(FIRST_CELL)  # the bundle cached, as `make` leaves it
        cand, base = compare_processes(
            lambda: run(FIRST_CELL), lambda: run(FIRST_CELL, XDG_CACHE_HOME=empty()), rounds=rounds
        )
        report.figure(
            Comparison(
                "a notebook's first cell (import, setup_notebook)",
                cand,
                base,
                "bundle cached",
                "bundled afresh",
            )
        )
        kernels = {"CBI1KIT_SMALL_INPUT": "0"}  # the kernels, though the sample is small
        run(FIRST_USE, **kernels)  # numba's cache as `make` leaves it (a no-op when it is)
        if args.quick:
            baseline, label = (lambda: run("import cbi1kit")), "import cbi1kit"
        else:
            baseline, label = (
                (lambda: run(FIRST_USE, NUMBA_CACHE_DIR=empty(), **kernels)),
                "from nothing",
            )
        cand, base = compare_processes(
            lambda: run(FIRST_USE, **kernels), baseline, rounds=min(rounds, 3)
        )
        report.figure(
            Comparison(
                "first use of every compiled kernel (frames table, replay, hashes, kick walk)",
                cand,
                base,
                "disk cache warm",
                label,
            ),
            goal_time=3.0,
        )
        # the first replay a user runs (#47): a fresh cache against the same run warm, with
        # the default engines whatever this shell set (an empty value is the default)
        user = {"CBI1KIT_SMALL_INPUT": ""}
        run(FIRST_REPLAY, **user)
        cand, base = compare_processes(
            lambda: run(FIRST_REPLAY, NUMBA_CACHE_DIR=empty(), **user),
            lambda: run(FIRST_REPLAY, **user),
            rounds=1 if args.quick else min(rounds, 5),
        )
        report.figure(
            Comparison(
                "ck.open(sample).replay() in a fresh process", cand, base, "fresh cache", "warm"
            ),
            goal_ratio=None if args.quick else 0.25,
            note="goal: the fresh cache's run at most 4x the warm one",
            clock="wall",
        )
        if not args.quick:  # past SMALL_INPUT the kernels run: what compiling them costs there
            big = Path(scratch) / "fleet.kvrcap"
            simulate = [PY, "-m", "cbi1kit", "simulate", str(mooncake_trace()), "-o", str(big)]
            subprocess.run([*simulate, "--dcs", "4", "--no-progress"], check=True, stdout=DEVNULL)
            code = FIRST_REPLAY.replace("ck.data.sample_capture()", repr(str(big)))
            run(code, **user)
            cand, base = compare_processes(
                lambda: run(code, NUMBA_CACHE_DIR=empty(), **user),
                lambda: run(code, **user),
                rounds=min(rounds, 5),
            )
            size = f"{big.stat().st_size / 1e6:.1f} MB"
            report.figure(
                Comparison(
                    f"ck.open(a {size} fleet capture).replay()", cand, base, "fresh", "warm"
                ),
                note="no goal: past SMALL_INPUT the first run compiles the walk and replay kernels",
                clock="wall",
            )
    report.done()


if __name__ == "__main__":
    main()

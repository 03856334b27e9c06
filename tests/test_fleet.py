"""``cbi1kit.fleet`` (#16): conversion and fleet queries as Dask computations.

One ``distributed.LocalCluster`` for the module (two worker processes, one thread each, on
loopback: ``fleet.client()``). Small simulated fleet captures (several DCs, two relays, broken
frames, a rotated recording) converted through Dask equal the in-process conversion row for row
(and file for file); every fleet query equals its single-process path exactly and agrees with
the captures' own tables; the CLI reaches the same cluster by its scheduler's address; an
unreachable scheduler is a ``ConnectionError`` and, on the command line, one line and exit 3.
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from cliutil import cli_run, one_line
from fleetdata import fleet_captures

from cbi1kit import fleet
from cbi1kit.analysis import export_dataset, frames_table, open_dataset, replay, snapshots_table
from cbi1kit.analysis._schema import DATASET_TABLES
from cbi1kit.capture import capture_segments
from cbi1kit.ckf import estimated_false_positive_rate, lane_stats
from cbi1kit.errors import FleetError


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    c = fleet.client()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return fleet_captures(tmp_path_factory.mktemp("captures"))


@pytest.fixture(scope="module")
def inputs(captures: dict[str, Path]) -> list[Path]:
    return [captures[k] for k in ("a", "b", "broken", "rotated")]


@pytest.fixture(scope="module")
def converted(
    client: Any, inputs: list[Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[Any]]:
    out = tmp_path_factory.mktemp("dask") / "fleet"
    return out, fleet.convert(inputs, out, client=client)


@pytest.fixture(scope="module")
def in_process(inputs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("local") / "fleet"
    export_dataset(inputs, out)
    return out


def test_the_cluster_is_two_worker_processes_on_loopback(client: Any) -> None:
    info = client.scheduler_info()
    workers = info["workers"]
    assert len(workers) == 2
    assert all(w["nthreads"] == 1 and w["host"] == "127.0.0.1" for w in workers.values())
    assert len({w["id"] for w in workers.values()}) == 2
    assert client.scheduler.address.startswith("tcp://127.0.0.1:")
    link = fleet.dashboard_link(client)
    assert link is not None and link.startswith("http://127.0.0.1:")
    pids = client.run(lambda: __import__("os").getpid())
    assert len(set(pids.values())) == 2 and __import__("os").getpid() not in pids.values()
    # one thread per worker, polars' pool included (set before the worker imports polars)
    pools = client.run(lambda: __import__("polars").thread_pool_size())
    assert set(pools.values()) == {1}
    # glibc's allocator as in this process (Dask's trim threshold doubled the page faults)
    trims = client.run(lambda: __import__("os").environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert set(trims.values()) == {__import__("os").environ.get("MALLOC_TRIM_THRESHOLD_")}
    # the profiler samples every 100 ms, not distributed's 10 ms
    assert set(client.run(_profile_interval).values()) == {"100ms"}


def _profile_interval() -> str:
    import dask

    return str(dask.config.get("distributed.worker.profile.interval"))


def test_a_users_dask_config_wins_over_the_local_clusters_own() -> None:
    import dask

    with (
        dask.config.set({"distributed.worker.profile.interval": "30ms"}),
        fleet.client(workers=1) as c,
    ):
        assert set(c.run(_profile_interval).values()) == {"30ms"}


def test_dask_conversion_equals_the_in_process_one(
    converted: tuple[Path, list[Any]], in_process: Path, inputs: list[Path]
) -> None:
    out, results = converted
    files = [p for c in inputs for p in capture_segments(c)]
    assert [r.path for r in results] == [str(p.resolve()) for p in files]  # a task per file
    assert not any(r.skipped for r in results)
    dask_ds, local_ds = open_dataset(out), open_dataset(in_process)
    for table in DATASET_TABLES:
        a = dask_ds.tables[table].collect().sort(pl.all())
        b = local_ds.tables[table].collect().sort(pl.all())
        assert a.height > 0 and a.equals(b), table
        names = {p.relative_to(out).as_posix() for p in dask_ds.files(table)}
        assert names == {p.relative_to(in_process).as_posix() for p in local_ds.files(table)}


def test_converting_again_through_dask_adds_nothing(
    client: Any, converted: tuple[Path, list[Any]], inputs: list[Path]
) -> None:
    out, _ = converted
    before = sorted(p.relative_to(out) for p in out.rglob("*.parquet"))
    done: list[int] = []  # the CLI's bar: a step as each file's task finishes
    again = fleet.convert(inputs[:2], out, client=client, progress=done.append)
    assert again and all(r.skipped for r in again) and done == [1] * len(again)
    assert sorted(p.relative_to(out) for p in out.rglob("*.parquet")) == before


@pytest.mark.parametrize("name", list(fleet.QUERIES))
def test_every_query_equals_the_single_process_path(
    client: Any, converted: tuple[Path, list[Any]], name: str
) -> None:
    out, _ = converted
    from cbi1kit.fleet._queries import query_graph

    graph = query_graph(name, out)
    leaves = {f.parent for t in fleet.QUERIES[name].tables for f in (out / t).rglob("*.parquet")}
    partials = [k for k in graph.dask if not str(k).startswith(f"{name}-combine-")]
    assert len(partials) == len(leaves) > 0  # a task per partition, and the combining one
    got = fleet.run_query(name, out, client=client)
    want = fleet.run_local(name, out)
    assert got.height > 0
    assert got.schema == want.schema and got.equals(want)


def test_churn_adds_up_to_the_captures_deltas(
    client: Any, converted: tuple[Path, list[Any]], inputs: list[Path]
) -> None:
    out, _ = converted
    churn = fleet.churn_per_pool_per_hour(out, client=client)
    assert churn.schema["deltas"] == pl.UInt64 and churn.schema["images"] == pl.UInt64
    deltas = pl.concat([frames_table(c).collect() for c in inputs]).filter(
        pl.col("kind") == "DELTA"
    )
    want = (
        deltas.group_by("dc_id")
        .agg(pl.len().cast(pl.UInt64).alias("deltas"), pl.col("image_count").cast(pl.UInt64).sum())
        .sort("dc_id")
    )
    got = churn.group_by("dc_id").agg(pl.col("deltas").sum(), pl.col("images").sum()).sort("dc_id")
    assert got["deltas"].equals(want["deltas"]) and got["images"].equals(want["image_count"])
    assert got.height >= 3  # several DCs


def test_load_ends_at_each_lane_final_load(
    client: Any, converted: tuple[Path, list[Any]], captures: dict[str, Path]
) -> None:
    out, _ = converted
    load = fleet.load_over_time(out, client=client)
    # capture a alone holds its pools (its DCs are in no other capture but broken's, whose
    # receive times are a's too): its lanes' final loads are the last load of their pool
    only = export_dataset(captures["a"], out.parent / "only-a")
    assert only
    mine = fleet.load_over_time(out.parent / "only-a", client=client)
    report = replay(captures["a"])
    for lane in report.lanes:
        assert lane.final_lane is not None
        stats = lane_stats(lane.final_lane)
        last = mine.filter(pl.col("dc_id") == lane.dc_id).sort("time").tail(1)
        assert last["load_factor"].item() == stats.load_factor
        assert last["estimated_fpr"].item() == estimated_false_positive_rate(stats.load_factor)
    assert set(mine["dc_id"].to_list()) <= set(load["dc_id"].to_list())


def test_snapshots_and_violations(
    client: Any, converted: tuple[Path, list[Any]], captures: dict[str, Path]
) -> None:
    out, _ = converted
    sizes = fleet.snapshot_sizes(out, client=client)
    installed = snapshots_table(captures["a"])
    capture = open_dataset(out).sources().filter(pl.col("path").str.ends_with("/a.kvrcap"))
    mine = sizes.filter(pl.col("capture") == capture["capture"][0])
    assert mine.height >= installed.height > 0
    assert (mine["words"] == mine["bucket_count"]).all()  # a whole lane in every snapshot
    violations = fleet.violations_per_relay(out, client=client)
    broken = replay(captures["broken"]).violations
    assert violations["violations"].sum() == len(broken) > 0
    assert set(violations["relay_drt_instance_id"].to_list()) == {0xA}
    assert set(violations["rule"].to_list()) == {v.rule for v in broken}


# -------------------------------------------------------------------------- the command line


def test_cli_on_the_cluster_by_its_address(
    client: Any, converted: tuple[Path, list[Any]], captures: dict[str, Path], tmp_path: Path
) -> None:
    address = client.scheduler.address
    out = tmp_path / "ds"
    code, stdout, err = cli_run(
        "fleet", "convert", str(captures["a"]), str(captures["rotated"]), "-o", str(out),
        "--scheduler", address,
    )  # fmt: skip
    assert code == 0, err
    assert f"dask: {address}" in err and "capture file(s) converted" in stdout
    for name in fleet.QUERIES:
        code, stdout, err = cli_run(
            "fleet", "query", name, str(out), "--json", "--scheduler", address
        )
        assert code == 0, err
        rows = json.loads(stdout)["rows"]
        want = fleet.run_local(name, out)
        assert len(rows) == want.height
        if rows:
            assert list(rows[0]) == want.columns
    code, stdout, _ = cli_run("fleet", "query", "churn", str(out), "--local")
    assert code == 0 and "deltas" in stdout


def test_a_damaged_capture_is_converted_and_exit_1(
    client: Any, captures: dict[str, Path], tmp_path: Path
) -> None:
    """As the flat export: every intact record goes into the dataset, and the command says the
    input was not whole (one line, exit 1, the first damage named); the whole capture beside
    it is converted as usual."""
    cut = tmp_path / "cut.kvrcap"
    cut.write_bytes(captures["a"].read_bytes()[:5000])
    out = tmp_path / "ds"
    code, _, err = cli_run(
        "fleet", "convert", str(cut), str(captures["b"]), "-o", str(out),
        "--scheduler", client.scheduler.address, "--quiet",
    )  # fmt: skip
    assert code == 1 and one_line(err), err
    assert "damaged input (1 damaged range(s))" in err and "Truncated" in err
    assert "(1 capture file(s)); the dataset holds every intact record" in err
    frames = open_dataset(out).frames.collect()
    assert frames.filter(pl.col("kind") == "SOURCE_ERROR").height == 1
    assert frames.height == 1 + frames_table(captures["b"]).collect().height


def test_an_unreachable_scheduler_is_one_line_and_exit_3(
    converted: tuple[Path, list[Any]], tmp_path: Path
) -> None:
    out, _ = converted
    with pytest.raises(ConnectionError, match=r"no Dask scheduler answers at tcp://127\.0\.0\.1:9"):
        fleet.client("tcp://127.0.0.1:9", timeout=1)
    for argv in (
        ["fleet", "query", "load", str(out)],
        ["fleet", "convert", str(out.parent / "none.kvrcap"), "-o", str(tmp_path / "x")],
    ):
        code, _, err = cli_run(
            *argv[:4], *argv[4:], "--scheduler", "tcp://127.0.0.1:9", "--connect-timeout", "1"
        )
        assert code == 3 and one_line(err), err
    code, _, err = cli_run(
        "fleet", "query", "load", str(out), "--scheduler", "tcp://h:1", "--workers", "2"
    )
    assert code == 2 and one_line(err)
    code, _, err = cli_run("fleet", "query", "load", str(tmp_path))
    assert code == 3 and one_line(err) and "not a cbi1kit dataset" in err
    # no address at all: a usage error at once (the half-made client took 20 s to close and
    # left a traceback on stderr)
    for bad in ("bogus", "http://127.0.0.1:1", "tcp://127.0.0.1:99999"):
        with pytest.raises(ValueError, match=r"address|port"):
            fleet.client(bad)
        code, _, err = cli_run("fleet", "query", "load", str(out), "--scheduler", bad)
        assert code == 2 and one_line(err) and "--scheduler" in err, err


def test_the_query_menu_names_exactly_the_queries() -> None:
    from cbi1kit.fleet._menu import QUERY_DOCS
    from cbi1kit.fleet._queries import QUERIES

    assert list(QUERIES) == list(QUERY_DOCS)
    assert all(q.doc == QUERY_DOCS[name] for name, q in QUERIES.items())


def test_a_damaged_table_file_is_named_on_one_line(
    client: Any, in_process: Path, tmp_path: Path
) -> None:
    """A table file that cannot be read is DatasetError Unreadable naming it, in this process
    and on the cluster, and on the command line one line and exit 3 (it was polars' traceback
    naming no file, and under Dask the workers' logs as well)."""
    import shutil

    from cbi1kit.errors import DatasetError
    from cbi1kit.fleet._queries import run_local, run_query

    copy = tmp_path / "fleet"
    shutil.copytree(in_process, copy)
    victim = sorted((copy / "frames").rglob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])  # cut short
    for run in (run_local, partial(run_query, client=client)):
        with pytest.raises(DatasetError) as info:
            run("churn", copy)
        assert info.value.variant == "Unreadable" and str(victim) in str(info.value)
    code, _, err = cli_run("fleet", "query", "churn", str(copy), "--local")
    assert code == 3 and one_line(err) and str(victim) in err, err


_SCRIPT = """\
import cbi1kit as ck

{start}
    with ck.fleet.client() as client:
        print(len(client.scheduler_info()["workers"]), "workers")
"""


def _run_script(folder: Path, start: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``python SCRIPT`` whose cluster starts under ``start`` (a guard, or none): the result
    and its wall time."""
    script = folder / "fleet_script.py"
    script.write_text(_SCRIPT.format(start=start))
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return out, time.monotonic() - t0


def test_a_script_without_the_main_guard_fails_at_once_on_one_line(tmp_path: Path) -> None:
    """The README's fleet snippet saved as a script without ``if __name__ == "__main__":``
    (#47): each spawned worker imports the script and starts a cluster of its own; it was some
    300 lines of Dask's "bootstrapping phase" tracebacks after 60 s, now ``MainGuard`` at once."""
    out, seconds = _run_script(tmp_path, "if True:  # no guard")
    assert out.returncode == 1 and seconds < 30, (seconds, out.stderr)
    last = out.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("cbi1kit.errors.FleetRuntimeError: ") and "fleet_script.py, line 4" in last
    )
    assert last.endswith('under if __name__ == "__main__":'), last
    assert "bootstrapping" not in out.stderr and len(out.stderr.splitlines()) < 20, out.stderr
    out, _ = _run_script(tmp_path, 'if __name__ == "__main__":')
    assert (out.returncode, out.stdout.strip()) == (0, "2 workers"), out.stderr


def test_a_cluster_started_while_a_spawned_process_imports_main_is_main_guard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the script's guard is not one the parent can see (``if __name__ != ""``), each
    worker process still refuses at once, before starting any process of its own."""
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(RuntimeError, match='under if __name__ == "__main__":') as info:
        fleet.client()
    assert isinstance(info.value, FleetError) and info.value.variant == "MainGuard"


@pytest.mark.parametrize(
    ("source", "guarded"),
    [
        ('if __name__ == "__main__":\n    go()\n', True),
        ('if "__main__" == __name__:\n    go()\n', True),
        ('try:\n    if __name__ == "__main__":\n        go()\nfinally:\n    pass\n', True),
        ("x = 1\ngo()\n", False),
        ("if __debug__:\n    go()\n", False),
    ],
)
def test_the_guard_is_any_if_on_name(source: str, guarded: bool, tmp_path: Path) -> None:
    from cbi1kit.fleet._cluster import _guarded

    script = tmp_path / "s.py"
    script.write_text(source)
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "go()" in text)
    assert _guarded(script, line) is guarded

"""Faults a user's machine brings (#42): processes killed at chosen points, exports run at once,
a capture cut while it is read, a Dask worker killed while it converts.

``export --dataset`` is killed (SIGKILL, in a child process) at every step that can make part
of a conversion visible: the dataset description linked into place, each table file opened,
each rename into place, the manifest's rename (the commit). After each kill the dataset shows
nothing of the killed capture and all of the one exported before; the rerun completes it
exactly as an export never killed, leaving no file a manifest does not list.

Bounded and seeded: small simulated captures, every child waited for with a timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cliutil import cli_run, one_line

import cbi1kit as ck
from cbi1kit.analysis._dataset import TABLES, dataset_lock
from cbi1kit.data import mooncake_trace, sample_capture

ROOT = Path(__file__).parents[1]
TRACE = mooncake_trace()

# The dataset module's file operations counted (appended to the file ``log`` when set), and the
# process killed (SIGKILL: no handler, no cleanup) at the event numbered ``kill_at`` (0: none);
# the code before it sets ``kill_at`` and ``log``.
COUNTED = """
import os, signal
from cbi1kit.analysis import _dataset

events = []

def counted(name, real):
    def call(*args, **kwargs):
        events.append(name)
        if log:
            with open(log, "a") as f:
                f.write(name + "\\n")
        if len(events) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call

class Os:
    def __getattr__(self, name):
        return getattr(os, name)

_dataset.os = Os()
_dataset.os.link = counted("link", os.link)
_dataset.os.replace = counted("replace", os.replace)
_dataset.parquet_writer = counted("open", _dataset.parquet_writer)
"""

# A child that runs ``cbi1kit`` counted, killed at the event numbered argv[1] (0: none, print
# them).
CHILD = (
    "import sys\nkill_at, log = int(sys.argv[1]), ''\n"
    + COUNTED
    + """
from cbi1kit import cli
from cbi1kit.data import mooncake_trace, sample_capture
code = cli.main(sys.argv[2:])
print(" ".join(events))
sys.exit(code)
"""
)


def child(kill_at: int, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(kill_at), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    d = tmp_path_factory.mktemp("faults")
    made = []
    for seed in (1, 2):
        path = d / f"c{seed}.kvrcap"
        argv = ["simulate", str(TRACE), "-o", str(path), "--dcs", "2", "--limit", "200"]
        code, _, err = cli_run(*argv, "--seed", str(seed), "--no-progress")
        assert code == 0, err
        made.append(path)
    return made


def export(capture: Path, out: Path) -> tuple[int, str]:
    code, _, err = cli_run("export", str(capture), "--dataset", "-o", str(out), "--no-progress")
    return code, err


def content(out: Path) -> dict[str, object]:
    """What a reader of the dataset sees: its sources and every table's rows, in order."""
    ds = ck.open_dataset(out)
    tables = {t: ds.tables[t].collect() for t in TABLES}
    key = ["source", "frame_index"]
    return {
        "sources": ds.sources().drop("path").to_dicts(),
        **{t: df.sort(key, maintain_order=True).to_dicts() for t, df in tables.items()},
    }


def strays(out: Path) -> list[str]:
    """Files in the tables or manifests that no manifest lists, and any left half-written."""
    listed = {
        f for m in (out / "sources").glob("*.json") for f in json.loads(m.read_text())["files"]
    }
    found = [
        p.relative_to(out).as_posix() for t in TABLES for p in (out / t).rglob("*") if p.is_file()
    ]
    parts = [p.name for p in out.rglob("*.part")]
    return sorted({*found} - listed) + parts


@pytest.fixture(scope="module")
def expected(captures: list[Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Both captures exported with no fault: what every rerun must end with."""
    out = tmp_path_factory.mktemp("clean") / "ds"
    for capture in captures:
        assert export(capture, out)[0] == 0
    return content(out)


def events_of(captures: list[Path], tmp: Path) -> list[str]:
    """The counted steps of exporting the second capture into a dataset holding the first."""
    out = tmp / "count"
    assert export(captures[0], out)[0] == 0
    run = child(0, "export", str(captures[1]), "--dataset", "-o", str(out), "--no-progress")
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()[-1].split()  # the events, after what the command printed


@pytest.mark.slow
def test_an_export_killed_at_any_step_publishes_nothing_half(
    captures: list[Path], expected: dict[str, object], tmp_path: Path
) -> None:
    events = events_of(captures, tmp_path)
    assert events.count("replace") >= 5 and events[-1] == "replace"  # renames, then the commit
    first = None
    for k in range(1, len(events) + 1):
        out = tmp_path / f"ds{k}"
        assert export(captures[0], out)[0] == 0
        if first is None:
            first = content(out)
        run = child(k, "export", str(captures[1]), "--dataset", "-o", str(out), "--no-progress")
        assert run.returncode == -9, (k, events[k - 1], run.stderr[-500:])
        assert content(out) == first, f"killed at {events[k - 1]} #{k}: the dataset changed"
        code, err = export(captures[1], out)
        assert code == 0, (k, err)
        assert content(out) == expected, f"killed at {events[k - 1]} #{k}: rerun differs"
        assert strays(out) == [], k


# A Dask worker preload (``distributed.worker.preload``) that counts the dataset module's file
# steps in the worker process and kills the worker (SIGKILL) at step CBI1KIT_TEST_KILL_AT, or
# appends each step to the file CBI1KIT_TEST_EVENTS.
WORKER_PRELOAD = (
    "import os\nkill_at = int(os.environ.get('CBI1KIT_TEST_KILL_AT', '0'))\n"
    "log = os.environ.get('CBI1KIT_TEST_EVENTS', '')\n" + COUNTED
)


def fleet_convert(capture: Path, out: Path, preload: Path, **env: str) -> tuple[int, str]:
    """``fleet convert`` on a local cluster of one worker, preloaded; the worker is not
    retried after it dies (Dask would otherwise run the task on three more workers)."""
    argv = ["fleet", "convert", str(capture), "-o", str(out), "--workers", "1", "--quiet"]
    run = subprocess.run(
        [sys.executable, "-m", "cbi1kit", *argv],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=ROOT,
        env={
            **os.environ,
            "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(preload)]),
            "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
            **env,
        },
    )
    return run.returncode, run.stderr


@pytest.mark.slow
def test_a_fleet_convert_whose_worker_dies_publishes_nothing_half(
    captures: list[Path], expected: dict[str, object], tmp_path: Path
) -> None:
    """The worker converting a capture file is killed at its first table file, at each rename
    into place and at the manifest's (the commit): ``fleet convert`` says so in one line (exit
    3), the dataset shows nothing of the file, and a rerun converts it exactly."""
    pytest.importorskip("distributed")
    preload = tmp_path / "preload_kill.py"
    preload.write_text(WORKER_PRELOAD)
    log = tmp_path / "events"
    out = tmp_path / "count"
    assert export(captures[0], out)[0] == 0
    code, err = fleet_convert(captures[1], out, preload, CBI1KIT_TEST_EVENTS=str(log))
    assert code == 0, err
    events = log.read_text().split()
    assert events[0] == "open" and events[-1] == "replace" and events.count("replace") >= 5
    points = [1] + [k for k, e in enumerate(events, 1) if e == "replace"]
    for k in points:
        out = tmp_path / f"ds{k}"
        assert export(captures[0], out)[0] == 0
        first = content(out)
        code, err = fleet_convert(captures[1], out, preload, CBI1KIT_TEST_KILL_AT=str(k))
        assert code == 3 and one_line(err) and "a Dask worker died" in err, (k, err)
        assert content(out) == first, f"killed at {events[k - 1]} #{k}: the dataset changed"
        code, err = fleet_convert(captures[1], out, preload)
        assert code == 0, (k, err)
        assert content(out) == expected, f"killed at {events[k - 1]} #{k}: rerun differs"
        assert strays(out) == [], k


def test_a_dataset_killed_while_being_made_is_made_by_the_next_export(
    captures: list[Path], expected: dict[str, object], tmp_path: Path
) -> None:
    """Killed at its description's link (the first step of a new dataset's export): the
    directory is no dataset yet, and the next export makes it (it was refused for good)."""
    out = tmp_path / "new"
    run = child(1, "export", str(captures[0]), "--dataset", "-o", str(out), "--no-progress")
    assert run.returncode == -9
    assert not (out / "cbi1kit-dataset.json").exists()
    for capture in captures:
        code, err = export(capture, out)
        assert code == 0, err
    assert content(out) == expected and strays(out) == []


def test_an_export_while_another_holds_the_dataset_says_so(
    captures: list[Path], expected: dict[str, object], tmp_path: Path
) -> None:
    out = tmp_path / "held"
    assert export(captures[0], out)[0] == 0
    before = content(out)
    with dataset_lock(out):
        code, err = export(captures[1], out)
    assert code == 2 and one_line(err) and "another export is writing" in err, err
    assert content(out) == before
    assert export(captures[1], out)[0] == 0 and content(out) == expected


def test_exports_at_once_each_succeed_or_say_so_and_a_rerun_completes(
    captures: list[Path], expected: dict[str, object], tmp_path: Path
) -> None:
    out = tmp_path / "race"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "cbi1kit", "export", str(c), "--dataset", "-o", str(out)],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        for c in captures
    ]
    ends = [(proc.communicate(timeout=120)[1], proc.returncode) for proc in procs]
    for (err, code), capture in zip(ends, captures, strict=True):
        assert code in (0, 2), err
        if code == 2:
            assert one_line(err) and "another export is writing" in err, err
            assert export(capture, out)[0] == 0
    assert content(out) == expected and strays(out) == []


def test_a_manifest_that_does_not_read_is_named(captures: list[Path], tmp_path: Path) -> None:
    """A manifest is renamed into place whole: one that does not read is damage, named, not a
    source quietly left out."""
    out = tmp_path / "bad"
    assert export(captures[0], out)[0] == 0
    (manifest,) = (out / "sources").glob("*.json")
    manifest.write_text('{"source": "cut sh')
    code, _, err = cli_run("fleet", "query", "churn", str(out), "--local")
    assert code == 3 and one_line(err) and manifest.name in err, err


# ----------------------------------------------------------------- a capture cut under a reader


def cut_under_the_reader(monkeypatch: pytest.MonkeyPatch, path: Path, at: int) -> None:
    """Read ``path`` 256 KiB at a time, and cut it to ``at`` bytes (a record boundary) right
    after the first window is read: as another process truncating the file mid-read."""
    from cbi1kit.capture import _scan

    window = _scan.FileScan._window
    cut = []

    def read_then_cut(self: Any, *args: Any, **kwargs: Any) -> Any:
        buf = window(self, *args, **kwargs)
        if not cut and self.source == str(path):
            cut.append(os.truncate(path, at))
        return buf

    monkeypatch.setattr(_scan, "_PART", 256 << 10)
    monkeypatch.setattr(_scan.FileScan, "_window", read_then_cut)


def boundary(path: Path, fraction: float) -> int:
    """The offset of the record ``fraction`` of the way through the capture."""
    from cbi1kit.capture._reader import CaptureReader

    with CaptureReader(path) as reader:
        offsets = [r.offset for r in reader.records()]
    return offsets[int(len(offsets) * fraction)]


SAMPLE = sample_capture()


def test_a_capture_cut_under_a_reader_is_damage_where_it_ended(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Cut at a record boundary past the first window while being read: replay, the frames
    table and ``cbi1kit replay`` report damage at the offset where the file now ends (it
    read as a shorter valid capture, exit 0, and before that as a SIGBUS)."""
    whole = ck.frames_table(SAMPLE).collect().height
    for name, read in (
        ("table", lambda p: ck.frames_table(p).collect()),
        ("replay", ck.replay),
        ("cli", lambda p: cli_run("replay", str(p), "--no-progress")),
    ):
        path = tmp_path / f"{name}.kvrcap"
        shutil.copyfile(SAMPLE, path)
        at = boundary(path, 0.6)
        with monkeypatch.context() as m:
            cut_under_the_reader(m, path, at)
            got = read(path)
        assert path.stat().st_size == at
        where = f"byte offset {at}"
        if name == "table":
            last = got.row(-1, named=True)
            assert last["kind"] == "SOURCE_ERROR" and where in last["validation_error"]
            assert "shrank" in last["validation_error"] and got.height < whole
        elif name == "replay":
            assert not got.ok and any(where in v.reason for v in got.violations)
        else:
            code, out, err = got
            assert code == 1 and where in out and "shrank" in out, (out, err)


# ---------------------------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs: a disk that fills. Mounting needs root (CI runs as root)."""
    where = tmp_path / "small"
    where.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)]
    try:
        done = subprocess.run(mount, capture_output=True, text=True, timeout=20, check=False)
    except OSError as exc:
        pytest.skip(f"no mount command here ({exc})")
    if done.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], timeout=20, check=False)


def left(where: Path) -> list[str]:
    return sorted(p.relative_to(where).as_posix() for p in where.rglob("*") if p.is_file())


def test_an_export_onto_a_full_disk_names_it_and_leaves_no_table(small_disk: Path) -> None:
    out = small_disk / "tables"
    code, _, err = cli_run("export", str(SAMPLE), "-o", str(out), "--no-progress")
    assert code == 3 and one_line(err), err
    assert f"cannot write {out}/" in err and "No space left on device" in err, err
    assert left(small_disk) == []  # no table of 0 rows for a reader to take as the answer


def test_a_dataset_export_onto_a_full_disk_leaves_its_source_out(small_disk: Path) -> None:
    out = small_disk / "ds"
    code, _, err = cli_run("export", str(SAMPLE), "--dataset", "-o", str(out), "--no-progress")
    assert code == 3 and one_line(err) and f"cannot write {out}: No space" in err, err
    assert left(out) == [".cbi1kit-dataset.lock", "cbi1kit-dataset.json"]
    assert ck.open_dataset(out).sources().is_empty()


def test_a_simulation_onto_a_full_disk_names_it_and_leaves_nothing(small_disk: Path) -> None:
    out = small_disk / "sim.kvrcap"
    code, _, err = cli_run("simulate", str(TRACE), "-o", str(out), "--no-progress")
    assert code == 3 and one_line(err) and f"cannot write {out}: No space" in err, err
    assert left(small_disk) == []


def test_a_recording_onto_a_full_disk_ends_in_one_line(
    small_disk: Path, serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """It printed a traceback from each of its threads; now one line and exit 3, and what it
    left reads as damaged where the disk filled, never as a whole capture."""
    from cbi1kit.cli import main as cli_main
    from cbi1kit.sim._feeds import ProducerFeed

    srv = serve(ProducerFeed(seed=3, steps=None, events_per_step=64))
    out = small_disk / "rec.kvrcap"
    code = cli_main(["record", srv.address, "-o", str(out), "--duration", "30", "--quiet"])
    err = capsys.readouterr().err
    assert code == 3 and one_line(err) and f"cannot write {out}: No space" in err, err
    report = ck.replay(out)
    assert not report.ok and report.violations[-1].rule == "SourceDamaged"


def test_a_report_onto_a_full_disk_names_it_and_leaves_nothing(small_disk: Path) -> None:
    out = small_disk / "report"
    code, _, err = cli_run("report", str(SAMPLE), "-o", str(out), "--no-notebooks", "--no-progress")
    assert code == 3 and one_line(err) and f"cannot write {out}: No space" in err, err
    assert left(small_disk) == []


# ------------------------------------------------------------------ found trying it as a user


def test_what_a_killed_export_left_is_swept_by_the_next(tmp_path: Path) -> None:
    """A flat export killed mid-write leaves hidden ``.NAME.PID.partial`` files; the next export
    of that folder removes those of processes that are gone, and no live run's."""
    out = tmp_path / "tables"
    out.mkdir()
    dead = [out / f".{t}.parquet.999999999.partial" for t in ("frames", "images", "snapshots")]
    live = out / f".frames.parquet.{os.getppid()}.partial"  # a running process, not this one
    for path in (*dead, live):
        path.write_bytes(b"PAR1")
    code, _, err = cli_run("export", str(SAMPLE), "-o", str(out), "--no-progress")
    assert code == 0, err
    assert not any(p.exists() for p in dead) and live.exists()


def test_record_into_a_directory_or_device_is_unwritable(tmp_path: Path) -> None:
    for out in (tmp_path, Path("/dev/null")):
        code, _, err = cli_run("record", "127.0.0.1:1", "-o", str(out), "--duration", "1")
        assert code == 3 and one_line(err) and "not a regular file" in err, err


def test_a_dataset_on_a_device_is_unwritable() -> None:
    code, _, err = cli_run("export", str(SAMPLE), "--dataset", "-o", "/dev/null", "--no-progress")
    assert code == 3 and one_line(err) and "device" in err, err


def test_an_input_that_claims_more_memory_than_there_is_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record claiming a 2 GiB body made numpy fail to allocate under a memory limit: a
    traceback. Any MemoryError reaching the command line is one line, exit 3."""
    from cbi1kit.cli import _replay

    def starved(args: object) -> int:
        raise MemoryError("Unable to allocate 2.00 GiB for an array")

    monkeypatch.setattr(_replay, "run", starved)
    code, _, err = cli_run("replay", str(SAMPLE))
    assert code == 3 and one_line(err), err
    assert "out of memory: Unable to allocate 2.00 GiB" in err


# ------------------------------------------------------------------------ a recorder killed


def test_a_recording_killed_mid_stream_is_kept_and_goes_on_with_append(
    tmp_path: Path, serve: Any
) -> None:
    """``record`` SIGKILLed while frames arrive: what it wrote replays (a torn last record is
    the one damage, at the end); ``record --append`` cuts that record off, says so, and goes
    on; the capture then replays valid with every frame kept before the kill."""
    import time

    from cbi1kit.sim._feeds import ProducerFeed

    srv = serve(ProducerFeed(seed=4, steps=None, events_per_step=8))
    out = tmp_path / "killed.kvrcap"
    argv = [sys.executable, "-m", "cbi1kit", "record", srv.address, "-o", str(out), "--quiet"]
    proc = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while (not out.exists() or out.stat().st_size < 64 << 10) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill()
        assert proc.wait(30) == -9
    finally:
        proc.kill()
    report = ck.replay(out)
    damage = [v for v in report.violations if v.rule == "SourceDamaged"]
    assert report.violations == damage and len(damage) <= 1  # at most a torn tail
    assert all("Truncated" in v.reason for v in damage)
    assert report.frames > len(damage)
    code, _, err = cli_run("record", srv.address, "-o", str(out), "--append", "--frames", "4")
    assert code == 0, err
    assert ("torn last record was cut off" in err) == bool(damage), err
    after = ck.replay(out)
    assert after.ok, after.violations[:3]
    # every frame before the kill is kept; only a torn one (if the cut fell in a frame) is not
    assert report.frames - len(damage) + 4 <= after.frames <= report.frames + 4

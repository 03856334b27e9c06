"""The compiled kernels' disk cache is an optimisation, never a failure (#13): a damaged entry
is a miss, a cache that cannot be written leaves the kernel compiled in memory, and a service
account whose package directory and home are read-only gets a private cache under the
temporary directory, with the same tables."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numba
import polars as pl
import pytest

from cbi1kit import _compile as _cache
from cbi1kit._compile import keyed_cache
from cbi1kit.data import sample_capture

ROOT = Path(__file__).parents[1]
SAMPLE = sample_capture()


def _probe(tmp_path: Path) -> ModuleType:
    """A module of one small function, in a folder of its own (its ``__pycache__`` is the
    in-tree cache numba picks)."""
    path = tmp_path / "cache_probe.py"
    path.write_text("def twice_plus(x):\n    return 2 * x + 1\n")
    spec = importlib.util.spec_from_file_location(f"cache_probe_{tmp_path.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kernel(module: ModuleType) -> Any:
    return keyed_cache(numba.njit(module.twice_plus))


def test_a_damaged_cache_entry_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(_cache, "_system_install", lambda _: True)  # the in-tree cache
    module = _probe(tmp_path)
    assert _kernel(module)(20) == 41
    cached = sorted((tmp_path / "__pycache__").glob("cache_probe.twice_plus-*"))
    assert {p.suffix for p in cached} == {".nbi", ".nbc"}  # the entry numba wrote
    for p in cached:
        p.write_bytes(b"\x80\x05 not a pickle")
    assert _kernel(module)(20) == 41  # compiled again instead of failing to unpickle


def test_a_cache_that_cannot_be_written_leaves_the_kernel_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(_cache, "_system_install", lambda _: True)
    module = _probe(tmp_path)
    kernel = _kernel(module)  # the in-tree cache directory is usable when the cache is made
    shutil.rmtree(tmp_path / "__pycache__", ignore_errors=True)
    (tmp_path / "__pycache__").write_text("a file where the cache directory was")
    assert kernel(3) == 7


def test_the_temp_dir_cache_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Made ``0700`` when missing; refused when someone else could write to it (its entries
    are unpickled)."""
    module = _probe(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = tmp_path / f"cbi1kit-kernels-{os.getuid()}"
    source = str(tmp_path / "cache_probe.py")
    assert _cache._TempDirLocator.from_function(module.twice_plus, source) is not None
    assert root.is_dir() and root.stat().st_mode & 0o777 == 0o700
    root.chmod(0o777)
    assert _cache._TempDirLocator.from_function(module.twice_plus, source) is None


def test_a_package_cache_this_user_cannot_write_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The package's ``__pycache__`` is read when it holds the module's kernels, this user
    cannot write it and no one but its owner can (its entries are unpickled); else the next
    place is tried."""
    monkeypatch.setattr(_cache, "_writable", lambda _: False)  # another user's, as for nobody
    module = _probe(tmp_path)
    source = str(tmp_path / "cache_probe.py")
    find = _cache._ReadOnlyInTreeLocator.from_function
    assert find(module.twice_plus, source) is None  # nothing cached there yet
    (tmp_path / "__pycache__").mkdir(exist_ok=True)
    version = f"py{sys.version_info[0]}{sys.version_info[1]}"
    (tmp_path / "__pycache__" / "cache_probe.twice_plus-1.py27.nbi").write_bytes(b"")
    assert find(module.twice_plus, source) is None  # another Python's kernels
    (tmp_path / "__pycache__" / f"cache_probe.twice_plus-1.{version}.nbi").write_bytes(b"")
    (tmp_path / "__pycache__").chmod(0o755)
    assert find(module.twice_plus, source) is not None
    (tmp_path / "__pycache__").chmod(0o775)  # the group could have put anything there
    assert find(module.twice_plus, source) is None
    (tmp_path / "__pycache__").chmod(0o755)
    if os.geteuid() == 0:  # someone else's folder (only root can make one): not loaded
        os.chown(tmp_path / "__pycache__", 65534, 65534)
        assert find(module.twice_plus, source) is None


NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
_AS_SERVICE = """
import sys
from cbi1kit import cli
from cbi1kit.analysis import frames_table
frames_table(sys.argv[1]).collect().write_parquet(sys.argv[2])
sys.exit(cli.main(["export", sys.argv[1], "-o", sys.argv[3], "--no-progress"]))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="drops to an unprivileged user: needs root and setpriv (CI runs as root)",
)
def test_a_read_only_package_and_home_still_make_every_table() -> None:
    """As ``nobody``, with the package's ``__pycache__`` and ``$HOME`` read-only and
    ``NUMBA_CACHE_DIR`` a path that cannot be made: the frames table and ``export`` work and
    give root's tables, with the kernels read from the package's own cache."""
    from cbi1kit.analysis import export_parquet, frames_table

    work = Path(tempfile.mkdtemp(prefix="cbi1kit-ro-"))  # pytest's tmp_path is root's only
    try:
        work.chmod(0o777)
        home = work / "home"
        home.mkdir(mode=0o555)
        (work / "a-file").write_text("the cache directory would have to be inside this")
        package = os.stat(ROOT / "cbi1kit" / "analysis")
        assert package.st_uid != 65534 and not package.st_mode & 0o002  # read-only to nobody
        res = subprocess.run(
            [
                *NOBODY,
                sys.executable,
                "-c",
                _AS_SERVICE,
                str(SAMPLE),
                str(work / "frames.parquet"),
                str(work / "tables"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(home),
                "TMPDIR": str(work),
                "NUMBA_CACHE_DIR": str(work / "a-file" / "numba"),
            },
        )
        assert res.returncode == 0, res.stderr
        assert pl.read_parquet(work / "frames.parquet").equals(frames_table(SAMPLE).collect())
        mine = export_parquet(SAMPLE, work / "root-tables")
        for name, path in mine.items():
            assert pl.read_parquet(work / "tables" / f"{name}.parquet").equals(
                pl.read_parquet(path)
            ), name
        # the kernels `make` compiled into the package's __pycache__ are loaded from there,
        # read-only: nothing compiled and cached anew for this user (a minute on a first run)
        assert not (work / "cbi1kit-kernels-65534").exists()
    finally:
        shutil.rmtree(work)


def test_a_kernel_is_named_by_its_place_in_the_package_and_stamped_by_the_code() -> None:
    """Every venv of a user shares one cache: an entry's folder is the module's place in the
    package (no install path in it) and its stamp the code's digest (no file time)."""
    located = _cache._keyed(_cache._UserCacheLocator)
    kernels = str(ROOT / "cbi1kit" / "analysis" / "_kernels.py")
    assert located.get_suitable_cache_subpath(kernels) == "cbi1kit-analysis"
    elsewhere = located.get_suitable_cache_subpath(str(ROOT / "tests" / "x.py"))
    assert elsewhere.startswith("tests_")  # not ours: numba's folder name and path hash
    from cbi1kit.analysis import _kernels

    locator = located(_kernels.walk_update.py_func, kernels)
    assert locator.get_source_stamp() == _cache.sources_digest()


_FIRST_RUN = """
from cbi1kit import _compile
_compile._system_install = lambda _: False  # as a user's venv: the user's cache directory
from cbi1kit.capture import read_capture
from cbi1kit.data import sample_capture
print(sum(1 for _ in read_capture(sample_capture())))  # the scanner's compiled walk
"""


def test_a_first_run_says_once_that_it_compiles_and_keeps_the_kernels(tmp_path: Path) -> None:
    """A fresh user cache: one line on stderr saying the kernels compile and where they are
    kept (platformdirs' cache directory); the next run loads them and says nothing."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    runs = [
        subprocess.run(
            [sys.executable, "-c", _FIRST_RUN],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=True,
        )
        for _ in range(2)
    ]
    kept = tmp_path / "cbi1kit" / "kernels"
    first = runs[0].stderr.splitlines()
    assert len(first) == 1 and first[0].startswith("cbi1kit: compiling its kernels"), first
    assert first[0].endswith(f"kept in {kept / 'cbi1kit-capture'}")
    assert any((kept / "cbi1kit-capture").glob("_walk_kernel.*.nbi"))
    assert runs[1].stderr == "" and runs[1].stdout == runs[0].stdout


_SMALL_REPLAY = """
from cbi1kit import _compile
_compile._system_install = lambda _: False  # as a user's venv: the user's cache directory
import cbi1kit as ck
print(repr(ck.open(ck.data.sample_capture()).replay()))
"""


def test_a_small_capture_replays_at_once_whatever_the_cache_holds(tmp_path: Path) -> None:
    """The default engine: the bundled sample (under ``SMALL_INPUT``) is read and replayed by the
    reference engines in a fresh cache, compiling nothing, the same report as the kernels'."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "CBI1KIT_SMALL_INPUT")
    }
    env["XDG_CACHE_HOME"] = str(tmp_path)
    run = subprocess.run(
        [sys.executable, "-c", _SMALL_REPLAY],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr  # no "compiling" notice
    assert not list(tmp_path.rglob("*.nbi"))  # and nothing compiled into the cache
    import cbi1kit as ck

    assert run.stdout.strip() == repr(ck.open(sample_capture()).replay(engine="compiled"))


def test_a_scan_takes_the_compiled_walk_once_a_read_is_not_small(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cbi1kit import _lazy
    from cbi1kit.capture._scan import FileScan
    from cbi1kit.capture._walk import walk_python

    monkeypatch.setattr(_lazy, "SMALL_INPUT", 1 << 20)
    monkeypatch.setattr(_lazy, "_LOADED", set())
    scan = FileScan(sample_capture())
    try:
        assert scan._walk_of(1000) is walk_python  # a followed capture read on a little
        assert scan._walk_of(2 << 20) is not walk_python  # a large read: the kernel from now on
        assert scan._walk_of(1000) is not walk_python
    finally:
        scan.close()

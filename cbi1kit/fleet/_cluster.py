"""The Dask client the fleet runs on: a local cluster of worker processes on loopback by default,
or an existing cluster given its scheduler's address."""

from __future__ import annotations

import ast
import contextlib
import logging
import multiprocessing
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from cbi1kit.errors import FleetError, FleetVariant

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from distributed import Client

DEFAULT_WORKERS: Final = 2
_PRE_SPAWN: Final = "distributed.nanny.pre-spawn-environ"
# The local cluster's own settings, where the user's Dask config keeps distributed's default.
# Each worker's profiler samples the task thread's stack every 10 ms by default; on 2 cores that
# is CPU the conversions need (bench_fleet: the speed-up's median ~0.1x lower). One sample per
# 100 ms still fills the dashboard's profile page for tasks of seconds.
_LOCAL_CONFIG: Final = {"distributed.worker.profile.interval": "100ms"}


def _check_address(scheduler: str) -> None:
    """A scheduler address Dask can dial, or ``FleetError`` ``Cluster`` (a ``ValueError``):
    given one it cannot parse, the half-made ``Client`` spent 20 s closing itself and left a
    traceback on the way out."""
    from distributed.comm import get_address_host_port

    try:
        _host, port = get_address_host_port(scheduler)
    except ValueError as exc:
        why = f"{scheduler!r} is not a Dask scheduler address (tcp://HOST:PORT): {exc}"
        raise FleetError(FleetVariant.Cluster, why, field="scheduler") from None
    if not 0 < port < 1 << 16:
        why = f"{scheduler!r}: port {port} is outside 1..=65535"
        raise FleetError(FleetVariant.Cluster, why, field="scheduler", actual=port)


def _script_line() -> tuple[Path, int] | None:
    """The main script and the line of its top level running now, where a process that spawn
    starts imports that script again; None where it does not (as ``multiprocessing.spawn``
    decides): no script (a notebook, ``python -c``), a package's ``__main__`` (``python -m
    cbi1kit``), IPython."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    name = getattr(getattr(main, "__spec__", None), "name", None) or ""
    if main is None or path is None or name.split(".")[-1] == "__main__":
        return None
    if Path(path).stem == "ipython":
        return None
    frame: FrameType | None = sys._getframe(1)
    line = None
    while frame is not None:
        code = frame.f_code  # the script's own top level (not a REPL's after ``python -i``)
        if frame.f_globals is vars(main) and (code.co_name, code.co_filename) == ("<module>", path):
            line = frame.f_lineno
        frame = frame.f_back
    return None if line is None else (Path(path), line)


def _guarded(script: Path, line: int) -> bool:
    """Whether ``line`` of ``script`` is inside an ``if`` on ``__name__`` (the ``__main__``
    guard, whichever way it is written); a script that cannot be read counts as guarded."""
    try:
        tree = ast.parse(script.read_bytes(), str(script))
    except (OSError, SyntaxError, ValueError):
        return True
    return any(
        isinstance(node, ast.If)
        and node.lineno <= line <= (node.end_lineno or line)
        and any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(node.test))
        for node in ast.walk(tree)
    )


def _check_main_guard(start_method: str) -> None:
    """``FleetError`` ``MainGuard`` (a ``RuntimeError``), at once and in one line, where a local
    cluster's worker processes would each start a cluster again: called while a spawned process
    imports the main script (what multiprocessing calls its bootstrapping phase), or from a
    script's top level outside ``if __name__ == "__main__":``. Without it, Dask retried the
    workers for a minute and printed some 300 lines of tracebacks."""
    guard = 'start it under if __name__ == "__main__":'
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        why = f"a worker process importing the main script started a local Dask cluster: {guard}"
        raise FleetError(FleetVariant.MainGuard, why, field="__main__")
    at = _script_line() if start_method != "fork" else None
    if at is not None and not _guarded(*at):
        why = (
            f"a local Dask cluster's worker processes import the main script and would each start "
            f"one again ({at[0].name}, line {at[1]}): {guard}"
        )
        raise FleetError(FleetVariant.MainGuard, why, field="__main__", actual=at[1])


def client(
    scheduler: str | None = None,
    *,
    workers: int = DEFAULT_WORKERS,
    timeout: float = 10.0,
    quiet: bool = True,
) -> Client:
    """A ``distributed.Client``. Without ``scheduler``: a ``LocalCluster`` of ``workers`` one-thread
    processes on 127.0.0.1 (dashboard on a free loopback port; profiler every 100 ms unless the Dask
    config changes it), closed with the client. With ``scheduler`` (``tcp://HOST:8786``): that
    cluster, whose workers need this cbi1kit (same version, Python, numba), read access to the
    captures and write access to the dataset; no answer in ``timeout`` seconds is a
    ``ConnectionError``, a bad address ``FleetError`` ``Cluster`` (a ``ValueError``). A local
    cluster started without the ``__main__`` guard is ``FleetError`` ``MainGuard`` (a
    ``RuntimeError``), before any process starts."""
    import dask
    from distributed import Client

    if workers < 1:
        raise FleetError(FleetVariant.Cluster, "workers must be >= 1", field="workers")
    if scheduler is not None:
        _check_address(scheduler)
        try:
            return Client(scheduler, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ConnectionError(
                f"no Dask scheduler answers at {scheduler} within {timeout:g} s ({exc})"
            ) from None
    _check_main_guard(dask.config.get("distributed.worker.multiprocessing-method", "spawn"))
    # Set before each worker starts (polars sizes its pool at import, glibc reads its tunables
    # at start). One thread per worker process, polars' pool included, as Dask already does for
    # OpenMP and BLAS; the task's own pipeline threads stay. And the worker's allocator as this
    # process's: Dask's MALLOC_TRIM_THRESHOLD_ also fixes glibc's mmap threshold, so every
    # batch-sized array was mapped and faulted in afresh (measured on bench_fleet's captures:
    # twice this process's page faults and system time for the same conversions). A
    # MALLOC_TRIM_THRESHOLD_ in the environment still reaches the workers.
    environ: dict[str, str | None] = dict(dask.config.get(_PRE_SPAWN, default={}) or {})
    environ.setdefault("POLARS_MAX_THREADS", "1")
    environ["MALLOC_TRIM_THRESHOLD_"] = None  # None: not set (distributed's own convention)
    defaults = dask.config.merge(*dask.config.defaults)
    local = {
        key: value
        for key, value in _LOCAL_CONFIG.items()
        if dask.config.get(key, None) == dask.config.get(key, None, config=defaults)
    }
    with dask.config.set({_PRE_SPAWN: environ, **local}):
        return Client(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            # quiet: not even a task's failure, which reaches the caller as its exception
            silence_logs=logging.CRITICAL if quiet else logging.WARNING,
            set_as_default=False,
        )


def given_or_local(given: Client | None) -> AbstractContextManager[Client]:
    """``given`` (left open), or a local cluster's client for the while (:func:`client`)."""
    return contextlib.nullcontext(given) if given is not None else client()


def dashboard_link(c: Any) -> str | None:
    """The client's dashboard address (None when the cluster runs none)."""
    link = getattr(c, "dashboard_link", None)
    return str(link) if link else None

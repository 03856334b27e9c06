"""JupyterLab on a scratch copy of the notebooks, for a headless browser: the browser test and
``make demo``'s screenshots start it here (``cbi1kit lab`` is the user's Lab, in the package)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from cbi1kit.viz._lab import kernel_environment, lab_command

__all__ = ["LabServer", "children", "proc_stat", "running_lab"]

#: User settings of a headless session: every cell laid out (Lab's default skips the layout of
#: cells out of view, so their charts have no size and a screenshot would miss them) and no blank
#: screen after the last one, and no question about fetching news (a toast over the page, and a
#: request off the machine).
_HEADLESS_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "windowingMode": "none",
        "scrollPastEnd": False,
    },
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


@dataclass(frozen=True)
class LabServer:
    """A running Lab: its base URL, token and the folder it serves."""

    url: str
    token: str
    root: Path

    def notebook_url(self, name: str) -> str:
        """Lab with ``name`` open in a fresh workspace (``reset``: no tabs restored)."""
        return f"{self.url}lab/tree/{name}?reset&token={self.token}"


def _copy_notebooks(notebooks: Path, into: Path) -> Path:
    """The notebooks (pairs and jupytext config) copied to ``into/notebooks``; they read the
    bundled ``ck.data``, so nothing else comes along."""
    target = into / "notebooks"
    target.mkdir(parents=True)
    for path in sorted(notebooks.iterdir()):
        if path.is_file() and path.suffix in (".py", ".ipynb", ".toml"):
            shutil.copy2(path, target / path.name)
    return target


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after its ``(comm)``: state, ppid, ... (None: no such
    process, or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc; elsewhere none are found)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        fields = proc_stat(int(entry.name))
        if fields is not None and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _wait_for_port(url: SplitResult, deadline: float) -> None:
    """Until the server accepts connections: its runtime file is written before it listens."""
    while True:
        try:
            socket.create_connection((url.hostname, url.port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab does not listen on {url.netloc}") from None
            time.sleep(0.1)


@contextmanager
def running_lab(
    notebooks: Path, scratch: Path, *, token: str, startup_timeout: float = 120.0
) -> Iterator[LabServer]:
    """Lab on a copy of ``notebooks`` in ``scratch``, on a free loopback port, with ``token``,
    isolated from the user's Jupyter config, settings and workspaces; stopped on exit.

    A copy, so a headless run never writes beside the tracked files."""
    root = _copy_notebooks(notebooks, scratch / "work")
    home = scratch / "jupyter"
    settings = home / "settings"
    for name, values in _HEADLESS_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values))
    env = kernel_environment()
    env |= {
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
    }
    argv = lab_command(root, port=0, token=token, ip="127.0.0.1", open_browser=False)
    argv.append("--LabApp.expose_app_in_browser=True")  # the driver reads kernel state from it
    log = (scratch / "lab.log").open("wb")
    process = subprocess.Popen(
        argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        info = home / "runtime" / f"jpserver-{process.pid}.json"
        deadline = time.monotonic() + startup_timeout
        while not info.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (scratch / "lab.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"JupyterLab did not start:\n{tail}")
            time.sleep(0.2)
        # the file is written in one go, but may be seen before its last byte
        while True:
            try:
                url = json.loads(info.read_text())["url"]
                break
            except (json.JSONDecodeError, KeyError):
                time.sleep(0.1)
        _wait_for_port(urlsplit(url), deadline)
        yield LabServer(url=url if url.endswith("/") else url + "/", token=token, root=root)
    finally:
        process.terminate()  # the server shuts its kernels down, one shutdown request each...
        for kernel in children(process.pid):  # ...which takes seconds; a scratch Lab's kernels
            with contextlib.suppress(OSError):  # hold nothing to save: each its own session
                os.killpg(kernel, signal.SIGKILL)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the server and its kernels
            process.wait()
        log.close()

"""JupyterLab on the notebooks: how ``cbi1kit lab``, the browser test and the demo start it, and
the form a notebook is stored in.

Each notebook is a jupytext pair (``notebooks/jupytext.toml``): the py:percent file is the source
of truth and the ``.ipynb`` beside it is tracked in its *stored form* — the cells the text holds,
no outputs, and the kernelspec, so Lab starts the kernel without asking. Lab runs with
``_contents.NotebookContentsManager``, which saves every paired notebook in that form, so neither
autosave nor Ctrl+S can leave outputs or a machine's metadata in a tracked file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CONTENTS_MANAGER",
    "KERNELSPEC",
    "LabServer",
    "kernel_environment",
    "lab_command",
    "paired_text_format",
    "running_lab",
    "stored_notebook",
]

#: The kernel every notebook names: this environment's ipykernel (``kernel_environment``).
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
CONTENTS_MANAGER = "cbi1kit.viz._contents.NotebookContentsManager"


def paired_text_format(config: Any, path: str) -> dict[str, str] | None:
    """The text format the notebook at ``path`` is paired with under the jupytext ``config``, or
    None when it is not paired with an ``.ipynb`` (no config, or none of its pairings)."""
    from jupytext.config import JupytextConfiguration
    from jupytext.formats import long_form_multiple_formats

    if not isinstance(config, JupytextConfiguration):
        return None
    paired = config.default_formats(path)
    formats = long_form_multiple_formats(paired) if paired else []
    if not any(f["extension"] == ".ipynb" for f in formats):
        return None
    return next((f for f in formats if f["extension"] != ".ipynb"), None)


def stored_notebook(nb: Any, config: Any, text_format: dict[str, str]) -> Any:
    """``nb`` (an nbformat notebook) as the repository keeps it: its cells as the paired text
    file (``text_format`` under the jupytext ``config``) holds them — outputs, execution counts
    and every cell metadata key the text drops are gone, cell ids kept — with jupytext's notebook
    metadata and ``KERNELSPEC``.

    Going through the text is what makes the ``.py`` the source of truth: a field that is not in
    the text is not kept in the ``.ipynb`` either.
    """
    import jupytext

    text = jupytext.writes(nb, text_format, config=config)
    stored = jupytext.reads(text, text_format, config=config)
    if len(stored.cells) == len(nb.cells):
        for kept, cell in zip(stored.cells, nb.cells, strict=True):
            if "id" in cell:
                kept["id"] = cell["id"]
    jupytext_metadata = dict(stored.metadata.get("jupytext", {}))
    jupytext_metadata.pop("text_representation", None)  # what jupytext drops from an .ipynb
    stored.metadata = {"jupytext": jupytext_metadata, "kernelspec": dict(KERNELSPEC)}
    stored.nbformat, stored.nbformat_minor = nb.nbformat, nb.nbformat_minor
    return stored


def kernel_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with this interpreter's folder first on
    PATH: the ``python3`` kernelspec runs ``python``, which must be this environment's, venv or
    conda alike."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def lab_command(
    root: Path,
    *,
    port: int | None = None,
    token: str | None = None,
    ip: str | None = None,
    open_browser: bool = True,
) -> list[str]:
    """The ``jupyter lab`` command line on ``root`` with the stored-form contents manager.

    ``port`` None is Jupyter's default (8888, or the next free one), 0 a port the OS picks;
    ``--allow-root`` when running as root (containers and CI do), since Lab refuses otherwise.
    """
    argv = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        f"--ServerApp.root_dir={root}",
        f"--ServerApp.contents_manager_class={CONTENTS_MANAGER}",
    ]
    if port is not None:
        argv.append(f"--ServerApp.port={port}")
    if ip is not None:
        argv.append(f"--ServerApp.ip={ip}")
    if token is not None:
        argv.append(f"--IdentityProvider.token={token}")
    if not open_browser:
        argv.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")
    return argv


# ------------------------------------------------------------ a server for a headless browser

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
    """The notebooks (pairs and jupytext config) copied to ``into/notebooks``, beside a link to
    the ``data`` folder next to ``notebooks``, which they read as ``../data``."""
    target = into / "notebooks"
    target.mkdir(parents=True)
    for path in sorted(notebooks.iterdir()):
        if path.is_file() and path.suffix in (".py", ".ipynb", ".toml"):
            shutil.copy2(path, target / path.name)
    data = notebooks.resolve().parent / "data"
    if data.is_dir():
        (into / "data").symlink_to(data, target_is_directory=True)
    return target


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after its ``(comm)``: state, ppid, ... (None: no such
    process, or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc; elsewhere none are found)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _proc_stat(int(entry.name))
        if fields is not None and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


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
        yield LabServer(url=url if url.endswith("/") else url + "/", token=token, root=root)
    finally:
        process.terminate()  # the server shuts its kernels down, one shutdown request each...
        for kernel in _children(process.pid):  # ...which takes seconds; a scratch Lab's kernels
            with contextlib.suppress(OSError):  # hold nothing to save: each its own session
                os.killpg(kernel, signal.SIGKILL)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the server and its kernels
            process.wait()
        log.close()

"""JupyterLab on the notebooks: how ``cbi1kit lab``, the browser test and the demo start it, and
the form a notebook is stored in.

Each notebook is a jupytext pair (``notebooks/jupytext.toml``): the py:percent file is the source
of truth and the ``.ipynb`` beside it is tracked in its *stored form* — the cells the text holds,
no outputs, and the kernelspec, so Lab starts the kernel without asking. Lab runs with
``_contents.NotebookContentsManager``, which saves every paired notebook in that form, so neither
autosave nor Ctrl+S can leave outputs or a machine's metadata in a tracked file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
    """``nb`` (an nbformat notebook) as the repository keeps it: its cells as the paired text file
    (``text_format`` under the jupytext ``config``) holds them (outputs, execution counts and cell
    metadata the text drops are gone, cell ids kept), with jupytext's notebook metadata and
    ``KERNELSPEC``: the ``.py`` is the source of truth."""
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

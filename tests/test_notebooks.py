"""Notebooks are jupytext py:percent sources paired with .ipynb files kept in their stored form.

nbmake executes the .ipynb files themselves (pytest collects ``notebooks/``); these tests keep
the pair honest: same cells, no outputs and the kernelspec in the repo, a papermill
``parameters`` cell; and JupyterLab's saves (``cbi1kit lab``'s contents manager) keep it so.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path
from typing import Any

import jupytext
import nbformat
import pytest
from jupytext.config import load_jupytext_config

from cbi1kit.viz._lab import KERNELSPEC, paired_text_format, stored_notebook

NOTEBOOKS = Path(__file__).parents[1] / "notebooks"
SOURCES = sorted(NOTEBOOKS.glob("*.py"))


def test_there_are_notebooks() -> None:
    assert SOURCES, "no notebooks/*.py sources"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_ipynb_is_paired_and_stripped(source: Path) -> None:
    paired = source.with_suffix(".ipynb")
    assert paired.exists(), f"{paired.name} missing: run jupytext --sync {source}"
    from_py = jupytext.read(source)
    stored = nbformat.read(paired, as_version=4)
    assert [(c.cell_type, c.source) for c in stored.cells] == [
        (c.cell_type, c.source) for c in from_py.cells
    ], f"{paired.name} is out of sync with {source.name}: run jupytext --sync"
    for cell in stored.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{paired.name} has outputs: strip them"
            assert cell.execution_count is None
    assert stored.metadata.get("kernelspec") == KERNELSPEC, f"{paired.name}: no kernelspec"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_ipynb_is_in_its_stored_form(source: Path) -> None:
    """What JupyterLab saves (``stored_notebook``) changes nothing in a tracked notebook."""
    paired = source.with_suffix(".ipynb")
    config = load_jupytext_config(str(paired))
    text_format = paired_text_format(config, paired.name)
    assert text_format is not None, f"{paired.name} is not paired by notebooks/jupytext.toml"
    on_disk = nbformat.read(paired, as_version=4)
    assert stored_notebook(on_disk, config, text_format) == on_disk


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_has_a_papermill_parameters_cell(source: Path) -> None:
    nb = jupytext.read(source)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1


# ------------------------------------------------------- JupyterLab's saves: the contents manager


def _manager(root: Path) -> Any:
    from cbi1kit.viz._contents import NotebookContentsManager

    return NotebookContentsManager(root_dir=str(root))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def copied(tmp_path: Path) -> Path:
    for path in NOTEBOOKS.iterdir():
        if path.suffix in (".py", ".ipynb", ".toml"):
            shutil.copy2(path, tmp_path / path.name)
    return tmp_path


def _as_run_in_lab(content: dict[str, Any]) -> dict[str, Any]:
    """``content`` as the browser holds it after Run All: outputs, counts, the kernel's
    language_info, and cell metadata Lab adds (a collapsed output, a scrolled one)."""
    nb = nbformat.from_dict(content)
    count = 0
    for cell in nb.cells:
        if cell.cell_type == "code":
            count += 1
            cell.execution_count = count
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"ran {count}\n")]
            cell.metadata["scrolled"] = True
            cell.metadata["jupyter"] = {"outputs_hidden": False}
    nb.metadata["language_info"] = {"name": "python", "version": "3.99.0"}
    return dict(nb)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_saving_from_lab_leaves_the_tracked_files_unchanged(source: Path, copied: Path) -> None:
    name = source.with_suffix(".ipynb").name
    before = _files(copied)
    manager = _manager(copied)
    run = _as_run_in_lab(asyncio.run(manager.get(name))["content"])
    assert any(c.get("outputs") for c in run["cells"])  # the save below has outputs to drop
    asyncio.run(manager.save({"type": "notebook", "content": run}, name))
    after = _files(copied)
    changed = [n for n in before if before[n] != after[n]]
    assert not changed, f"saving {name} from Lab rewrote {changed}"


def test_an_edit_saved_from_lab_reaches_the_py_and_the_ipynb(copied: Path) -> None:
    name = SOURCES[0].with_suffix(".ipynb").name
    manager = _manager(copied)
    content = _as_run_in_lab(asyncio.run(manager.get(name))["content"])
    content["cells"].append(nbformat.v4.new_code_cell("print('an edit made in Lab')"))
    asyncio.run(manager.save({"type": "notebook", "content": content}, name))
    assert "print('an edit made in Lab')" in (copied / SOURCES[0].name).read_text()
    stored = nbformat.read(copied / name, as_version=4)
    assert stored.cells[-1].source == "print('an edit made in Lab')"
    assert all(c.get("outputs", []) == [] for c in stored.cells)
    assert "language_info" not in stored.metadata


def test_opening_in_lab_adds_the_kernels_language_info(copied: Path) -> None:
    """Lab stores the kernel's language_info when the kernel starts; a notebook that already holds
    it is not marked modified the moment it opens."""
    from ipykernel.ipkernel import IPythonKernel

    model = asyncio.run(_manager(copied).get(SOURCES[0].with_suffix(".ipynb").name))
    assert model["content"]["metadata"]["language_info"] == IPythonKernel.language_info
    assert model["content"]["metadata"]["kernelspec"] == KERNELSPEC


def test_a_notebook_outside_the_pairing_is_saved_as_is(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    asyncio.run(_manager(tmp_path).save({"type": "notebook", "content": dict(nb)}, "own.ipynb"))
    assert nbformat.read(tmp_path / "own.ipynb", as_version=4).cells[0].outputs
    assert not (tmp_path / "own.py").exists()


def test_opening_in_lab_names_the_kernel_as_this_environment_does(
    copied: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment whose python3 kernelspec has another display name (an older ``make lab``
    renamed it) would have Lab rewrite the kernelspec on start: it is given that name up front,
    and a save still stores the canonical one."""
    import json

    kernels = tmp_path_factory.mktemp("jupyter") / "kernels" / KERNELSPEC["name"]
    kernels.mkdir(parents=True)
    spec = {"argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]}
    spec |= {"display_name": "cbi1kit (.venv)", "language": "python"}
    (kernels / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(kernels.parents[1]))
    name = SOURCES[0].with_suffix(".ipynb").name
    before = _files(copied)
    manager = _manager(copied)
    model = asyncio.run(manager.get(name))
    assert model["content"]["metadata"]["kernelspec"]["display_name"] == "cbi1kit (.venv)"
    asyncio.run(manager.save({"type": "notebook", "content": model["content"]}, name))
    assert _files(copied) == before


def _alive(pid: int) -> bool:
    from tools.lab import proc_stat

    fields = proc_stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")  # a zombie has exited


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_a_scratch_lab_stops_with_its_kernels(tmp_path: Path) -> None:
    """The browser test's and the demo's Lab: on leaving, its server and every kernel it
    started are gone (killed, not left running; nothing there to save)."""
    import json
    import os
    import time
    import urllib.request

    from tools.lab import children, running_lab

    with running_lab(NOTEBOOKS, tmp_path, token="t0ken") as server:
        request = urllib.request.Request(
            f"{server.url}api/kernels?token=t0ken", data=json.dumps({"name": "python3"}).encode()
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert answer.status == 201
        (lab,) = [  # this test's Lab, among whatever else this process started
            pid
            for pid in children(os.getpid())
            if str(tmp_path) in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
        ]
        deadline = time.monotonic() + 60
        # the live children: a helper the Lab starts and ends at once (seen under load) is none
        while (
            not (kernels := [k for k in children(lab) if _alive(k)]) and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert kernels
    assert not _alive(lab)
    assert [k for k in kernels if _alive(k)] == []


#: a cell's text a reader can take in: no dump of a result's every field, no bare object
_RAW = re.compile(r"object at 0x[0-9a-f]+|\b[A-Z]\w+\(\w+=(?:[^\n]{0,200}?, \w+=){4}")
TEXT_MOST = 4096


def _headless(source: Path, out: Path) -> nbformat.NotebookNode:
    """The README's headless run: jupytext executes the notebook in this environment's kernel,
    charts as SVG (no front end draws a widget)."""
    import os
    import subprocess
    import sys

    jupytext_cli = Path(sys.executable).parent / "jupytext"
    env = {**os.environ, "CBI1KIT_CHART_RENDERER": "svg"}
    argv = [str(jupytext_cli), "--to", "ipynb", "--set-kernel", "python3", "--execute"]
    subprocess.run([*argv, "-o", str(out), str(source)], env=env, check=True, timeout=900)
    return nbformat.read(out, as_version=4)


@pytest.mark.parametrize(
    "source",
    [s if s.stem.startswith("01") else pytest.param(s, marks=pytest.mark.slow) for s in SOURCES],
    ids=lambda p: p.stem,
)
def test_a_headless_run_reads_well(source: Path, tmp_path: Path) -> None:
    """Run as the README says without a browser, every cell's text output is at most 4 K
    characters (a table's box drawing is 3 bytes a character) and
    none prints a raw dataclass repr or a bare object (#46)."""
    nb = _headless(source, tmp_path / f"{source.stem}.ipynb")
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", (i, output.get("evalue"))
            data = output.get("data", {})
            text = "".join(data.get("text/plain") or output.get("text") or "")
            assert len(text) <= TEXT_MOST, (i, len(text), text[:200])  # characters
            assert not _RAW.search(text), (i, text[:300])


def test_the_headless_check_sees_a_raw_repr() -> None:
    assert _RAW.search("<altair.jupyter.jupyter_chart.JupyterChart object at 0x7f8d02164790>")
    assert _RAW.search("Inspection(length=84, kind=1, fields=(), problems=(), frame=None)")
    assert not _RAW.search("FilterFormat(seed=0x5eed, bucket_count=1024)")

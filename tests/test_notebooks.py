"""Notebooks are jupytext py:percent sources paired with output-free .ipynb files.

nbmake executes the .ipynb files themselves (pytest collects ``notebooks/``); these tests keep
the pair honest: same cells, no outputs in the repo, a papermill ``parameters`` cell.
"""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest

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


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_has_a_papermill_parameters_cell(source: Path) -> None:
    nb = jupytext.read(source)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1

"""Fixtures several test modules share."""

from __future__ import annotations

from pathlib import Path

import pytest

from cbi1kit.viz._report import CHART_KINDS, NOTEBOOKS, build_report

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="session")
def full_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of the bundled capture with its trace and every notebook, built once: the
    report tests read its files, the browser test opens them."""
    out = tmp_path_factory.mktemp("report")
    result = build_report(
        ROOT / "data" / "sample.kvrcap",
        out,
        trace=ROOT / "data" / "mooncake" / "conversation_trace.jsonl",
        notebooks_dir=ROOT / "notebooks",
    )
    assert set(result.pngs) == set(CHART_KINDS)
    assert set(result.notebooks) == set(NOTEBOOKS)
    return out

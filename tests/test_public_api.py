"""The front door: a curated few dozen names, what notebooks and the README type, loaded lazily."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cbi1kit

ROOT = Path(__file__).parents[1]
STAGES = ("hashing", "wire", "ckf", "capture", "relay", "analysis", "fleet", "sim", "viz")


def test_front_door_is_small() -> None:
    assert len(cbi1kit.__all__) <= 60
    assert len(set(cbi1kit.__all__)) == len(cbi1kit.__all__)


def test_every_exported_name_resolves() -> None:
    for name in cbi1kit.__all__:
        assert getattr(cbi1kit, name) is not None, name


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_exports_what_it_lists(stage: str) -> None:
    module = getattr(cbi1kit, stage)
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{stage}.{name}"


@pytest.mark.parametrize(
    ("stage", "module"),
    [
        ("relay", "_recorder"),
        ("sim", "_server"),
        ("viz", "_charts"),
        ("viz", "_display"),
        ("viz", "_report"),
    ],
)
def test_lazily_loaded_names_are_the_modules_whole_surface(stage: str, module: str) -> None:
    """A stage lists the names of its heavy modules so they load on first use; the list and the
    module's ``__all__`` must not drift apart."""
    package = getattr(cbi1kit, stage)
    listed = {name for name, home in package._LAZY.items() if home == module}
    assert listed == set(importlib.import_module(f"cbi1kit.{stage}.{module}").__all__)


def test_each_stage_lists_a_name_once() -> None:
    for stage in STAGES:
        names = getattr(cbi1kit, stage).__all__
        assert len(names) == len(set(names)), stage


def test_no_private_name_leaks_through_a_stage() -> None:
    for stage in STAGES:
        leaked = [n for n in getattr(cbi1kit, stage).__all__ if n.startswith("_")]
        assert not leaked, (stage, leaked)


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cbi1kit.nope  # noqa: B018


def _front_door_uses(text: str) -> set[str]:
    return set(re.findall(r"\bck\.([A-Za-z_]\w*)", text))


@pytest.mark.parametrize(
    "path",
    [*sorted((ROOT / "notebooks").glob("*.py")), ROOT / "README.md"],
    ids=lambda p: p.name,
)
def test_notebooks_and_readme_use_only_the_front_door(path: Path) -> None:
    text = path.read_text()
    assert "import cbi1kit as ck" in text
    assert "from cbi1kit." not in text and "cbi1kit._" not in text
    unknown = _front_door_uses(text) - set(cbi1kit.__all__) - {"__version__"}
    assert not unknown, unknown


def test_importing_cbi1kit_does_not_import_altair_or_grpc() -> None:
    code = "import sys, cbi1kit; print('altair' in sys.modules, 'grpc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]

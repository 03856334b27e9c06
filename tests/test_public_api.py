"""The package's front door: generated from the modules' ``__all__``, and importable lazily."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gen_init  # noqa: E402


def test_init_exports_every_public_module_name() -> None:
    import cbi1kit

    assert set(cbi1kit.__all__) == gen_init.expected_exports(), "run tools/gen_init.py"


def test_every_exported_name_resolves() -> None:
    import cbi1kit

    for name in cbi1kit.__all__:
        assert getattr(cbi1kit, name) is not None, name


def test_unknown_attribute_is_an_attribute_error() -> None:
    import pytest

    import cbi1kit

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cbi1kit.nope  # noqa: B018


def test_importing_cbi1kit_does_not_import_altair_or_grpc() -> None:
    code = "import sys, cbi1kit; print('altair' in sys.modules, 'grpc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]

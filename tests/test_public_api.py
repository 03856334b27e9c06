"""The front door: a curated few dozen names, what notebooks and the README type, loaded lazily."""

from __future__ import annotations

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


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_loads_none_of_its_modules_until_a_name_is_used(stage: str) -> None:
    code = (
        f"import sys, cbi1kit.{stage}; "
        f"print([m for m in sys.modules if m.startswith('cbi1kit.{stage}.')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_stage_surfaces_are_curated() -> None:
    """Each stage lists its names by hand (a few dozen at most, #31), and no two stages give
    one name to two different things (``ck.wire.encode_delta`` is not the relay's)."""
    surfaces = {stage: getattr(cbi1kit, stage).__all__ for stage in STAGES}
    assert sum(map(len, surfaces.values())) <= 200
    assert max(map(len, surfaces.values())) <= 30
    owners: dict[str, object] = {}
    for stage, names in surfaces.items():
        for name in names:
            value = getattr(getattr(cbi1kit, stage), name)
            assert owners.setdefault(name, value) is value, f"{stage}.{name} is two things"


def test_a_listed_name_must_be_an_import() -> None:
    from cbi1kit._lazy import _type_checking_imports

    assert _type_checking_imports("p", "if TYPE_CHECKING:\n    from p import a as b\n") == {
        "b": ("p.a", None)
    }
    with pytest.raises(TypeError, match="only `from X import a as b`"):
        _type_checking_imports("p", "if TYPE_CHECKING:\n    import os\n")


HEAVY = ("numpy", "polars", "pyarrow", "grpc", "altair", "google.protobuf", "numba")


@pytest.mark.parametrize(
    "argv",
    [["-c", "import cbi1kit"], ["-m", "cbi1kit", "--help"], ["-m", "cbi1kit", "inspect", "--help"]],
    ids=["import", "help", "subcommand help"],
)
def test_a_cold_start_imports_nothing_heavy(argv: list[str]) -> None:
    """``import cbi1kit`` and ``cbi1kit --help`` load no numpy, polars, pyarrow, grpc or altair:
    each is imported where it is used (issue #17: a cold start within 0.15 s)."""
    code = (
        "import runpy, sys\n"
        f"sys.argv = {['cbi1kit', *argv[2:]]!r}\n"
        + (
            "import cbi1kit\n"
            if argv[0] == "-c"
            else "try:\n    runpy.run_module('cbi1kit', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
        )
        + f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:]


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
    "path", [*sorted((ROOT / "notebooks").glob("*.py")), ROOT / "README.md"], ids=lambda p: p.name
)
def test_notebooks_and_readme_use_only_the_front_door(path: Path) -> None:
    text = path.read_text()
    assert "import cbi1kit as ck" in text
    assert "from cbi1kit." not in text and "cbi1kit._" not in text
    unknown = _front_door_uses(text) - set(cbi1kit.__all__) - {"__version__"}
    assert not unknown, unknown


def test_dir_lists_what_all_lists() -> None:
    assert {n for n in dir(cbi1kit) if not n.startswith("_")} == set(cbi1kit.__all__)
    assert "open" in cbi1kit.__all__ and cbi1kit.open is cbi1kit.analysis.open_capture


def test_importing_one_private_module_of_a_stage_imports_it_alone() -> None:
    """``from cbi1kit.analysis import _schema`` asks the stage for the name first: the lazy
    stage must not import every module looking for it."""
    code = (
        "import sys\nfrom cbi1kit.analysis import _schema\n"
        "print(sorted(m for m in sys.modules if m.startswith('cbi1kit.analysis.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['cbi1kit.analysis._schema']"


_DRIVING = re.compile(r"\b(playwright|running_lab|LabServer|OfflineBrowser|screenshot_notebooks)\b")


def test_the_package_holds_no_browser_or_lab_driving() -> None:
    """The demo's and the tests' Lab and Chromium driving lives in ``tools/``, not in what a
    user installs."""
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "cbi1kit").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _DRIVING.search(line)
    ]
    assert not found, found


def test_make_demo_screenshots_through_the_cli_demo() -> None:
    """``make demo`` is ``cbi1kit demo`` with a report that also screenshots the notebooks."""
    import tools.demo
    from cbi1kit import cli

    assert issubclass(tools.demo.ScreenshotReport, cli.DemoReport)
    assert "-m tools.demo" in (ROOT / "Makefile").read_text()


#: ``Any`` the front door still shows: JSON values (``dict[str, Any]``), and the keyword
#: options ``Capture.explain``/``diff`` pass on to ``ck.explain``/``ck.diff`` unchanged
_ANY_LEFT = {
    "Capture.explain": {"options"},
    "Capture.diff": {"options"},
    "CaptureWriter.open_stream": {"info"},
    "read_capture": {"return"},
    "read_frames": {"return"},
    "CanonicalModelRegistration.to_json": {"return"},
    "ModelTarget.to_json": {"return"},
    "compute_block_hash_for_seq": {"block_mm_infos"},
}


def test_front_door_signatures_say_what_they_take() -> None:
    """No new ``Any`` in what a notebook user calls: sources are ``Source``, formats
    ``FilterFormat``, diff sides ``LaneSource``, DCs ``DcName``."""
    import inspect

    found: dict[str, set[str]] = {}
    for name in cbi1kit.__all__:
        obj = getattr(cbi1kit, name)
        if inspect.ismodule(obj) or not callable(obj):
            continue  # stages and type aliases
        targets = [(name, obj)]
        if inspect.isclass(obj):
            targets = [
                (f"{name}.{k}", v)
                for k, v in vars(obj).items()
                if not k.startswith("_") and inspect.isfunction(v)
            ]
        for qual, fn in targets:
            sig = inspect.signature(fn)
            bad = {p for p, v in sig.parameters.items() if "Any" in str(v.annotation)}
            bad |= {"return"} if "Any" in str(sig.return_annotation) else set()
            if bad:
                found[qual] = bad
    assert found == _ANY_LEFT


def _callables(value: object) -> list[tuple[str, object]]:
    if not isinstance(value, type):
        return [("", value)] if callable(value) else []
    found: list[tuple[str, object]] = [("", value)]
    for attr, member in vars(value).items():
        if isinstance(member, classmethod | staticmethod):
            found.append((f".{attr}", member.__func__))
        elif callable(member) and not attr.startswith("_"):
            found.append((f".{attr}", member))
    return found


def test_seed_and_bucket_count_are_never_positional() -> None:
    """Two ints a caller could swap: every public callable that takes both takes them by
    keyword (#46), so ``FilterFormat`` and ``CkfAddressing`` cannot be called in two orders."""
    import inspect

    checked = []
    for stage in STAGES:
        module = getattr(cbi1kit, stage)
        for name in module.__all__:
            for suffix, fn in _callables(getattr(module, name)):
                try:
                    params = inspect.signature(fn).parameters  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    continue
                if {"seed", "bucket_count"} <= params.keys():
                    checked.append(f"{stage}.{name}{suffix}")
                    for p in ("seed", "bucket_count"):
                        kind = params[p].kind
                        assert kind is inspect.Parameter.KEYWORD_ONLY, f"{checked[-1]}({p})"
    assert {"wire.FilterFormat", "wire.FilterFormat.unchecked", "ckf.CkfAddressing"} <= set(checked)

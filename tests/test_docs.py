"""The documentation (``make docs``): it builds with warnings as errors, the reference documents
every name of the front door and of every stage, a docstring's broken reST fails the build, and
the pages' paths and names match the code (issue #29)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cbi1kit

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"

# docs/conf.py: the stages and their surfaces, read as the build reads them
_spec = importlib.util.spec_from_file_location("cbi1kit_docs_conf", DOCS / "conf.py")
assert _spec is not None and _spec.loader is not None
conf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conf)

SPHINX = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q"]


def _sphinx(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SPHINX, *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )


@pytest.fixture(scope="module")
def html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole site, built as ``make docs`` builds it (no network: nothing is fetched)."""
    out = tmp_path_factory.mktemp("docs")
    run = _sphinx("-b", "html", "-d", out / "doctrees", DOCS, out / "html")
    assert run.returncode == 0, run.stderr[-5000:]
    return out / "html"


def _inventory(html: Path) -> set[str]:
    from sphinx.util.inventory import InventoryFile

    with (html / "objects.inv").open("rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    return {
        name for kind, objects in inventory.items() if kind.startswith("py:") for name in objects
    }


def test_the_site_has_every_page(html: Path) -> None:
    pages = {p.relative_to(DOCS).with_suffix(".html") for p in DOCS.glob("*.md")}
    pages |= {p.relative_to(DOCS).with_suffix(".html") for p in (DOCS / "spec").glob("*.md")}
    pages |= {Path("notebooks", p.stem + ".html") for p in (ROOT / "notebooks").glob("*.ipynb")}
    pages |= {Path("reference", f"{m}.html") for m in ("cbi1kit", *conf.MODULES)}
    assert not {p for p in pages if not (html / p).is_file()}


def test_importing_the_conf_leaves_the_environment_alone() -> None:
    """A worker that imports conf.py also runs the browser tests' Lab: no renderer may leak."""
    code = (
        "import importlib.util, os, sys\nbefore = dict(os.environ)\n"
        "spec = importlib.util.spec_from_file_location('conf', sys.argv[1])\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "sys.exit(dict(os.environ) != before)\n"
    )
    argv = [sys.executable, "-c", code, str(DOCS / "conf.py")]
    env = {k: v for k, v in os.environ.items() if k != "CBI1KIT_CHART_RENDERER"}
    run = subprocess.run(argv, check=False, cwd=ROOT, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_notebooks_are_shown_as_they_run(html: Path) -> None:
    """Each notebook page holds its run: the charts as SVG images, the printed results."""
    charts = {}
    for page in sorted((html / "notebooks").glob("0*.html")):
        text = page.read_text()
        assert 'class="cell_output' in text, page.name
        charts[page.stem] = len(re.findall(r'<img [^>]*src="[^"]*\.svg"', text))
    assert charts["03_bucket_occupancy"] >= 4 and charts["04_delta_churn"] >= 3, charts
    assert sum(charts.values()) >= 15, charts


def test_every_stage_name_is_documented_in_its_stage(html: Path) -> None:
    documented = _inventory(html)
    missing = [
        f"cbi1kit.{stage}.{name}"
        for stage in conf.MODULES
        for name in getattr(cbi1kit, stage).__all__
        if f"cbi1kit.{stage}.{name}" not in documented
    ]
    assert not missing, missing
    assert {f"cbi1kit.{stage}" for stage in conf.MODULES} <= documented


def test_every_front_door_name_links_to_where_its_stage_documents_it(html: Path) -> None:
    """``ck.open`` is documented once, as ``cbi1kit.analysis.open_capture``, and the front door's
    page links there."""
    documented = _inventory(html)
    page = (html / "reference" / "cbi1kit.html").read_text()
    for name, (where, attr) in conf.surface("cbi1kit").items():
        module = inspect.ismodule(getattr(cbi1kit, name))
        target = where if module else f"{where}.{attr}"
        assert target in documented, (name, target)
        assert f'<span class="pre">{name}</span>' in page, name
        assert f'#{"module-" if module else ""}{target}"' in page, (name, target)


def test_the_reference_has_a_page_for_every_module_of_the_front_door() -> None:
    modules = {n for n in cbi1kit.__all__ if inspect.ismodule(getattr(cbi1kit, n))}
    assert modules == set(conf.MODULES)
    index = (DOCS / "reference" / "index.md").read_text()
    for module in ("cbi1kit", *conf.MODULES):
        page = DOCS / "reference" / f"{module}.rst"
        assert page.is_file(), page
        assert re.search(rf"^{module}$", index, re.M), f"reference/index.md lists no {module}"
        if module != "cbi1kit":
            assert f".. cbi1kit-surface:: cbi1kit.{module}" in page.read_text(), page


@pytest.mark.parametrize("broken", [False, True], ids=["as is", "broken reST"])
def test_a_docstring_with_broken_rest_fails_the_build(tmp_path: Path, broken: bool) -> None:
    """The real conf.py over one stage's page, with ``decode``'s docstring as it is and with an
    unclosed literal: only the second fails (nothing in conf.py hides a docstring's warning)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "index.rst").write_text("Wire\n====\n\n.. cbi1kit-surface:: cbi1kit.wire\n")
    spoil = "decode.__doc__ += '\\n\\nAn ``unclosed literal.\\n'\n" if broken else ""
    code = (
        "import sys\nfrom cbi1kit.wire._codec import decode\n"
        + spoil
        + "from sphinx.cmd.build import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    argv = [*SPHINX[3:], "-b", "html", "-c", str(DOCS)]
    argv += ["-d", str(tmp_path / "doctrees"), str(tmp_path / "src"), str(tmp_path / "html")]
    run = subprocess.run(
        [sys.executable, "-c", code, *argv],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    if broken:
        assert run.returncode != 0
        assert "Inline literal start-string without end-string" in run.stderr, run.stderr[-3000:]
    else:
        assert run.returncode == 0, run.stderr[-3000:]


# --- the pages' paths and names match the code -------------------------------------------------

PAGES = sorted(
    [
        *DOCS.glob("*.md"),
        *(DOCS / "spec").glob("*.md"),
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
    ]
)
_OURS = r"(?:cbi1kit|docs|tests|tools|benchmarks|notebooks)"


def _code_spans(path: Path) -> list[tuple[int, str]]:
    text = path.read_text()
    return [
        (text.count("\n", 0, m.start()) + 1, m.group(1)) for m in re.finditer(r"`([^`\n]+)`", text)
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page: Path) -> None:
    """A path in backticks (``cbi1kit/wire/_layout.py``, ``benchmarks/bench_*.py``) exists. The
    specs quote upstream's tree too (``docs/architecture.md`` is Dynamo's): there, only
    ``cbi1kit/`` paths are ours."""
    ours = "cbi1kit" if page.parent.name == "spec" else _OURS
    missing = [
        f"{page.name}:{line}: {found}"
        for line, span in _code_spans(page)
        for found in re.findall(rf"(?<![\w/.-]){ours}/[\w./*-]*[\w*]", span)
        if not (any(ROOT.glob(found)) if "*" in found else (ROOT / found).exists())
    ]
    assert not missing, missing


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    value: object = cbi1kit
    for n, part in enumerate(parts[1:], 2):
        try:
            value = getattr(value, part)
        except AttributeError:
            try:
                value = importlib.import_module(".".join(parts[:n]))
            except ImportError:
                return False
    return True


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_a_page_gives_resolves(page: Path) -> None:
    """A name in backticks, ``ck.X...`` or ``cbi1kit.STAGE.X...``, is there (a method call's
    result is not followed: ``ck.open(path).frames`` checks ``ck.open``). Other dotted words
    that start ``cbi1kit.`` are not Python (Parquet's metadata key ``cbi1kit.version``)."""
    stages = "|".join(conf.MODULES)
    pattern = rf"(?<![\w.])(?:ck|cbi1kit(?=\.(?:{stages})\b))((?:\.[A-Za-z_]\w*)+)"
    missing = [
        f"{page.name}:{line}: {m.group(0)}"
        for line, span in _code_spans(page)
        for m in re.finditer(pattern, span)
        if not _resolves("cbi1kit" + m.group(1))
    ]
    assert not missing, missing


def _own_doc(value: object) -> str:
    """A callable's own docstring (a dataclass's generated signature text is none)."""
    target = value.fget if isinstance(value, property) else value
    target = getattr(target, "__func__", target)
    text = vars(target).get("__doc__") if isinstance(target, type) else target.__doc__
    generated = isinstance(target, type) and (text or "").startswith(f"{target.__name__}(")
    return "" if generated else (text or "").strip()


def test_every_callable_the_reference_shows_says_what_it_does() -> None:
    """Every class and function of the surfaces (the nine stages, errors, data) and of the types
    they reach, and each public method and property those of cbi1kit define, has a docstring of
    its own (the one docstring check: tests/test_public_api.py leaves it here)."""
    the = conf.Surface()
    tops = [
        getattr(sys.modules[module], name) for module, names in the.names.items() for name in names
    ]
    tops += [conf._find(path) for paths in the.reached.values() for path in paths]
    found: dict[str, object] = {}
    for top in tops:
        if not (inspect.isfunction(top) or inspect.isclass(top)):
            continue
        found[f"{top.__module__}.{top.__qualname__}"] = top
        if inspect.isclass(top) and top.__module__.startswith("cbi1kit"):
            for attr, value in vars(top).items():
                if attr.startswith("_"):
                    continue
                if inspect.isfunction(value) or isinstance(value, property | classmethod):
                    found[f"{top.__module__}.{top.__qualname__}.{attr}"] = value
    missing = sorted(name for name, value in found.items() if not _own_doc(value))
    assert len(found) > 700
    assert not missing, missing

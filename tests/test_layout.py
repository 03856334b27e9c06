"""The tree shows the data flow: no module imports a stage that comes after its own.

Stages, bottom up: errors and the generated protobuf, then hashing -> wire -> ckf -> capture ->
relay -> analysis -> fleet -> sim -> viz, then the front door and the CLI. A module may import
its own stage or any stage below it (``TYPE_CHECKING`` imports included: they are the same arrow).
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "cbi1kit"
ROOT = PACKAGE.parent
ORDER = [
    "errors",
    "_proto",
    "data",
    "hashing",
    "wire",
    "ckf",
    "capture",
    "relay",
    "analysis",
    "fleet",
    "sim",
    "viz",
    "cli",
]
TOP = {
    "__init__": "cli",
    "__main__": "cli",
    "_extras": "cli",
    "_warm": "cli",
    "cli": "cli",
    "errors": "errors",
    "_lazy": "errors",
    "_text": "errors",
    "_compile": "errors",
    "_files": "errors",
    "_json": "errors",
    "_version": "errors",
}


def _stage(module: str) -> str:
    """``cbi1kit.wire._codec`` -> ``wire``; top-level modules by TOP."""
    parts = module.split(".")
    assert parts[0] == "cbi1kit"
    if len(parts) == 1:
        return "cli"
    head = parts[1]
    return TOP.get(head, head)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "cbi1kit":  # `from cbi1kit import errors, wire`
                found.extend((node.lineno, f"cbi1kit.{a.name}") for a in node.names)
            elif node.module.startswith("cbi1kit."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.startswith("cbi1kit"))
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "_pb2" not in p.name)


def test_every_stage_folder_is_listed() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders <= set(ORDER), folders - set(ORDER)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_against_the_stage_order(path: Path) -> None:
    rel = path.relative_to(PACKAGE).with_suffix("")
    own = _stage(".".join(["cbi1kit", *rel.parts]))
    wrong = [
        f"line {line}: {target} ({_stage(target)} comes after {own})"
        for line, target in _imports(path)
        if ORDER.index(_stage(target)) > ORDER.index(own)
    ]
    assert not wrong, wrong


def _module_name(path: Path, root: Path) -> str:
    parts = ["cbi1kit", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(target: str, names: dict[str, Path]) -> str:
    """The module an imported name lives in (``cbi1kit.wire.decode``: ``cbi1kit.wire``)."""
    while target not in names and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def _module_graph(paths: list[Path], root: Path = PACKAGE) -> dict[str, set[str]]:
    """Every module's imports of another module of the package, wherever they stand (in a
    function, under ``TYPE_CHECKING``): ``from cbi1kit.sim import _kernel`` is the module
    ``_kernel``, an import of a name the package's module ``cbi1kit.sim``."""
    names = {_module_name(p, root): p for p in paths}
    graph: dict[str, set[str]] = {m: set() for m in names}
    for module, path in names.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            found: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                base = node.module
                found = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names
                ]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            graph[module] |= {_resolve(t, names) for t in found} & set(names) - {module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []
    for root, edges0 in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(edges0)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_module_circle() -> None:
    """Inside each stage the modules read in a line: no module imports, even inside a function
    or for its types only, one that imports it back."""
    assert _circles(_module_graph(MODULES)) == []


def test_the_circle_finder_sees_a_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "cbi1kit"
    (pkg / "x").mkdir(parents=True)
    (pkg / "x" / "__init__.py").write_text("")
    (pkg / "x" / "_a.py").write_text("def f():\n    from cbi1kit.x._b import g\n")
    (pkg / "x" / "_b.py").write_text("from cbi1kit.x import _a\n")
    graph = _module_graph(sorted(pkg.rglob("*.py")), pkg)
    assert _circles(graph) == [["cbi1kit.x._a", "cbi1kit.x._b"]]


def test_the_checker_sees_a_wrong_way_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from cbi1kit.viz import churn_chart\n")
    assert ORDER.index(_stage(_imports(bad)[0][1])) > ORDER.index("wire")


def _contributing_rows() -> dict[str, set[str]]:
    """CONTRIBUTING's layout table: the first cell's folders or files, the modules the row
    names (backticked ``_name`` / ``name`` words of the first two cells)."""
    import re

    text = (PACKAGE.parent / "CONTRIBUTING.md").read_text()
    table = text.split("## Layout: the data flow", 1)[1].split("\n\n", 2)[2]
    rows: dict[str, set[str]] = {}
    for line in table.splitlines():
        if not line.startswith("| `") and not line.startswith("| top"):
            continue
        first, second = line.split("|")[1:3]
        folders = re.findall(r"`(\w+)/`", first)
        key = "errors" if "errors.py" in first else folders[0] if folders else "top"
        names = set(re.findall(r"`(_?\w+)(?:\.py|/)?`", first + " " + second))
        rows[key] = {n for n in names if n.startswith("_") or n == "errors"}
    return rows


def test_contributing_layout_table_equals_the_tree() -> None:
    rows = _contributing_rows()
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()} - {"_proto"}
    assert set(rows) - {"top", "errors"} == folders
    for folder in folders:
        modules = {p.stem for p in (PACKAGE / folder).glob("*.py")} - {"__init__"}
        assert rows[folder] - {"__init__"} == modules, folder
    top = {p.stem for p in PACKAGE.glob("*.py")} | {"_proto"}
    listed = rows["top"] | rows.get("errors", set())
    assert listed == top, listed ^ top


def test_no_tracked_file_names_a_path_of_the_machine_it_was_written_on() -> None:
    """Paths are the repository's own (``../shared/seed/``), never one machine's."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    found = [
        name
        for name in files
        if Path(name).suffix in {".py", ".md", ".toml", ".yml", ".txt", ""}
        and (ROOT / name).is_file()
        and re.search(r"(?<![\w.])/(work|root|home)/\w", (ROOT / name).read_text(errors="replace"))
    ]
    assert not found, found


def test_every_docs_page_named_exists() -> None:
    """A ``docs/….md`` the package, the tests or the docs name is there (upstream's own are
    named as upstream's)."""
    named = set()
    for path in [*PACKAGE.rglob("*.py"), *ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md")]:
        for m in re.finditer(r"(?<![\w/'])docs/[\w./-]+\.md", path.read_text()):
            before = path.read_text()[max(0, m.start() - 20) : m.start()]
            if "upstream" not in before:
                named.add(m.group(0))
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, missing


#: module docstrings say what and why in a few lines and point to ``docs/`` for the rest; a
#: function's or class's says what ``help()`` needs (the longest lists a field per fault)
DOCSTRING_LINES = 10
DEF_DOCSTRING_LINES = 15


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_docstring_is_short(path: Path) -> None:
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree, clean=False) or ""
    assert doc.count("\n") + 1 <= DOCSTRING_LINES, f"module: {doc.count(chr(10)) + 1} lines"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            lines = (ast.get_docstring(node, clean=False) or "").count("\n") + 1
            assert lines <= DEF_DOCSTRING_LINES, f"{node.name}: {lines} lines"


#: where a path in backticks names a file of this repository: its top folders, and the stage
#: folders inside ``cbi1kit/`` (``analysis/_capture``, ``viz/_lab.stored_notebook``)
_REPO_DIRS = ("cbi1kit", "docs", "tests", "benchmarks", "notebooks", "tools", ".ci")
_STAGE_DIRS = tuple(ORDER[2:-1])


def _names_a_thing(token: str) -> bool:
    """Whether a backticked path names something in the repository (module, attribute, file)."""
    head = token.split("/", 1)[0]
    if head in _REPO_DIRS:
        base = ROOT
    elif head in _STAGE_DIRS:
        base = PACKAGE
    else:
        return True  # not a path of ours: an output, an upstream file
    path = base / token.rstrip("/")
    if path.exists() or (base / f"{token}.py").exists():
        return True
    module, _, attr = token.rpartition(".")  # analysis/_replay_kernels.replay_rows
    source = base / f"{module}.py"
    pattern = rf"^(def|class) {re.escape(attr)}\b|^{re.escape(attr)}\b.*="
    return source.is_file() and re.search(pattern, source.read_text(), re.M) is not None


def _dotted_names_a_thing(token: str) -> bool:
    """``cbi1kit.<module>...``: the module and the attribute path after it exist."""
    import importlib

    parts = token.split(".")
    if len(parts) < 2 or not (
        (PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").exists()
    ):
        return True  # not a module of ours: a metadata key (``cbi1kit.schema_version``)
    for k in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_path_and_module_the_docs_name_exists() -> None:
    """A path (``analysis/_capture``, ``tests/errorcheck.py``) or a ``cbi1kit.`` name in
    backticks in the README, CONTRIBUTING or docs/ is in the tree: docs that drift fail here."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = []
    for page in pages:
        for m in re.finditer(r"`([\w./-]+)`", page.read_text()):
            token = m.group(1)
            ok = (
                _dotted_names_a_thing(token)
                if token.startswith("cbi1kit.")
                else ("/" not in token or _names_a_thing(token))
            )
            if not ok:
                missing.append(f"{page.name}: {token}")
    assert not missing, missing


def test_the_docs_check_sees_a_stale_name() -> None:
    assert not _names_a_thing("analysis/_nosuch")
    assert not _names_a_thing("viz/_lab.no_such_function")
    assert _names_a_thing("viz/_lab.stored_notebook")
    assert not _dotted_names_a_thing("cbi1kit.analysis._sources")
    assert _dotted_names_a_thing("cbi1kit.capture._scan.FileScan")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_is_at_most_800_lines(path: Path) -> None:
    """A module a newcomer can hold in their head (#43); the generated protobuf aside."""
    lines = len(path.read_text().splitlines())
    assert lines <= 800, f"{path.relative_to(PACKAGE)}: {lines} lines: split it by what it does"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_private_module_states_no_surface(path: Path) -> None:
    """A stage's surface is stated once, in its ``__init__``; ``errors`` is public (#43)."""
    if path.name == "__init__.py" or not path.name.startswith("_"):
        return
    tree = ast.parse(path.read_text())
    names = [t for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign) for t in ast.walk(n)]
    assert not any(isinstance(t, ast.Name) and t.id == "__all__" for t in names), (
        f"{path.relative_to(PACKAGE)}: list its names in the stage's __init__"
    )


def _spans(path: Path) -> Iterator[tuple[str, int, int]]:
    """Each function of ``path``: its name, first line (its first decorator's) and length."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            yield node.name, start, node.end_lineno - start + 1


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_function_is_at_most_60_lines(path: Path) -> None:
    """A function of a screenful (#43), decorators and docstring included: ruff holds the
    statements and branches (``PLR0915``, ``C901``), this the lines a reader scrolls."""
    long = [f"{name}: {n} lines from line {at}" for name, at, n in _spans(path) if n > 60]
    assert not long, long


#: the formats in the project's own words, which ``name.md §N`` cites
SPECS = ROOT / "docs" / "spec"
_SECTION_REF = re.compile(r"(?:`?([\w-]+\.md)`?\s+)?§\s*([0-9]+(?:\.[0-9]+)*|[A-Za-z]\w*)")


def _sections(page: Path) -> set[str]:
    return set(re.findall(r"^#{1,6}\s+([0-9]+(?:\.[0-9]+)*)[.\s]", page.read_text(), re.M))


def _unresolved_sections(page: Path, text: str) -> list[str]:
    """Each ``§`` of ``text`` that names no numbered section of a spec page: ``relay.md §2.1``,
    a bare ``§3`` inside a spec page (its own), or one listed after another (``§1.3, §3.1``)."""
    flat = re.sub(r"\s*\n\s*#?\s*", " ", text)  # a reference wrapped over lines, or comments
    bad, last, end = [], None, -1
    for m in _SECTION_REF.finditer(flat):
        name, section = m.groups()
        if (
            name is None
            and last is not None
            and re.fullmatch(r"[\s,;–-]*(and\s*)?", flat[end : m.start()])
        ):
            name = last
        target = SPECS / name if name else (page if page.parent == SPECS else None)
        if target is None or not target.is_file() or section not in _sections(target):
            bad.append(f"{page.relative_to(ROOT)}: {m.group(0)}")
        last, end = (target.name if target is not None else None), m.end()
    return bad


def test_every_section_reference_resolves() -> None:
    """A ``§`` in the code, the docs or the notebooks names a section of a page in
    ``docs/spec/`` that is there (#46): no reference to a spec the repository lacks."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")]
    pages += [
        *PACKAGE.rglob("*.py"),
        *(ROOT / "tests").glob("*.py"),
        *(ROOT / "notebooks").glob("*.py"),
    ]
    pages = [p for p in pages if "_proto" not in p.parts and p != Path(__file__).resolve()]
    bad = [b for p in pages for b in _unresolved_sections(p, p.read_text())]
    assert not bad, bad


def test_the_section_check_sees_a_dangling_reference() -> None:
    page = ROOT / "README.md"
    assert _unresolved_sections(page, "see relay.md §2.1 and §3.1, ckf.md §4.1–4.2") == []
    assert _unresolved_sections(page, "the spec §5.3") == ["README.md: §5.3"]
    assert _unresolved_sections(page, "relay.md §9.9") == ["README.md: relay.md §9.9"]


_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_docs_link_resolves() -> None:
    """A markdown link to a file, in the README, docs/ or a notebook, reaches it (#46)."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")]
    pages += sorted((ROOT / "notebooks").glob("*.py"))
    broken = [
        f"{page.relative_to(ROOT)}: {m.group(1)}"
        for page in pages
        for m in _LINK.finditer(page.read_text())
        if "://" not in m.group(1) and not (page.parent / m.group(1)).exists()
    ]
    assert not broken, broken


def test_every_notebook_opens_with_the_glossary() -> None:
    for source in sorted((ROOT / "notebooks").glob("*.py")):
        first = source.read_text().split("# %%", 2)[1]
        assert "](../docs/glossary.md)" in first, source.name

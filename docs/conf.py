"""Sphinx configuration of cbi1kit's documentation: ``make docs`` builds it into build/docs.

The pages are docs/*.md as they are (MyST), the notebooks as they run (each once, its charts as
static SVG), and a reference built from the docstrings and type hints. Each reference page is a stub
holding one directive; the directive reads the names from the package's own surface listing (a
stage's ``if TYPE_CHECKING:`` block, as ``cbi1kit._lazy`` reads it; ``__all__`` for the two
modules written out eagerly), so a name added to a stage is documented with no edit here. A type
the surface returns or takes without listing it (``ck.explain`` gives an ``Explanation`` whose
lanes are ``LaneExplanation``\\ s) is documented too, under the path it lives at, on its stage's
page. No network: no intersphinx, no remote asset; the notebooks run on the bundled data.
"""

from __future__ import annotations

import ast
import enum
import functools
import importlib
import inspect
import os
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles
from sphinx.util.typing import stringify_annotation

import cbi1kit
from cbi1kit._lazy import _type_checking_imports

project = "cbi1kit"
author = "cbi1kit developers"
copyright = "cbi1kit developers; Apache-2.0"
release = version = cbi1kit.__version__

extensions = ["myst_nb", "sphinx.ext.autodoc"]
root_doc = "index"
# docs/notebooks links to ../notebooks: its .ipynb are pages (the paired .py are not sources)
exclude_patterns = ["**/.ipynb_checkpoints"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# The notebooks are stored output-free (CONTRIBUTING.md): the build runs each once, its charts
# static SVG as in the report (``setup`` sets that for the build's kernels alone), and keeps the
# run in build/.jupyter_cache until it changes.
nb_execution_mode = "cache"
nb_execution_timeout = 600
nb_execution_raise_on_error = True  # a notebook that fails fails the build
nb_execution_show_tb = True
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3  # the pages link to each other's sections (``replay.md#...``)

html_theme = "pydata_sphinx_theme"
html_title = f"cbi1kit {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_show_sourcelink = False

# the reference: autodoc over the public surface, the type hints in the signatures
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_member_order = "bysource"
autodoc_class_signature = "mixed"
autodoc_inherit_docstrings = False  # a member that says nothing itself shows so
autodoc_preserve_defaults = True  # defaults as written (``DEFAULT_MAX_KICKS``)

# Every reference into cbi1kit must resolve. Types from outside it (the standard library and
# third-party packages) have no inventory offline, so they stay text; so do the generated
# protobuf messages (module ``kvrelay_v1_pb2``: upstream's ``dynamo.kvrelay.v1``, whose .proto
# and docs/spec/relay.md document them).
nitpicky = True
_EXTERNAL = (
    "numpy|polars|pyarrow|altair|grpc|google|dask|distributed|rich|ipywidgets|anywidget"
    "|prometheus_client|typing_extensions|numba|xxhash|blake3|kvrelay_v1_pb2"
    "|pathlib|collections|os|io|enum|types|datetime|argparse|threading|_thread|concurrent"
    "|asyncio|contextlib|dataclasses|socket|subprocess|struct|re|array|queue|logging|weakref"
    "|abc|numbers|functools|typing"
)
nitpick_ignore_regex = [(r"py:.*", rf"({_EXTERNAL})(\..+)?")]


def _reference_outdated(
    app: Sphinx, env: Any, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    """The reference's pages are read again on every build: their text is the package's, whose
    changes Sphinx does not see (an incremental ``make docs`` would keep stale docstrings)."""
    return sorted(d for d in env.found_docs if d.startswith("reference/") and d not in added)


# --- the surface, read from the package --------------------------------------------------------

#: the stages in data-flow order, then the two modules of the front door that are not stages
STAGES = ("hashing", "wire", "ckf", "capture", "relay", "analysis", "fleet", "sim", "viz")
MODULES = (*STAGES, "errors", "data")


def surface(module: str) -> dict[str, tuple[str, str]]:
    """Each public name of ``module`` (a stage, or the front door ``cbi1kit``): the module its
    value comes from and its name there, as the package lists it (``_lazy``'s reading of the
    ``if TYPE_CHECKING:`` block; ``__all__`` for a module written out eagerly)."""
    mod = importlib.import_module(module)
    assert mod.__file__ is not None
    listed = _type_checking_imports(module, Path(mod.__file__).read_text())
    if not listed:
        return {name: (module, name) for name in mod.__all__}
    return {
        name: (where, attr if attr is not None else where.rpartition(".")[2])
        for name, (where, attr) in listed.items()
    }


def kind(value: Any) -> str:
    """How a public name is documented: class, exception, function, alias (a type alias), data."""
    if inspect.isclass(value):
        return "exception" if issubclass(value, BaseException) else "class"
    if inspect.isroutine(value) or (callable(value) and hasattr(value, "__wrapped__")):
        return "function"
    if isinstance(value, types.UnionType) or typing.get_origin(value) is not None:
        return "alias"
    return "data"


@functools.cache
def _guarded_names(modname: str) -> None:
    """Run the ``if TYPE_CHECKING:`` imports of module ``modname`` into it, names it lacks only,
    so its string annotations evaluate (``polars`` as ``pl``, a sibling's type): autodoc then
    writes every type by its full name. A lazy ``__init__``'s block is its surface: skipped."""
    mod = sys.modules.get(modname)
    path = getattr(mod, "__file__", None)
    if mod is None or path is None or not path.endswith(".py") or path.endswith("__init__.py"):
        return
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            found: dict[str, Any] = {}
            for stmt in node.body:
                try:
                    exec(compile(ast.Module([stmt], []), path, "exec"), dict(vars(mod)), found)
                except Exception:  # what cannot import stays a string
                    continue
            for name, value in found.items():
                vars(mod).setdefault(name, value)


def _hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # a hint Python cannot evaluate stays text: nothing to link
        return {}


def _classes_in(hint: Any) -> Iterator[type]:
    if isinstance(hint, type):
        yield hint
    origin = typing.get_origin(hint)
    if isinstance(origin, type):
        yield origin
    for arg in typing.get_args(hint):
        yield from _classes_in(arg)


def _mentioned(obj: Any) -> Iterator[type]:
    """The classes ``obj``'s documentation names: a function's hints; a class's public fields,
    properties and methods (what ``:members: :undoc-members:`` shows)."""
    if not inspect.isclass(obj):
        if callable(obj):
            for hint in _hints(obj).values():
                yield from _classes_in(hint)
        return
    for name, hint in _hints(obj).items():
        if not name.startswith("_"):
            yield from _classes_in(hint)
    for name, member in vars(obj).items():
        if name.startswith("_") and name != "__init__":
            continue
        func = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if callable(func) and not inspect.isclass(func):
            for hint in _hints(func).values():
                yield from _classes_in(hint)


class Surface:
    """Every public name of every stage, where each is documented, and the types they reach."""

    def __init__(self) -> None:
        self.names: dict[str, dict[str, tuple[str, str]]] = {}
        self.index: dict[str, str] = {}  # defining path → documented path
        for stage in MODULES:
            module = f"cbi1kit.{stage}"
            self.names[module] = surface(module)
            for name in self.names[module]:
                value = getattr(sys.modules[module], name)
                home, qual = (
                    getattr(value, "__module__", None),
                    getattr(value, "__qualname__", None),
                )
                if isinstance(home, str) and isinstance(qual, str) and not inspect.ismodule(value):
                    self.index.setdefault(f"{home}.{qual}", f"{module}.{name}")
        for modname in [m for m in sys.modules if m.startswith("cbi1kit.")]:
            _guarded_names(modname)
        self.reached = self._reached()
        self.documented = self._documented()

    def _documented(self) -> set[str]:
        """Every path the reference documents: the stages, their names, the reached types, and
        the public members of each class among them."""
        paths: set[str] = set(self.names)
        classes: list[tuple[str, type]] = []
        for module, names in self.names.items():
            for name in names:
                paths.add(f"{module}.{name}")
                value = getattr(sys.modules[module], name)
                if inspect.isclass(value):
                    classes.append((f"{module}.{name}", value))
        for reached in self.reached.values():
            paths.update(reached)
            classes += [(path, _find(path)) for path in reached]
        for path, cls in classes:
            for klass in cls.__mro__:
                if klass.__module__.startswith("cbi1kit"):
                    paths.update(f"{path}.{m}" for m in vars(klass) if not m.startswith("_"))
                    hints = getattr(klass, "__annotations__", {})
                    paths.update(f"{path}.{m}" for m in hints if not m.startswith("_"))
        return paths

    def _reached(self) -> dict[str, list[str]]:
        """The classes of cbi1kit the public names take or return without a stage listing them
        (ones with a private name aside), by stage, each as its defining path: reached from the
        surface through hints, properties and methods, transitively."""
        todo = [getattr(sys.modules[m], n) for m, names in self.names.items() for n in names]
        seen: set[int] = set()
        found: dict[str, type] = {}
        while todo:
            obj = todo.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            for cls in _mentioned(obj):
                path = f"{cls.__module__}.{cls.__qualname__}"
                if not cls.__module__.startswith("cbi1kit.") or path in self.index:
                    continue
                if cls.__qualname__.startswith("_") or "._proto." in path:
                    continue
                if path not in found:
                    found[path] = cls
                    todo.append(cls)
        by_stage: dict[str, list[str]] = {}
        for path in sorted(found):
            by_stage.setdefault(".".join(path.split(".")[:2]), []).append(path)
        return by_stage


# --- the directives ----------------------------------------------------------------------------


class SurfaceDirective(SphinxDirective):
    """``.. cbi1kit-surface:: cbi1kit.wire``: the module's docstring, every name it lists
    (classes, errors, functions, type aliases, data, each group in the order listed), then the
    types those names reach that no stage lists."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        module = self.arguments[0]
        the: Surface = self.env.app.cbi1kit_surface  # type: ignore[attr-defined]
        if module not in the.names:
            raise self.error(f"{module} is not a stage (docs/conf.py MODULES)")
        mod = sys.modules[module]
        groups: dict[str, list[str]] = {
            "class": [],
            "exception": [],
            "function": [],
            "alias": [],
            "data": [],
        }
        for name, (where, attr) in the.names[module].items():
            value = getattr(mod, name)
            groups[kind(value)] += [*_block(kind(value), name, value, where, attr), ""]
        titles = {
            "class": "Classes",
            "exception": "Errors",
            "function": "Functions",
            "alias": "Type aliases",
            "data": "Data",
        }
        lines = [f".. automodule:: {module}", ""]
        for group, block in groups.items():
            if block:
                lines += [f".. rubric:: {titles[group]}", "", *block]
        reached = the.reached.get(module, [])
        if reached:
            lines += [
                ".. rubric:: Types these names take or return",
                "",
                "Not listed by the stage (import them from their module only to annotate):",
                "",
            ]
            for path in reached:
                cls = _find(path)
                directive = "autoexception" if issubclass(cls, BaseException) else "autoclass"
                lines += [f".. {directive}:: {path}", "   :members:", "   :undoc-members:", ""]
        return _parse(self, lines)


def _block(group: str, name: str, value: Any, where: str, attr: str) -> list[str]:
    if group in ("class", "exception"):
        block = [f".. auto{group}:: {name}", "   :members:", "   :undoc-members:"]
        return [*block, "   :show-inheritance:"] if group == "exception" else block
    if group == "function":
        return [f".. autofunction:: {name}"]
    doc = [f"   {line}" for line in _comment_doc(where, attr)]
    if group == "alias":
        shown = stringify_annotation(value, "fully-qualified-except-typing")
        return [f".. py:type:: {name}", f"   :canonical: {shown}", "", *doc]
    block = [f".. py:data:: {name}", f"   :type: {_type_name(value)}"]
    short = _short_value(value)
    return [*block, *([f"   :value: {short}"] if short else []), "", *doc]


def _find(path: str) -> type:
    module, _, qual = path.rpartition(".")
    while module not in sys.modules:
        module, _, head = module.rpartition(".")
        qual = f"{head}.{qual}"
    obj: Any = sys.modules[module]
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


def _comment_doc(where: str, attr: str) -> list[str]:
    """The ``#:`` comment above ``attr`` in module ``where``: autodoc reads those only in the
    module it documents, and a stage documents its names from its ``__init__``."""
    try:
        return list(ModuleAnalyzer.for_module(where).find_attr_docs().get(("", attr), []))
    except Exception:  # no source: no comment
        return []


def _type_name(value: Any) -> str:
    cls = type(value)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _short_value(value: Any) -> str | None:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, int | str | bytes | float):
        text = repr(value)
        return text if len(text) <= 60 else None
    return None


def _parse(directive: SphinxDirective, lines: list[str]) -> list[nodes.Node]:
    node = nodes.section()
    node.document = directive.state.document
    source = directive.get_source_info()[0]
    nested_parse_with_titles(directive.state, StringList(lines, source=source), node)
    return list(node.children)


class FrontDoorDirective(SphinxDirective):
    """``.. cbi1kit-front-door::``: every name ``import cbi1kit as ck`` gives, each linked to
    where its stage documents it (a name is documented once), with its docstring's first line."""

    def run(self) -> list[nodes.Node]:
        lines = [".. automodule:: cbi1kit", "", ".. list-table::", "   :header-rows: 1", ""]
        lines += ["   * - ``ck.`` name", "     - documented as", "     - what it is"]
        for name, (where, attr) in surface("cbi1kit").items():
            value = getattr(cbi1kit, name)
            link = f":py:mod:`{where}`" if inspect.ismodule(value) else f":py:obj:`{where}.{attr}`"
            summary = _summary(value)
            home = getattr(value, "__module__", None) or getattr(value, "__name__", "")
            if isinstance(home, str) and home.startswith("cbi1kit"):
                the: Surface = self.env.app.cbi1kit_surface  # type: ignore[attr-defined]
                summary = qualify_roles(summary, home, the.documented, the.index)
            lines += [f"   * - ``{name}``", f"     - {link}", f"     - {summary}"]
        return _parse(self, lines)


def _summary(value: Any) -> str:
    """A docstring's first sentence, for the front door's table (empty where there is none)."""
    doc = inspect.getdoc(value) if kind(value) not in ("data", "alias") else None
    if not doc:
        return ""
    first = doc.split("\n\n", 1)[0].replace("\n", " ")
    return re.split(r"(?<=\.)\s", first, maxsplit=1)[0]


# --- references: a defining module's path to the stage's ---------------------------------------


def _resolve_private(app: Sphinx, env: Any, node: Any, contnode: Any) -> Any:
    """A signature names a public object by its defining module (``cbi1kit.wire._frames.Delta``):
    send the reference where the stage documents it (``cbi1kit.wire.Delta``), members too
    (``...Delta.images``). A type variable (``V_co``) is shown as text: nothing to document."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    index = app.cbi1kit_surface.index  # type: ignore[attr-defined]
    public = index.get(target)
    if public is None:
        head, _, tail = target.rpartition(".")
        public = f"{index[head]}.{tail}" if head in index else None
    if public is None:
        private = target.rpartition(".")[2].startswith("_") and _in_signature(node)
        if target.startswith("cbi1kit.") and (private or _is_typevar(target)):
            return contnode
        return None
    return env.get_domain("py").resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], public, node, contnode
    )


def _in_signature(node: Any) -> bool:
    while node is not None and not isinstance(node, addnodes.desc_signature):
        node = node.parent
    return node is not None


def _is_typevar(path: str) -> bool:
    try:
        return isinstance(_find(path), typing.TypeVar)
    except (AttributeError, ImportError):
        return False


_ROLE = re.compile(r":(?:py:)?(class|func|meth|data|attr|obj|exc|mod|const):`(~?)([\w.]+)`")


def qualify_roles(text: str, home: str, documented: set[str], index: dict[str, str]) -> str:
    """Each ``:role:`Name``` of a docstring written in module ``home`` pointed at where the name
    it means there is documented: a docstring names things as its module sees them
    (``:class:`FrameDamage``` in ``capture/_readers.py``), the reference by stage
    (``cbi1kit.capture._items.FrameDamage``). A name not found stays as written (and warns)."""

    def qualify(match: re.Match[str]) -> str:
        role, tilde, target = match.groups()
        if target in documented or target.lstrip(".") in documented:
            return match.group(0)
        where = _documented_path(target.lstrip("."), home, documented, index)
        if where is None:
            return match.group(0)
        shown = target.rpartition(".")[2] if tilde else target
        return f":py:{role}:`{shown} <{where}>`"

    return _ROLE.sub(qualify, text)


def _documented_path(
    target: str, home: str, documented: set[str], index: dict[str, str]
) -> str | None:
    module = sys.modules.get(home)
    if module is None:
        return None
    head, *rest = target.split(".")
    if head in vars(module):
        value = vars(module)[head]
        if inspect.ismodule(value):
            path = value.__name__
        elif isinstance(getattr(value, "__qualname__", None), str):
            path = f"{value.__module__}.{value.__qualname__}"
        else:
            path = f"{home}.{head}"
        path = index.get(path, path)
        full = ".".join([path, *rest])
        return full if full in documented or path in documented else None
    if not target.startswith("cbi1kit."):  # a name of its stage the module does not import
        stage = ".".join(home.split(".")[:2])
        tops = {p for p in documented if p.startswith(f"{stage}.") and p.count(".") <= 3}
        found = {p for p in tops if p.endswith(f".{head}") and not _is_member(p, tops)}
        only = ".".join([found.pop(), *rest]) if len(found) == 1 else None
        return only if only in documented else None
    if target.startswith("cbi1kit."):  # a full path to a module's own object
        for n in range(target.count("."), 0, -1):
            owner, tail = target.rsplit(".", n)[0], target.split(".")[-n:]
            if owner in index:
                return ".".join([index[owner], *tail])
    return None


def _is_member(path: str, paths: set[str]) -> bool:
    return path.rpartition(".")[0] in paths


def _process_docstring(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    home = getattr(obj, "__module__", None) or (name if what == "module" else None)
    if isinstance(obj, property):
        home = getattr(obj.fget, "__module__", None)
    if not isinstance(home, str) or not home.startswith("cbi1kit"):
        return
    the: Surface = app.cbi1kit_surface  # type: ignore[attr-defined]
    lines[:] = [qualify_roles(line, home, the.documented, the.index) for line in lines]


def _process_signature(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, sig: str | None, ret: str | None
) -> tuple[str | None, str | None] | None:
    """A dataclass field's ``default_factory`` shows as ``<factory>``, which no parser reads:
    ``...``, as in a stub."""
    if sig and "<factory>" in sig:
        return sig.replace("<factory>", "..."), ret
    return None


def _before_signature(app: Sphinx, obj: Any, bound_method: bool) -> None:
    home = getattr(obj, "__module__", None)
    if isinstance(home, str) and home.startswith("cbi1kit"):
        _guarded_names(home)


class ExactSignatureTypes(SphinxPostTransform):
    """A type in a signature links to what it names, never to a namesake: Sphinx looks its name
    up "fuzzily" (``type`` found ``ShownCell.type``, ``Sequence`` a ``StrEnum`` member); the
    hints are evaluated to full names, so the exact search suffices, and a builtin is text."""

    default_priority = 5  # before the references resolve (10)

    def run(self, **kwargs: Any) -> None:
        for node in self.document.findall(addnodes.pending_xref):
            if node.get("refdomain") != "py" or "refspecific" not in node:
                continue
            if _in_signature(node) and not node["refspecific"]:
                del node["refspecific"]


def setup(app: Sphinx) -> dict[str, Any]:
    # set here, not on import: tests/test_docs.py imports this file beside a JupyterLab
    os.environ.setdefault("CBI1KIT_CHART_RENDERER", "svg")
    app.cbi1kit_surface = Surface()  # type: ignore[attr-defined]
    app.connect("env-get-outdated", _reference_outdated)
    app.add_directive("cbi1kit-surface", SurfaceDirective)
    app.add_directive("cbi1kit-front-door", FrontDoorDirective)
    app.connect("missing-reference", _resolve_private)
    app.add_post_transform(ExactSignatureTypes)
    app.connect("autodoc-before-process-signature", _before_signature)
    app.connect("autodoc-process-docstring", _process_docstring)
    app.connect("autodoc-process-signature", _process_signature)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""The packages' layer order (``LAYERS``, bottom first), checked on the source: every import points down or within
its layer and the import graph has no cycle, function-local imports included; allocation/ imports nothing heavier
than numpy; the library ``pc_pipelines`` imports no Dagster at all (checked on its source, and by importing every one
of its modules in a fresh interpreter): Dagster is the ``pc_pipelines_dagster`` package's (the code location, its
assets, automation and resources, the demo). The one Dagster-named module the library may import is
``dagster_pipes``: the dependency-free half of the Pipes protocol (it imports no ``dagster``) that the in-pod
entrypoint (pc_pipelines/cli/segment.py, inside functions) uses to report back to the orchestrator that launched it.

The checker reads the code with ``ast`` (nothing is imported). An edge is one module importing another of the
checked packages, wherever the import statement sits (module level, inside a function, under ``if TYPE_CHECKING``).
Type-only imports (under ``if TYPE_CHECKING:``) count like any other, for the layer order and for the cycle check
alike: they never run, but a module whose types name a module that imports it is as tangled as a runtime cycle (the
two can only be understood, and moved, together), and ``from __future__ import annotations`` would otherwise let any
cycle hide behind an ``if TYPE_CHECKING:``. A lower layer must not even name a higher one's types, and no module
imports back, even for a type hint, one that depends on it. Edges keep their ``type-only`` mark for the messages.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "pc_pipelines"
PACKAGES = ("pc_pipelines", "pc_pipelines_dagster")
"""The project's packages, each in the folder of its import name (tests/unit/test_packaging.py: what setuptools
installs)."""

# Bottom first. A module belongs to the layer of the longest entry that names it or a package above it ("x$": x
# only); it may import its own layer and those below. Within a layer, the cycle check keeps the order one way.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("errors and config", ("pc_pipelines$", "pc_pipelines.errors", "pc_pipelines.config", "pc_pipelines.presets",
                           "pc_pipelines.durable", "pc_pipelines.steps")),
    ("allocation (numpy only)", ("pc_pipelines.allocation",)),
    ("components", ("pc_pipelines.data", "pc_pipelines.rewards", "pc_pipelines.rollout", "pc_pipelines.training",
                    "pc_pipelines.store", "pc_pipelines.evaluation", "pc_pipelines.reports")),
    ("run", ("pc_pipelines.run", "pc_pipelines.simulator")),
    ("command line", ("pc_pipelines.cli",)),
    ("dagster", ("pc_pipelines_dagster",)),
)


# ---- the checker --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    type_only: bool

    def __str__(self) -> str:
        return f"{self.source} imports {self.target} (line {self.line}{', type-only' if self.type_only else ''})"


def find_modules(root: Path, packages: tuple[str | tuple[str, str], ...]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package ``__init__``) for every ``.py`` file of ``packages`` under ``root``.
    A package is its folder's name, or ``(import name, folder)`` where it is installed under another name."""
    mods = {}
    for package in packages:
        name, folder = package if isinstance(package, tuple) else (package, package)
        for path in sorted((root / folder).rglob("*.py")):
            parts = [*name.split("."), *path.relative_to(root / folder).with_suffix("").parts]
            is_pkg = parts[-1] == "__init__"
            mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return mods


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _known(name: str, mods: dict) -> str | None:
    """The longest prefix of ``name`` that is a module of the graph."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(mods: dict[str, tuple[Path, bool]]) -> list[Edge]:
    """Every import of one checked module by another, function-local and type-only ones included."""
    edges = []
    for name, (path, is_pkg) in mods.items():
        package = name if is_pkg else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        typing_only = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [_known(a.name, mods) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                # `from pkg import sub` imports the module pkg.sub; `from pkg import name` the package pkg
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in mods else _known(module, mods)
                           for a in node.names]
            else:
                continue
            for target in dict.fromkeys(t for t in targets if t and t != name):
                edges.append(Edge(name, target, node.lineno, id(node) in typing_only))
    return edges


def layer_of(module: str, layers=LAYERS) -> int | None:
    best, rank = "", None
    for i, (_, entries) in enumerate(layers):
        for entry in entries:
            p = entry.rstrip("$")
            if (module == p or (module.startswith(p + ".") and not entry.endswith("$"))) and len(p) > len(best):
                best, rank = p, i
    return rank


def layer_problems(mods: dict, edges: list[Edge], layers=LAYERS) -> list[str]:
    """Modules in no layer, and imports that point up."""
    problems = [f"{m} is in no layer: add it to LAYERS" for m in mods if layer_of(m, layers) is None]
    for e in edges:
        src, dst = layer_of(e.source, layers), layer_of(e.target, layers)
        if src is not None and dst is not None and dst > src:
            problems.append(f"{e}: {layers[src][0]} may not import {layers[dst][0]}, a layer above it")
    return problems


def cycles(mods: dict, edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components with more than one module of the import graph, type-only imports
    included (Tarjan)."""
    graph: dict[str, list[str]] = {m: [] for m in mods}
    for e in edges:
        graph[e.source].append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for m in graph:
        if m not in index:
            visit(m)
    return found


def cycle_problems(mods: dict, edges: list[Edge]) -> list[str]:
    """One message per import cycle: its modules and every import between them (type-only ones marked)."""
    problems = []
    for comp in cycles(mods, edges):
        inside = set(comp)
        links = "; ".join(str(e) for e in edges if e.source in inside and e.target in inside)
        problems.append(f"import cycle between {', '.join(comp)}: {links}")
    return problems


# ---- the checker on a planted package ----------------------------------------------------------------------------
FAKE_LAYERS = (("low", ("pkg$", "pkg.low")), ("high", ("pkg.high",)))


def fake_package(tmp_path: Path, low_source: str) -> dict:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text(low_source)
    (pkg / "high.py").write_text("from .low import base\n\n\ndef top():\n    return base() + 1\n")
    return find_modules(tmp_path, ("pkg",))


def test_a_clean_package_passes(tmp_path):
    mods = fake_package(tmp_path, "def base():\n    return 1\n")
    edges = import_edges(mods)
    assert [str(e) for e in edges] == ["pkg.high imports pkg.low (line 1)"]
    assert layer_problems(mods, edges, FAKE_LAYERS) == []
    assert cycles(mods, edges) == []
    assert cycle_problems(mods, edges) == []


def test_a_planted_function_local_upward_import_is_a_cycle_and_a_layer_violation(tmp_path):
    mods = fake_package(tmp_path, "def base():\n    from pkg.high import top  # hidden in a function\n\n    return 1\n")
    edges = import_edges(mods)
    assert layer_problems(mods, edges, FAKE_LAYERS) == [
        "pkg.low imports pkg.high (line 2): low may not import high, a layer above it"
    ]
    assert cycles(mods, edges) == [["pkg.high", "pkg.low"]]
    assert cycle_problems(mods, edges) == [
        "import cycle between pkg.high, pkg.low: pkg.high imports pkg.low (line 1); pkg.low imports pkg.high (line 2)"
    ]


def test_a_type_only_upward_import_breaks_the_layers_and_is_a_cycle(tmp_path):
    mods = fake_package(tmp_path, "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from . import high\n\n\n"
                                  "def base():\n    return 1\n")
    edges = import_edges(mods)
    assert layer_problems(mods, edges, FAKE_LAYERS) == [
        "pkg.low imports pkg.high (line 4, type-only): low may not import high, a layer above it"
    ]
    assert cycles(mods, edges) == [["pkg.high", "pkg.low"]]
    assert cycle_problems(mods, edges) == [
        "import cycle between pkg.high, pkg.low: pkg.high imports pkg.low (line 1); "
        "pkg.low imports pkg.high (line 4, type-only)"
    ]


def test_a_type_only_cycle_within_one_layer_fails_the_cycle_check(tmp_path):
    """The shape allocator.py <-> methods.py had: both in one layer, one side importing back only for type hints.
    The layer order allows it; the cycle check does not."""
    mods = fake_package(tmp_path, "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .high import top\n\n\n"
                                  "def base():\n    return 1\n")
    edges = import_edges(mods)
    one_layer = (("all", ("pkg",)),)
    assert layer_problems(mods, edges, one_layer) == []
    assert cycle_problems(mods, edges) == [
        "import cycle between pkg.high, pkg.low: pkg.high imports pkg.low (line 1); "
        "pkg.low imports pkg.high (line 4, type-only)"
    ]


def test_a_module_in_no_layer_is_reported(tmp_path):
    mods = fake_package(tmp_path, "def base():\n    return 1\n")
    (tmp_path / "pkg" / "stray.py").write_text("")
    mods = find_modules(tmp_path, ("pkg",))
    assert layer_problems(mods, import_edges(mods), (("low", ("pkg.low",)), ("high", ("pkg.high",)))) == [
        "pkg is in no layer: add it to LAYERS", "pkg.stray is in no layer: add it to LAYERS"
    ]


# ---- the checker on this project ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def project():
    mods = find_modules(ROOT, PACKAGES)
    return mods, import_edges(mods)


def test_every_import_points_down(project):
    mods, edges = project
    assert layer_problems(mods, edges) == []


def test_the_import_graph_has_no_cycle(project):
    """Type-only imports included."""
    assert cycle_problems(*project) == []


# ---- allocation: numpy only --------------------------------------------------------------------------------------
def test_allocation_imports_only_numpy_at_runtime():
    code = (
        "import sys, pc_pipelines.allocation as a; "
        "heavy = sorted(m for m in ('torch','dagster','verl','pandas','transformers','duckdb','pyarrow','pydantic',"
        "'yaml') if m in sys.modules); print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"allocation pulled in heavy modules: {out}"


@pytest.mark.parametrize(
    "module",
    ["pc_pipelines_dagster.resources", "pc_pipelines_dagster.definitions", "pc_pipelines_dagster.demo",
     "pc_pipelines.run", "pc_pipelines.cli", "pc_pipelines.rollout"],
)
def test_loading_the_code_location_does_not_import_torch(module):
    """torch (seconds to import) comes with the local backend, the warm start and the engines, when they run."""
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out.splitlines()[-1] == "False"


def test_allocation_sources_import_only_stdlib_and_numpy():
    # collections: collections.abc, where Callable, Sequence etc. live since typing's aliases were deprecated
    # string: reasons.py parses its templates with string.Formatter
    allowed = {"numpy", "__future__", "abc", "collections", "dataclasses", "enum", "math", "typing", "json", "operator", "string"}
    for path in (PKG / "allocation").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module.split(".")[0]]
            else:
                continue
            assert set(names) <= allowed, f"{path.name} imports {names}"


# ---- research/, reliability/, benchmarks/: they import the package, never the reverse ------------------------------
SCRIPT_FOLDERS = ("research", "reliability", "benchmarks")


def absolute_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in ``path``, function-local ones and ``importlib.import_module("...")``
    with a literal name included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            out.append((node.lineno, node.module or ""))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.append((node.lineno, node.args[0].value))
    return out


def test_nothing_in_the_package_imports_research(tmp_path):
    """research/ (the studies and their library, study.py) imports pc_pipelines; nothing in pc_pipelines/ or
    pc_pipelines_dagster/ imports it, nor reliability/ or benchmarks/ (the package reads the study's committed headline as its
    own data file, pc_pipelines/reports/bench_study_results.json)."""
    planted = tmp_path / "m.py"
    planted.write_text("import json\n\n\ndef f():\n    from research import study\n\n    return study\n")
    assert absolute_imports(planted) == [(1, "json"), (5, "research")]
    assert (ROOT / "research" / "study.py").is_file() and not (PKG / "study.py").exists()
    hits = [f"{path.relative_to(ROOT)}:{line} imports {name}"
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
            for line, name in absolute_imports(path) if name.split(".")[0] in SCRIPT_FOLDERS]
    assert hits == []


def test_no_code_imports_the_dagster_folders_by_their_bare_names():
    """The Dagster package's folders are ``pc_pipelines_dagster.assets`` / ``.automation`` / ``.resources``: a bare
    ``import assets`` finds nothing, in an install or a checkout (no such top-level folder)."""
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    hits = [f"{path}:{line} imports {name}" for path in files.split() for line, name in absolute_imports(ROOT / path)
            if name.split(".")[0] in ("assets", "automation", "resources")]
    assert len(files.split()) > 100 and hits == []
    assert not any((ROOT / name).exists() for name in ("assets", "automation", "resources"))


# ---- Dagster: pc_pipelines_dagster only; the library imports none of it ------------------------------------------
def is_dagster(module: str) -> bool:
    """Dagster or one of its libraries (``dagster_k8s``, ...), or this project's Dagster package; not ``dagster_pipes``
    (see the module docstring)."""
    top = module.split(".")[0]
    return top in ("dagster", "pc_pipelines_dagster") or (top.startswith("dagster_") and top != "dagster_pipes")


def dagster_imports(package: Path, root: Path = ROOT) -> list[str]:
    """Every import of Dagster (``is_dagster``) in the ``.py`` files below ``package``, function-local ones and
    ``import_module("...")`` included, as ``path:line imports module``."""
    return [f"{path.relative_to(root)}:{line} imports {name}" for path in sorted(package.rglob("*.py"))
            for line, name in absolute_imports(path) if is_dagster(name)]


def dagster_modules_loaded(package: str, path: Path) -> list[str]:
    """The Dagster modules (``is_dagster``) in ``sys.modules`` of a fresh interpreter, run in ``path``, after it
    imported ``package`` and every module below it (``pkgutil.walk_packages``; an import error fails the test)."""
    code = ("import importlib, pkgutil, sys\n"
            f"import {package} as p\n"
            f"for m in pkgutil.walk_packages(p.__path__, '{package}.'):\n"
            "    importlib.import_module(m.name)\n"
            "print(len([n for n in sys.modules if n == p.__name__ or n.startswith(p.__name__ + '.')]))\n"
            "print(' '.join(sorted(n for n in sys.modules if n.split('.')[0] in ('dagster', 'pc_pipelines_dagster')"
            " or (n.startswith('dagster_') and not n.startswith('dagster_pipes')))))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=path, capture_output=True, text=True, timeout=600,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    count, loaded = out.stdout.splitlines()[-2:]
    assert int(count) > 1, f"{package}: only the package itself was imported"
    return loaded.split()


def test_the_checker_finds_a_planted_dagster_import(tmp_path):
    pkg = tmp_path / "planted"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import dagster_pipes  # the light protocol half: allowed\n")
    (pkg / "a.py").write_text("def f():\n    from dagster import Definitions\n\n    return Definitions\n")
    (pkg / "b.py").write_text("import importlib\n\nk8s = importlib.import_module('dagster_k8s')\n")
    (pkg / "c.py").write_text("from pc_pipelines_dagster.definitions import defs\n")
    assert dagster_imports(pkg, tmp_path) == ["planted/a.py:2 imports dagster", "planted/b.py:3 imports dagster_k8s",
                                              "planted/c.py:1 imports pc_pipelines_dagster.definitions"]


def test_the_library_imports_no_dagster():
    """No module under pc_pipelines/ imports Dagster, its libraries or pc_pipelines_dagster, anywhere in its code."""
    assert dagster_imports(PKG) == []
    assert dagster_imports(ROOT / "pc_pipelines_dagster")  # the checker sees the Dagster package's imports


def test_importing_the_planted_package_loads_dagster(tmp_path):
    """The import probe on a planted package: the module importing Dagster inside a function loads nothing, the one
    importing it at module level (found only by walking the package) loads ``dagster``; ``dagster_pipes`` alone
    loads no ``dagster``."""
    pkg = tmp_path / "planted"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("import dagster_pipes\n")
    (pkg / "lazy.py").write_text("def f():\n    import dagster\n")
    (pkg / "sub" / "__init__.py").write_text("")
    assert dagster_modules_loaded("planted", tmp_path) == []
    (pkg / "sub" / "eager.py").write_text("import dagster\n")
    loaded = dagster_modules_loaded("planted", tmp_path)
    assert "dagster" in loaded and not any(n.startswith("dagster_pipes") for n in loaded)


def test_importing_every_library_module_loads_no_dagster(tmp_path):
    """``import pc_pipelines`` and every module below it (the CLI, the engines, the training backends: all of them
    import without a GPU or its libraries) leave no Dagster module loaded. Run outside the checkout, so the package
    is the installed one (the editable install points at this checkout)."""
    assert dagster_modules_loaded("pc_pipelines", tmp_path) == []


def test_definitions_assemble_the_jobs_and_the_sensor():
    from pc_pipelines_dagster.definitions import defs

    assert defs.resolve_job_def("start_run").name == "start_run"
    assert defs.resolve_job_def("train_segment").name == "train_segment"
    assert defs.resolve_job_def("report").name == "report"
    assert [t.job_name for t in defs.resolve_sensor_def("advance_runs").targets] == ["train_segment", "report"]
    assert defs.resolve_schedule_def("advance_runs_in_window").job_name == "train_segment"


def test_every_layer_entry_names_a_module_that_exists():
    """A stale entry (a module moved away) would silently stop guarding anything."""
    mods = find_modules(ROOT, PACKAGES)
    stale = [e for _, entries in LAYERS for e in entries if e.rstrip("$") not in mods]
    assert stale == []

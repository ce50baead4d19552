"""DESIGN.md section 2: allocation/ imports nothing heavier than numpy; only definitions.py imports Dagster."""

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "pc_pipelines"


def test_allocation_imports_only_numpy_at_runtime():
    code = (
        "import sys, pc_pipelines.allocation as a; "
        "heavy = sorted(m for m in ('torch','dagster','verl','pandas','transformers','duckdb','pyarrow','pydantic') "
        "if m in sys.modules); print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"allocation pulled in heavy modules: {out}"


def test_allocation_sources_import_only_stdlib_and_numpy():
    # collections: collections.abc, where Callable, Sequence etc. live since typing's aliases were deprecated
    # string: reasons.py parses its templates with string.Formatter
    allowed = {"numpy", "__future__", "abc", "collections", "dataclasses", "enum", "math", "typing", "json", "string"}
    for path in (PKG / "allocation").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module.split(".")[0]]
            else:
                continue
            assert set(names) <= allowed, f"{path.name} imports {names}"


def test_only_definitions_imports_dagster():
    """``dagster_pipes`` is allowed: it is the dependency-free half of the Pipes protocol that launched processes
    (the in-pod entrypoint, pc_pipelines/entrypoint.py) use to report back; it does not import Dagster."""
    for path in PKG.rglob("*.py"):
        if path.name == "definitions.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top not in ("assets", "resources"), (path, name)
                assert not (top == "dagster" or top.startswith("dagster_")) or top == "dagster_pipes", (path, name)


def test_definitions_load():
    from pc_pipelines.definitions import defs

    assert defs is not None

"""The test tree mirrors the package's: a test of a package's code lives in its tier under the folder named like the
package, so its tests are found where its code is.

The rule, for the tiers ``tests/unit``, ``tests/integration`` and ``tests/e2e``:

- every folder names a package folder, by its path below its package's folder (``pc_pipelines/`` or
  ``pc_pipelines_dagster/``): ``tests/unit/store/`` for ``pc_pipelines/store/``, ``tests/unit/training/verl_conf/``
  for ``pc_pipelines/training/verl_conf/``, and ``tests/<tier>/assets/``, ``automation/``, ``resources/`` for
  ``pc_pipelines_dagster/assets/`` and the rest. A package folder is one holding an ``__init__.py``;
- or it is one of the tier-only folders of ``TIER_ONLY``: ``tests/integration/dagster/`` (the code location as
  Dagster runs it: jobs, assets, sensors, schedules and resources together) and ``tests/integration/faults/`` (the
  fault suite that ``reliability/faults.py`` counts);
- a test file at a tier's top level whose name starts with a package folder's (``test_config_inputs.py``) belongs
  in that folder. What stays at the top: the tests of a top-level module (``durable.py``: ``test_durable*.py``;
  ``evaluation.py``) and project-wide checks (layering, packaging, standalone, scale pins, ...). ``tests/e2e``
  drives the CLI and the UI as a user does: its files stay flat.

``tests/research`` tests ``research/`` (flat scripts), ``tests/support`` holds the shared helper modules (on
pytest's pythonpath); neither is checked here. A fixture is in the ``conftest.py`` of the folder whose tests
share it (``tests/conftest.py``: several tiers').
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pc_pipelines", "pc_pipelines_dagster")
TIERS = ("unit", "integration", "e2e")
FLAT_TIERS = ("e2e",)
TIER_ONLY = {
    ("integration", "dagster"): "the code location as Dagster runs it (jobs, assets, sensors, schedules, resources)",
    ("integration", "faults"): "the fault suite, counted by reliability/faults.py",
}


def package_folders(root: Path) -> set[tuple[str, ...]]:
    """Every package folder's path below its package's folder: ``("store",)`` for ``pc_pipelines/store/``,
    ``("assets",)`` for ``pc_pipelines_dagster/assets/``."""
    found = set()
    for package in PACKAGES:
        for init in (root / package).rglob("__init__.py"):
            parts = init.parent.relative_to(root / package).parts
            if parts:
                found.add(parts)
    return found


def misplaced(root: Path) -> list[str]:
    """One line per folder or file of the test tiers under ``root`` that breaks the rule, saying where it goes."""
    packages = package_folders(root)
    tops = sorted({p[0] for p in packages})
    problems = []
    for tier in TIERS:
        base = root / "tests" / tier
        if not base.is_dir():
            continue
        for folder in sorted(p for p in base.rglob("*") if p.is_dir() and p.name != "__pycache__"):
            rel = folder.relative_to(base).parts
            if (tier, rel[0]) in TIER_ONLY or (tier not in FLAT_TIERS and rel in packages):
                continue
            where = "/".join(rel)
            if tier in FLAT_TIERS:
                fix = f"tests/{tier} is flat: put its files in tests/{tier}/"
            else:
                fix = (f"put its tests in the folder of the package they test, tests/{tier}/<folder>/ for "
                       f"pc_pipelines/<folder>/ or pc_pipelines_dagster/<folder>/ (one of {', '.join(tops)}), or at "
                       f"tests/{tier}/ for a top-level module; a folder of the tier's own: add it to TIER_ONLY in tests/unit/test_test_tree.py "
                       "with what it holds")
            problems.append(f"tests/{tier}/{where}/: no package folder pc_pipelines/{where}/ or "
                            f"pc_pipelines_dagster/{where}/. Fix: {fix}")
        if tier in FLAT_TIERS:
            continue
        for f in sorted(base.glob("test_*.py")):
            stem = f.stem.removeprefix("test_")
            named = [t for t in tops if stem == t or stem.startswith(t + "_")]
            if named:
                problems.append(f"tests/{tier}/{f.name} tests {named[0]}/. Fix: git mv it to "
                                f"tests/{tier}/{named[0]}/{f.name}")
    return problems


def test_every_test_folder_names_a_package_folder():
    problems = misplaced(ROOT)
    assert not problems, "\n".join(problems)


def plant(root: Path, *paths: str) -> None:
    for p in paths:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_text("")


def test_a_misplaced_folder_or_file_is_named_with_where_it_goes(tmp_path):
    plant(tmp_path, "pc_pipelines/__init__.py", "pc_pipelines/store/__init__.py", "pc_pipelines/config/__init__.py",
          "pc_pipelines/durable.py", "pc_pipelines_dagster/__init__.py", "pc_pipelines_dagster/assets/__init__.py",
          # in place: package folders, a tier-only folder, a top-level module's test, a project-wide check
          "tests/unit/store/test_a.py", "tests/unit/assets/test_b.py", "tests/integration/faults/test_c.py",
          "tests/unit/test_durable.py", "tests/unit/test_layering.py", "tests/e2e/test_cli.py",
          # misplaced
          "tests/unit/storage/test_d.py", "tests/unit/store/deep/test_e.py", "tests/unit/faults/test_f.py",
          "tests/unit/test_config_inputs.py", "tests/e2e/store/test_g.py")
    problems = misplaced(tmp_path)
    assert [p.split(" ")[0] for p in problems] == [
        "tests/unit/faults/:", "tests/unit/storage/:", "tests/unit/store/deep/:", "tests/unit/test_config_inputs.py",
        "tests/e2e/store/:"]
    assert problems[3].endswith("Fix: git mv it to tests/unit/config/test_config_inputs.py")
    assert "one of assets, config, store" in problems[1] and "TIER_ONLY" in problems[1]
    assert "tests/e2e is flat" in problems[4]

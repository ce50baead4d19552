"""The dataset registry (``pc_pipelines.data.registry``): the built-in datasets and what the code reads from their
entries, and a dataset module registered for a while (``tests/support/toy_dataset.py``): a run may train on it and
loads its prepared files, start_run offers it; unregistered, both refuse it again. (Its Dagster asset, checks and
resource setting: ``tests/integration/dagster/test_data_assets.py``.)"""

from __future__ import annotations

import ast
import importlib
import json
import sys
from pathlib import Path

import pytest

import pc_pipelines.data
from pc_pipelines.config import resolve
from pc_pipelines.data.registry import (
    EMBEDDED,
    EMBEDDED_DATASET,
    EVAL,
    TRAINING,
    DatasetSpec,
    auto_dataset,
    dataset_names,
    datasets,
    get_dataset,
    register_dataset,
    unregister_dataset,
)
from pc_pipelines.errors import RunError
from pc_pipelines.run import task_for

SUPPORT = Path(__file__).resolve().parents[2] / "support"


@pytest.fixture
def toy():
    """``tests/support/toy_dataset.py`` registered for one test."""
    sys.path.insert(0, str(SUPPORT))
    try:
        from toy_dataset import TOY
    finally:
        sys.path.remove(str(SUPPORT))
    register_dataset(TOY)
    yield TOY
    unregister_dataset("toy")
    assert "toy" not in dataset_names()


def test_the_builtin_datasets_and_what_is_read_from_them(tmp_path):
    assert dataset_names(TRAINING) == ("embedded", "deepmath", "polaris") and dataset_names(EVAL) == ("benchmarks",)
    assert [d.asset_key for d in datasets()] == ["arith_task", "deepmath", "polaris", "benchmarks"]
    assert [d.path_setting for d in datasets() if d.generic] == ["deepmath_path", "polaris_path"]
    assert [d.env_var for d in datasets() if d.generic] == ["PC_DEEPMATH_PATH", "PC_POLARIS_PATH"]
    assert get_dataset("deepmath").path(tmp_path) == tmp_path / "deepmath.parquet"
    assert get_dataset("benchmarks").path(tmp_path) == tmp_path / "benchmarks"
    assert get_dataset(EMBEDDED).path(tmp_path) == tmp_path / "arith"
    deepmath, polaris = get_dataset("deepmath"), get_dataset("polaris")
    assert (deepmath.heldout, deepmath.forbid_binary, deepmath.min_kept_fraction) == (500, True, 0.75)
    assert (polaris.heldout, polaris.forbid_binary, polaris.min_kept_fraction) == (0, False, 0.9)
    assert auto_dataset(True) == "embedded" and auto_dataset(False) == "deepmath"
    with pytest.raises(ValueError, match=r"dataset 'benchmarks' is not one of \('embedded', 'deepmath', 'polaris'\)"):
        get_dataset("benchmarks", TRAINING)


def test_a_spec_is_checked_and_a_name_registered_once():
    with pytest.raises(ValueError, match="lower-case"):
        DatasetSpec("Toy-1", "Toy", "x")
    with pytest.raises(ValueError, match="both load and prepare"):
        DatasetSpec("toy", "Toy", "x", load=lambda path: None)
    with pytest.raises(ValueError, match="role='test'"):
        DatasetSpec("toy", "Toy", "x", role="test")
    with pytest.raises(ValueError, match="already registered"):
        register_dataset(DatasetSpec("deepmath", "DeepMath again", "x"))
    register_dataset(get_dataset("deepmath"))  # the same spec again changes nothing


def test_the_embedded_task_needs_a_task_section_and_names_the_others():
    assert task_for("embedded", resolve("embedded", {}, method="grpo"), "unused") is None  # prepare_run builds it
    with pytest.raises(RunError, match="has no embedded task section. Fix: use dataset deepmath or polaris"):
        task_for("embedded", resolve("paper", {}, method="grpo"), "unused")


def test_a_registered_dataset_is_trained_on_from_its_prepared_files(toy, tmp_path):
    copy = tmp_path / "toy.jsonl"
    copy.write_text("".join(json.dumps({"question": f"What is {i} plus {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(8)))
    out = tmp_path / "data"
    cfg = resolve("embedded", {}, method="grpo")
    with pytest.raises(RunError, match=r"no prepared toy at .*toy.parquet. Fix: materialize the `toy` asset"):
        task_for("toy", cfg, out)
    prepared = toy.prepare(toy.load(str(copy)), heldout=toy.heldout, seed=0)
    assert prepared.write(out)["rows"] == toy.path(out)
    task = task_for("toy", cfg, out)
    assert len(task.prompts) == 6 and [e.name for e in task.eval_sets] == ["toy_heldout"]
    assert all(p.startswith(cfg.training.prompt_template.split("{question}")[0]) for p in task.prompts)
    with pytest.raises(RunError, match="has no embedded task section. Fix: use dataset deepmath, polaris or toy"):
        task_for("embedded", resolve("paper", {}, method="grpo"), out)


def test_start_run_offers_a_registered_dataset_and_refuses_it_once_unregistered(toy):
    from pc_pipelines_dagster.automation.jobs import dataset_choices

    assert dataset_choices() == ("auto", "embedded", "deepmath", "polaris", "toy")
    unregister_dataset("toy")
    assert dataset_choices() == ("auto", "embedded", "deepmath", "polaris")
    with pytest.raises(RunError, match=r"dataset 'toy' is not one of \('embedded', 'deepmath', 'polaris'\)"):
        task_for("toy", resolve("embedded", {}, method="grpo"), "unused")


def _spec_definitions(path: Path) -> list[str]:
    """The ``DatasetSpec(...)`` calls in a module's source, each as the name it is assigned to at the top level
    (``"?"`` for a call bound otherwise: in a list, a loop, a function)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assigned = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                assigned[id(node.value)] = targets[0].id
    return [assigned.get(id(n), "?") for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (getattr(n.func, "id", None) == "DatasetSpec" or getattr(n.func, "attr", None) == "DatasetSpec")]


STORED_NAMES = {"benchmarks": "evaluation_sets"}
"""A dataset whose name is stored elsewhere (the ``benchmarks`` asset's key, its prepared folder) and whose module
says what it holds: ``data/evaluation_sets.py`` (docs/ARCHITECTURE.md, "Bench" and "benchmark")."""


def test_each_registered_dataset_is_defined_in_a_module_of_its_own():
    """docs/ARCHITECTURE.md, "How to add a dataset": ``pc_pipelines/data/<name>.py`` holds one dataset (its loader,
    preparation and spec) and the registry lists it. Every module of the data package defines at most one spec,
    and each registered spec but the built-in embedded task's (the registry's own) is defined in the module named
    after it (the evaluation sets: :data:`STORED_NAMES`)."""
    package = Path(pc_pipelines.data.__file__).parent
    defined_in: dict[int, str] = {}
    for path in sorted(package.glob("*.py")):
        names = _spec_definitions(path)
        assert len(names) <= 1, f"{path.name} defines {len(names)} DatasetSpecs {names}: one module per dataset"
        if names:
            module = importlib.import_module(f"pc_pipelines.data.{path.stem}")
            spec = getattr(module, names[0])
            assert isinstance(spec, DatasetSpec), (path.name, names[0])
            defined_in[id(spec)] = path.stem
    assert defined_in[id(EMBEDDED_DATASET)] == "registry"
    registered = [d for d in datasets() if d is not EMBEDDED_DATASET]
    assert [d.name for d in registered] == ["deepmath", "polaris", "benchmarks"]
    assert {d.name: defined_in.get(id(d)) for d in registered} == {d.name: STORED_NAMES.get(d.name, d.name)
                                                                   for d in registered}

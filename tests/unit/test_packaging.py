"""`make demo` and `make test` install the package from pyproject.toml: setuptools reads it without one deprecation
or other warning (a `project.license` table, say, printed 52 lines of them on every install)."""

import gc
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_setuptools_reads_pyproject_without_a_warning():
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    gc.collect()  # an earlier test's garbage (an unclosed TemporaryDirectory) warns when collected, not here
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # A collection inside the block still warns for objects this test never made: ResourceWarning is never
        # about the configuration (it failed a loaded CI once: three TemporaryDirectory warnings of other tests).
        warnings.simplefilter("ignore", ResourceWarning)
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
    assert dist.get_name() == "pc-pipelines" and dist.metadata.license_expression


PACKAGES = ("pc_pipelines", "pc_pipelines_dagster")  # the library and the Dagster project, each in its own folder


def test_every_package_folder_is_installed_and_nothing_else():
    """setuptools finds the packages (pyproject.toml's packages.find): every folder with an ``__init__.py`` under
    the two package folders, under its folder's name, and nothing else (no top-level ``assets``, ``tests``, no
    data folder as a namespace package)."""
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    found = set(apply_configuration(Distribution(), ROOT / "pyproject.toml").packages)
    on_disk = {".".join(init.parent.relative_to(ROOT).parts) for top in PACKAGES
               for init in (ROOT / top).rglob("__init__.py")}
    missing, extra = sorted(on_disk - found), sorted(found - on_disk)
    assert (missing, extra) == ([], []), (
        f"pyproject.toml [tool.setuptools.packages.find] misses {missing}, finds {extra} besides the package folders")
    assert {name.split(".")[0] for name in found} == set(PACKAGES)
    assert {"pc_pipelines_dagster.assets", "pc_pipelines_dagster.automation", "pc_pipelines_dagster.resources",
            "pc_pipelines.training.verl_conf"} <= found

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


def test_every_package_folder_is_installed():
    """pyproject.toml lists the packages by name (the Dagster layer's folders install under another name, which
    setuptools' discovery cannot do): a new subpackage left out of the list would be missing from every install."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"pc_pipelines": "pc_pipelines", **{folder: name for name, folder in setuptools["package-dir"].items()}}
    on_disk = set()
    for folder, name in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            on_disk.add(".".join([name, *init.parent.relative_to(ROOT / folder).parts]))
    missing, stale = sorted(on_disk - set(setuptools["packages"])), sorted(set(setuptools["packages"]) - on_disk)
    assert (missing, stale) == ([], []), (
        f"pyproject.toml [tool.setuptools] packages: add {missing}, remove {stale} (one line per package folder)")
    assert {"pc_pipelines_dagster.assets", "pc_pipelines_dagster.automation", "pc_pipelines_dagster.resources"} <= on_disk

"""`make demo` and `make test` install the package from pyproject.toml: setuptools reads it without one deprecation
or other warning (a `project.license` table, say, printed 52 lines of them on every install)."""

import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_setuptools_reads_pyproject_without_a_warning():
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
    assert dist.get_name() == "pc-pipelines" and dist.metadata.license_expression

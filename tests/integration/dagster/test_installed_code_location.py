"""A non-editable install (what a user's image gets from `pip install .`, k8s/Dockerfile) carries the Dagster layer
under the project's name: ``pc_pipelines_dagster.assets`` and ``pc_pipelines_dagster.resources``, no top-level
``assets`` or ``resources`` package in site-packages (another distribution's would collide with them), and the code
location loads from the install alone, in a folder where the checkout's folders are not on the path."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow


def source_copy(dest: Path) -> Path:
    """The checkout's files (tracked, and untracked but not ignored) copied to ``dest``: pip builds in the source
    folder, and setuptools keeps what an earlier build left in ``build/lib`` (a file since moved away would ship
    again), so the install is built from a copy that has no ``build/`` and leaves none in the checkout."""
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode()
    for name in filter(None, listing.split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    source = source_copy(tmp_path_factory.mktemp("source"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(target), str(source)],
                   check=True, capture_output=True, text=True, timeout=600)
    return target


def run_installed(installed: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(installed), "DAGSTER_HOME": str(cwd)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


def test_the_install_has_no_top_level_assets_or_resources(installed):
    packages = sorted(p.name for p in installed.iterdir() if p.name not in ("bin",) and not p.name.endswith(".dist-info"))
    assert packages == ["pc_pipelines", "pc_pipelines_dagster"]
    assert sorted(p.name for p in (installed / "pc_pipelines_dagster").iterdir()) == ["assets", "automation", "resources"]


def test_the_code_location_loads_from_the_install(installed, tmp_path):
    probe = ("import sys, importlib.util as u, pc_pipelines.definitions as d, pc_pipelines_dagster.assets as a;"
             "print(d.__file__); print(a.__file__);"
             "print([n for n in ('assets', 'automation', 'resources') if u.find_spec(n) is not None]);"
             "print(sorted(j.name for j in d.defs.resolve_all_job_defs() if not j.name.startswith('__')))")
    out = run_installed(installed, tmp_path, "-c", probe)
    assert out.returncode == 0, out.stderr
    definitions, assets, bare, jobs = out.stdout.splitlines()[-4:]
    assert definitions.startswith(str(installed)) and assets.startswith(str(installed / "pc_pipelines_dagster"))
    assert bare == "[]"  # `import assets` / `import resources` mean nothing of ours
    assert {"start_run", "train_segment", "report"} <= set(eval(jobs))
    validate = run_installed(installed, tmp_path, "-m", "dagster", "definitions", "validate",
                             "-m", "pc_pipelines.definitions")
    assert validate.returncode == 0, validate.stdout + validate.stderr


def test_the_install_ships_the_studys_headline_beside_its_reader_and_presets_only(installed, tmp_path):
    """`make demo` from an image prints the committed study's headline: the results file is package data of
    pc_pipelines.reports (never under presets/, which ships presets only)."""
    from pc_pipelines.reports import study_headline

    probe = ("import pathlib, pc_pipelines.presets as p, pc_pipelines.reports as r;"
             "print(r.STUDY_RESULTS); print(r.study_headline());"
             "print(sorted(f.name for f in pathlib.Path(p.__file__).parent.iterdir() if f.suffix != '.yaml'))")
    out = run_installed(installed, tmp_path, "-c", probe)
    assert out.returncode == 0, out.stderr
    results, headline, presets = out.stdout.splitlines()[-3:]
    assert results == str(installed / "pc_pipelines" / "reports" / "bench_study_results.json")
    assert headline == study_headline() and "preset `bench`" in headline  # the checkout's file, shipped whole
    assert eval(presets) in (["__init__.py"], ["__init__.py", "__pycache__"])

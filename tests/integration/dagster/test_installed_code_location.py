"""The code location as a user gets it, validated by ``dagster definitions validate`` two ways: from the checkout
(``workspace.yaml``, what ``make ui`` loads, on this checkout's editable install) and from the wheel ``pip wheel .``
builds (what k8s/Dockerfile's ``pip install .`` installs), installed in a fresh virtual environment in a folder
where the checkout's folders are not on the path. The wheel holds two packages, the library ``pc_pipelines`` and the
Dagster project ``pc_pipelines_dagster`` (its assets, automation and resources inside it), no top-level ``assets``
or ``resources`` package (another distribution's would collide with them), and the package data (the warm start,
the presets, the evaluation sets, the study's headline)."""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow


def source_copy(dest: Path) -> Path:
    """The checkout's files (tracked, and untracked but not ignored) copied to ``dest``: pip builds in the source
    folder, and setuptools keeps what an earlier build left in ``build/lib`` (a file since moved away would ship
    again), so the wheel is built from a copy that has no ``build/`` and leaves none in the checkout."""
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode()
    for name in filter(None, listing.split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = source_copy(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(out), str(source)],
                   check=True, capture_output=True, text=True, timeout=600)
    (found,) = out.glob("pc_pipelines-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed (not editable). Its dependencies (Dagster, torch, ...)
    are this environment's, on its path through a ``.pth`` line (nothing is downloaded); a ``.pth`` file of this
    environment (the editable install's hook into the checkout) is not run there, so ``pc_pipelines`` and
    ``pc_pipelines_dagster`` are the wheel's only."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True,
                   text=True, timeout=300)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    ours = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (site / "project-dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, text=True, timeout=600)
    return venv


def site_of(venv: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))


def run_installed(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(venv / "bin" / "python"), *args], cwd=cwd, env={**env, "DAGSTER_HOME": str(cwd)},
                          capture_output=True, text=True, timeout=600, check=False)


def test_the_wheel_holds_the_two_packages_and_their_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted({n.split("/")[0] for n in names if ".dist-info/" not in n}) == ["pc_pipelines", "pc_pipelines_dagster"]
    assert sorted({n.split("/")[1] for n in names if n.startswith("pc_pipelines_dagster/")}) == [
        "__init__.py", "assets", "automation", "definitions.py", "demo.py", "resources"]
    assert not any(n.startswith(("pc_pipelines/definitions.py", "pc_pipelines/demo.py")) for n in names)
    warm = [n for n in names if n.startswith("pc_pipelines/warm_starts/")]
    assert any(n.endswith("/model.safetensors") for n in warm) and any(n.endswith("/SHA256SUMS") for n in warm)
    assert {"pc_pipelines/presets/bench.yaml", "pc_pipelines/presets/embedded.yaml",
            "pc_pipelines/reports/bench_study_results.json", "pc_pipelines/data/eval_sets/README.md"} <= set(names)
    assert len([n for n in names if n.startswith("pc_pipelines/data/eval_sets/") and n.endswith("/test.jsonl")]) == 6


def test_the_install_has_no_top_level_assets_or_resources(venv):
    site = site_of(venv)
    packages = sorted(p.name for p in site.iterdir() if p.is_dir() and p.name != "bin"
                      and not p.name.endswith(".dist-info"))
    assert packages == ["pc_pipelines", "pc_pipelines_dagster"]
    assert sorted(p.name for p in (site / "pc_pipelines_dagster").iterdir() if p.is_dir() and p.name != "__pycache__"
                  ) == ["assets", "automation", "resources"]


def test_the_code_location_validates_from_the_installed_wheel(venv, tmp_path):
    probe = ("import sys, importlib.util as u, pc_pipelines, pc_pipelines_dagster.definitions as d,"
             " pc_pipelines_dagster.assets as a;"
             "print(pc_pipelines.__file__); print(d.__file__); print(a.__file__);"
             "print([n for n in ('assets', 'automation', 'resources') if u.find_spec(n) is not None]);"
             "print(sorted(j.name for j in d.defs.resolve_all_job_defs() if not j.name.startswith('__')))")
    out = run_installed(venv, tmp_path, "-c", probe)
    assert out.returncode == 0, out.stderr
    library, definitions, assets, bare, jobs = out.stdout.splitlines()[-5:]
    site = site_of(venv)
    assert library == str(site / "pc_pipelines" / "__init__.py")
    assert definitions == str(site / "pc_pipelines_dagster" / "definitions.py")
    assert assets == str(site / "pc_pipelines_dagster" / "assets" / "__init__.py")
    assert bare == "[]"  # `import assets` / `import resources` mean nothing of ours
    assert {"start_run", "train_segment", "report"} <= set(eval(jobs))
    validate = run_installed(venv, tmp_path, "-m", "dagster", "definitions", "validate",
                             "-m", "pc_pipelines_dagster.definitions")
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert "Validation successful for code location pc_pipelines_dagster.definitions" in validate.stdout + validate.stderr


def test_the_code_location_validates_from_the_checkout(tmp_path):
    """``make ui``'s workspace.yaml, loaded from the checkout by this environment's ``dagster`` (the editable
    install), as a user in the checkout runs it."""
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    validate = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert "Validation successful for code location pc_pipelines_dagster.definitions" in validate.stdout + validate.stderr
    where = subprocess.run([sys.executable, "-c", "import pc_pipelines_dagster.definitions as d; print(d.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300, check=True).stdout.split()[-1]
    assert where == str(ROOT / "pc_pipelines_dagster" / "definitions.py")


def test_the_install_ships_the_studys_headline_beside_its_reader_and_presets_only(venv, tmp_path):
    """`make demo` from an image prints the committed study's headline: the results file is package data of
    pc_pipelines.reports (never under presets/, which ships presets only)."""
    from pc_pipelines.reports import study_headline

    probe = ("import pathlib, pc_pipelines.presets as p, pc_pipelines.reports as r;"
             "print(r.STUDY_RESULTS); print(r.study_headline());"
             "print(sorted(f.name for f in pathlib.Path(p.__file__).parent.iterdir() if f.suffix != '.yaml'))")
    out = run_installed(venv, tmp_path, "-c", probe)
    assert out.returncode == 0, out.stderr
    results, headline, presets = out.stdout.splitlines()[-3:]
    assert results == str(site_of(venv) / "pc_pipelines" / "reports" / "bench_study_results.json")
    assert headline == study_headline() and "preset `bench`" in headline  # the checkout's file, shipped whole
    assert eval(presets) in (["__init__.py"], ["__init__.py", "__pycache__"])

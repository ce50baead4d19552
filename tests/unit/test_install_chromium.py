"""`make test`'s check-chromium (.ci/install-chromium): installs Chromium when missing and it can, else says how.

Run against stub commands first on PATH (``id``, ``apt-get``, ``sudo``), so nothing is really installed: the stub
apt-get records its arguments and, on ``install``, drops a fake ``chromium`` on PATH as the real one would.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "install-chromium"


def stub(bin_dir: Path, name: str, body: str) -> None:
    p = bin_dir / name
    p.write_text("#!/usr/bin/env bash\n" + body + "\n")
    p.chmod(0o755)


def run(bin_dir: Path) -> subprocess.CompletedProcess:
    # Only the stubs and the system's basic tools: no chromium or sudo from the host leaks in.
    path = f"{bin_dir}:/usr/bin:/bin"
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, check=False, timeout=60,
                          env={"PATH": path, "HOME": str(bin_dir)})


@pytest.fixture
def bin_dir(tmp_path):
    for host in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/bin/chromium"):
        if Path(host).exists():
            pytest.skip(f"{host} exists on this machine: the missing-chromium paths cannot be exercised")
    d = tmp_path / "bin"
    d.mkdir()
    log = tmp_path / "apt.log"
    stub(d, "apt-get", f'echo "$*" >> {log}\n'
                       f'if [ "$1" = install ] || [ "${{*: -1}}" = chromium ]; then\n'
                       f'  printf "#!/bin/sh\\n" > {d}/chromium; chmod +x {d}/chromium\nfi')
    return d


def apt_calls(bin_dir: Path) -> list[str]:
    log = bin_dir.parent / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def test_present_chromium_is_left_alone(bin_dir):
    stub(bin_dir, "chromium", "exit 0")
    res = run(bin_dir)
    assert res.returncode == 0 and res.stderr == "" and apt_calls(bin_dir) == []


def test_root_installs_it(bin_dir):
    stub(bin_dir, "id", 'echo 0')
    res = run(bin_dir)
    assert res.returncode == 0, res.stderr
    assert apt_calls(bin_dir) == ["update -qq", "install -y -qq chromium"]
    assert (bin_dir / "chromium").exists() and "chromium installed" in res.stderr


def test_passwordless_sudo_installs_it(bin_dir):
    stub(bin_dir, "id", 'echo 1000')
    stub(bin_dir, "sudo", 'if [ "$1" = -n ]; then shift; fi\n"$@"')
    res = run(bin_dir)
    assert res.returncode == 0, res.stderr
    assert apt_calls(bin_dir) == ["update -qq", "install -y -qq chromium"]
    assert "sudo -n apt-get install -y chromium" in res.stderr


def test_without_root_or_sudo_it_says_how_and_installs_nothing(bin_dir):
    stub(bin_dir, "id", 'echo 1000')
    if any(Path(p, "sudo").exists() for p in ("/usr/bin", "/bin")):
        stub(bin_dir, "sudo", 'exit 1')  # a sudo that asks for a password (sudo -n fails)
    res = run(bin_dir)
    assert res.returncode == 1 and apt_calls(bin_dir) == []
    assert "not root and has no passwordless sudo" in res.stderr
    assert "sudo apt-get install -y chromium" in res.stderr and "tests/e2e/test_ui.py" in res.stderr


def test_a_failed_install_is_reported(bin_dir):
    stub(bin_dir, "id", 'echo 0')
    stub(bin_dir, "apt-get", 'exit 100')
    res = run(bin_dir)
    assert res.returncode == 1 and "apt-get update failed" in res.stderr


def test_make_test_runs_it_and_goes_on_when_it_cannot():
    makefile = (ROOT / "Makefile").read_text()
    assert "test: $(STAMP) check-chromium lint" in makefile
    assert "@./.ci/install-chromium || true" in makefile
    assert ".ci/install-chromium\n" in (ROOT / ".ci" / "run").read_text()
    assert os.access(SCRIPT, os.X_OK)

"""The commands printed for a person to paste (`train`'s closing lines, `simulate-demo`'s, the demo's, a segment's
metadata) name the console scripts as the shell can run them: the bare name when PATH finds this install's script,
else its path beside the interpreter (``.venv/bin/pilot-commit`` from the repository root)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pc_pipelines.errors import shell_command

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
SHOW = "from pc_pipelines.errors import installed_command as c; print(c('pilot-commit')); print(c('tensorboard'))"


def shown(cwd: Path, path: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", SHOW], cwd=cwd, env={**os.environ, "PATH": path},
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.splitlines()


def test_scripts_not_on_path_are_printed_with_their_path_and_run_as_printed(tmp_path):
    bare_path = "/usr/bin:/bin"
    printed = shown(BIN.parent.parent, bare_path)  # from the directory holding the venv, as the README's commands
    assert printed == [f"{BIN.parent.name}/{BIN.name}/pilot-commit", f"{BIN.parent.name}/{BIN.name}/tensorboard"]
    elsewhere = shown(tmp_path, bare_path)
    assert elsewhere == [str(BIN / "pilot-commit"), str(BIN / "tensorboard")]
    for cmd in (*printed, *elsewhere):  # each runs as printed in a shell without the venv on PATH
        cwd = BIN.parent.parent if not cmd.startswith("/") else tmp_path
        out = subprocess.run(["bash", "-c", shell_command(cmd, "--help")], cwd=cwd, env={**os.environ, "PATH": bare_path},
                             capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 0, (cmd, out.stderr[-2000:])


def test_scripts_on_path_are_printed_bare(tmp_path):
    assert shown(tmp_path, f"{BIN}:/usr/bin:/bin") == ["pilot-commit", "tensorboard"]


def test_train_closing_lines_use_the_runnable_commands(tmp_path, monkeypatch):
    from pc_pipelines.cli.train import closing_lines

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    lines = closing_lines("r", 0, 0, [], None, 1, 0.0, None, tmp_path / "tb dir", tmp_path / "s.duckdb")
    assert f"tensorboard: {shell_command(BIN / 'tensorboard', '--logdir', tmp_path / 'tb dir')}" in lines
    assert f"store:       {shell_command(BIN / 'pilot-commit', 'runs', '--store', tmp_path / 's.duckdb')}" in lines

"""Issue 55, points 4 and 5: the typos a new user makes after ``make demo`` each give one line with a fix, and the
command the fix prints runs when pasted into bash there: the same form as the README's (``.venv/bin/pilot-commit``,
which is not on PATH), never a bare ``pilot-commit`` ("command not found"), never advice to write into a store the
user did not name for it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
ENV = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "LANG": "C.UTF-8"}  # no .venv/bin on PATH, as after a demo
README_FORM = ".venv/bin/pilot-commit "


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    """Laid out like the repository after ``make demo``: ``.venv`` and ``runs/pc.duckdb`` holding a GRPO, a DAPO and a
    PC run of family ``bench`` (simulated: the typos are about the command line, not about training)."""
    root = tmp_path_factory.mktemp("after-demo")
    (root / ".venv").symlink_to(BIN.parent, target_is_directory=True)
    for m in ("grpo", "dapo", "pc"):
        out = pilot(root, "simulate", "--method", m, "--family", "bench", "--store", "runs/pc.duckdb", "--steps", "6",
                    "--prompts", "500", "--train-batch", "16", "--n", "8", "--run-name", f"bench-{m}-s0")
        assert out.returncode == 0, out.stderr[-2000:]
    return root


def pilot(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``pilot-commit *args`` as the demo's venv runs it, from ``cwd`` (the venv's python under ``cwd``: so the
    commands it prints are built as after ``make demo``)."""
    return subprocess.run([".venv/bin/python", "-m", "pc_pipelines.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=ENV, check=False)


def fixes(line: str) -> list[str]:
    """The commands a fix text prints for pasting (backticked, starting with the program)."""
    return [c for c in re.findall(r"`([^`]+)`", line.split("Fix:", 1)[1]) if c.startswith(README_FORM)]


@pytest.mark.parametrize("args, words, extra", [
    (["runs", "--store", "run/pc.duckdb"], "no store at", []),
    (["compare", "--runs", "bench-pc-s1", "--store", "runs/pc.duckdb", "--out", "c.png"], "no run 'bench-pc-s1'", []),
    (["train", "--stesp", "20"], "did you mean --steps?", []),
    # the fix starts the run new: pasted with --help here (it would train 200 steps), so its words are checked to
    # parse as train's and the program to be found, not the training itself
    (["train", "--run-name", "never-ran", "--resume"], "holds no run 'never-ran' to resume (it holds bench-dapo-s0, "
     "bench-grpo-s0, bench-pc-s0). Fix: drop --resume to start never-ran as a new run", ["--help"]),
    (["report", "--store", "runs/pc.duckdb", "--family", "bnch"], "no family 'bnch' in runs/pc.duckdb (its families: "
     "bench)", []),
])
def test_each_typo_gives_one_line_with_a_fix_that_runs_when_pasted(demo_dir, args, words, extra):
    out = pilot(demo_dir, *args)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert not (demo_dir / "runs" / "never-ran").exists()  # --resume of an unknown run started nothing
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Fix:" in lines[0], out.stderr
    assert "simulate" not in lines[0].split("Fix:", 1)[1].replace("`simulate --store`", "")  # no writes advised
    pasted = fixes(lines[0])
    assert pasted, lines[0]
    for cmd in pasted:
        ran = subprocess.run(["bash", "-c", " ".join([cmd, *extra])], cwd=demo_dir, capture_output=True, text=True,
                             timeout=300, env=ENV, check=False)
        assert "command not found" not in ran.stderr and "No such file" not in ran.stderr, (cmd, ran.stderr)
        assert ran.returncode == 0, (cmd, ran.returncode, ran.stderr[-2000:])
    assert not (demo_dir / "run").exists()  # nothing written where the typo pointed


def test_every_option_of_the_store_commands_has_help():
    from pc_pipelines.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    bare = [f"{name} {o}" for name in ("runs", "report", "compare", "sql", "check", "timeline")
            for a in sub.choices[name]._actions if a.help is None for o in a.option_strings]
    assert bare == []

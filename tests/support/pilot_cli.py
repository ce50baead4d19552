"""``pilot-commit`` run as a user runs it, for the tests of every tier: a subprocess of the installed console script
(``INSTALLED``: what the README's commands call) or of ``python -m pc_pipelines.cli`` (``MODULE``: the same code
without the script's wrapper), its output captured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

INSTALLED = (str(Path(sys.executable).parent / "pilot-commit"),)
MODULE = (sys.executable, "-m", "pc_pipelines.cli")


def run_cli(*args, exe=INSTALLED, check_rc: int | None = None, timeout: float = 300, env: dict | None = None,
            extra_env: dict | None = None, cwd: Path | str | None = None, stdout=subprocess.PIPE, text: bool = True,
            stdin_text: str | None = None) -> subprocess.CompletedProcess:
    """``pilot-commit *args`` with stderr captured, and stdout unless ``stdout`` names where else it goes (a file);
    ``check_rc``: assert the exit status is that one (the failure shows the arguments, the status and stderr's
    tail); ``env``: the whole environment (default this process's), ``extra_env``: variables set over it at the
    call; ``text=False``: the output as bytes."""
    if extra_env:
        env = {**(env or os.environ), **extra_env}
    out = subprocess.run([*exe, *args], stdout=stdout, stderr=subprocess.PIPE, text=text, timeout=timeout, env=env,
                         cwd=cwd, input=stdin_text, check=False)
    if check_rc is not None:
        assert out.returncode == check_rc, f"{args}: exit {out.returncode}\n{out.stderr[-3000:]}"
    return out


def sql(store: Path | str, query: str, **kw) -> list[dict]:
    """The rows ``pilot-commit sql --store STORE QUERY --json`` prints (it must exit 0)."""
    return json.loads(run_cli("sql", "--store", str(store), query, "--json", check_rc=0, **kw).stdout)

"""``pilot-commit`` run as a user runs it, for the tests of every tier: a subprocess of the installed console script
(``INSTALLED``: what the README's commands call) or of ``python -m pc_pipelines.cli`` (``MODULE``: the same code
without the script's wrapper), its output captured. Both are forked from a server that did the imports
(tests/support/cli_forkserver.py: a process of their own, as a subprocess, without ~3 s of start-up each) unless the
environment changes what is read at import; any other command line is a plain subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cli_forkserver

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
    entry = "module" if tuple(exe) == MODULE else exe[0] if tuple(exe) == INSTALLED else None
    if entry is not None and cli_forkserver.usable(env):  # a process of its own, forked with the imports done
        out = cli_forkserver.run([os.fspath(a) for a in args], entry=entry, timeout=timeout, env=env, cwd=cwd,
                                 stdout=stdout, text=text, input=stdin_text)
        out.args = [*exe, *out.args]
    else:
        out = subprocess.run([*exe, *args], stdout=stdout, stderr=subprocess.PIPE, text=text, timeout=timeout,
                             env=env, cwd=cwd, input=stdin_text, check=False)
    if check_rc is not None:
        assert out.returncode == check_rc, f"{args}: exit {out.returncode}\n{out.stderr[-3000:]}"
    return out


def sql(store: Path | str, query: str, **kw) -> list[dict]:
    """The rows ``pilot-commit sql --store STORE QUERY --json`` prints (it must exit 0)."""
    return json.loads(run_cli("sql", "--store", str(store), query, "--json", check_rc=0, **kw).stdout)

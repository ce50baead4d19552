"""Every command's exit status comes from one table (``cli/exits.py``): the statuses the commands have always ended
with, for each kind of ending, and no command module returns a status of its own for an error it caught."""

from __future__ import annotations

import ast
import errno
import signal
from pathlib import Path

import pytest

from pc_pipelines.cli.exits import exit_status
from pc_pipelines.errors import ConfigError, RunError
from pc_pipelines.run.stopping import StopRequested
from pc_pipelines.store import RunBusyError, StoreError
from pc_pipelines.store.names import RunIdError

CLI = Path(__file__).resolve().parents[3] / "pc_pipelines" / "cli"


@pytest.mark.parametrize(("exc", "status"), [
    (ConfigError("bad"), 2), (RunError("refused"), 2), (RunBusyError("r", Path("/runs/r/.lock"), None), 2), (StoreError("store"), 2),
    (RunIdError("name"), 2), (FileNotFoundError("no policy"), 2),
    (StopRequested(signal.SIGTERM), 143), (StopRequested(signal.SIGINT), 130), (StopRequested(signal.SIGPIPE), 141),
    (KeyboardInterrupt(), 130), (BrokenPipeError(), 0),
    (OSError(errno.ENOSPC, "No space left on device"), 1), (PermissionError("read-only"), 1),
    (ValueError("a bug"), None),
])
def test_each_ending_has_its_status(exc, status):
    assert exit_status(exc) == status


@pytest.mark.parametrize("module", ["__init__.py", "train.py", "segment.py", "simulate_commands.py"])
def test_an_error_handler_takes_its_status_from_the_table(module):
    tree = ast.parse((CLI / module).read_text())
    literal = [f"{module}:{r.lineno}" for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler)
               for r in ast.walk(h) if isinstance(r, ast.Return) and isinstance(r.value, ast.Constant)
               and type(r.value.value) is int]
    assert literal == []

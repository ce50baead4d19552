"""The exit status of every command's ending, in one table (:func:`exit_status`): ``main`` and the commands that
word their own message (``train``, ``simulate``, ``train-segment``) all take the status from here.

=======================================================================  ==========================================
how a command ends                                                       status
=======================================================================  ==========================================
a user error: a config, a name, a store path, a busy run, a run refused  2
a stop request (SIGTERM, Ctrl-C, a ``--json`` reader gone)               128 + the signal (143, 130, 141)
Ctrl-C before any run was opened                                         130
a write that failed (a full disk, an I/O error)                          1
stdout closed under a command that prints (``| head``)                   0
anything else                                                            not ours: the traceback shows it
=======================================================================  ==========================================
"""

from __future__ import annotations

from ..errors import ConfigError, RunError
from ..run.stopping import StopRequested, failed_write
from ..store import RunBusyError, StoreError
from ..store.names import RunIdError

USER_ERRORS = (ConfigError, RunError, RunBusyError, StoreError, RunIdError, FileNotFoundError)
USER_ERROR = 2
WRITE_FAILED = 1
"""A command that words a failed write itself (``simulate``: any OSError of its run, a missing file included)."""


def exit_status(exc: BaseException) -> int | None:
    """The exit status ``exc`` ends a command with (see the module's table); None: an error of no known kind."""
    if isinstance(exc, StopRequested):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, BrokenPipeError):
        return 0
    if isinstance(exc, USER_ERRORS):
        return USER_ERROR
    if isinstance(exc, Exception) and failed_write(exc):
        return WRITE_FAILED
    return None

"""The exit status of every command's ending, in one table (:func:`exit_status` and the names below): ``main`` and
the commands that word their own message (``train``, ``simulate``, ``train-segment``, the store commands) all take
the status from here; no module of ``pc_pipelines/cli`` returns a number of its own (``tests/unit/cli/test_exits.py``).

=======================================================================  ==========================================
how a command ends                                                       status
=======================================================================  ==========================================
done (``check``: a whole store)                                          0 (``OK``)
``check`` found damaged or missing steps                                 1 (``PROBLEMS_FOUND``)
``sql``'s query failed (DuckDB's message and the tables it may read)     1 (``QUERY_FAILED``)
a user error: a config, a name, a store path, a busy run, a run refused  2 (``USER_ERROR``)
a store command's output path that names no file (too long, a file      2 (:func:`output_status`)
where a folder must be, a missing folder), a PNG whose reader left
before it was whole
a stop request (SIGTERM, Ctrl-C, a ``--json`` reader gone)               128 + the signal (143, 130, 141)
Ctrl-C before any run was opened                                         130 (``INTERRUPTED``)
a write that failed (a full disk, a read-only folder, an I/O error)      1 (``WRITE_FAILED``, :func:`output_status`)
a run that failed, its reason already shown (``make demo``: a segment)   1 (``RUN_FAILED``)
stdout closed under a command that prints (``| head``)                   0 (``OK``)
anything else                                                            not ours: the traceback shows it
=======================================================================  ==========================================
"""

from __future__ import annotations

import errno

from ..errors import ConfigError, RunError
from ..run.stopping import StopRequested, failed_write
from ..store import RunBusyError, StoreError
from ..store.names import RunIdError

USER_ERRORS = (ConfigError, RunError, RunBusyError, StoreError, RunIdError, FileNotFoundError)
OK = 0
PROBLEMS_FOUND = 1
"""``check`` found damaged or missing steps (each with its fix on stdout)."""
QUERY_FAILED = 1
"""``sql``'s query failed: DuckDB's message, and what ``sql`` may read, on stderr."""
USER_ERROR = 2
INTERRUPTED = 130
"""Ctrl-C before any run was opened (128 + SIGINT)."""
WRITE_FAILED = 1
"""A command that words a failed write itself (``simulate``: any OSError of its run, a missing file included; the
store commands: :func:`output_status`)."""
RUN_FAILED = 1
"""A command that ran runs and says which failed, with their logs above (the Dagster demo's segment runs)."""
BAD_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOENT, errno.ELOOP})
"""An output path that cannot name a file to write: the user's to change, not a failed write."""


def exit_status(exc: BaseException) -> int | None:
    """The exit status ``exc`` ends a command with (see the module's table); None: an error of no known kind."""
    if isinstance(exc, StopRequested):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(exc, BrokenPipeError):
        return OK
    if isinstance(exc, USER_ERRORS):
        return USER_ERROR
    if isinstance(exc, Exception) and failed_write(exc):
        return WRITE_FAILED
    return None


def output_status(exc: OSError) -> int:
    """The status of a command whose own output (``--out``, ``--plots``) could not be written: :data:`USER_ERROR`
    when the path names no file it could write (:data:`BAD_PATH_ERRNOS`), else :data:`WRITE_FAILED`."""
    return USER_ERROR if exc.errno in BAD_PATH_ERRNOS or isinstance(exc, FileNotFoundError) else WRITE_FAILED

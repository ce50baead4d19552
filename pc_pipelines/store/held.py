"""Which run directories this process holds the writer lock of (:func:`~.runlock.hold_run` fills it): kept below
both the lock (:mod:`.runlock`) and the catalog (:mod:`.catalog`), so that the catalog deletes a run's compacted step
files only in the process that writes the run (:meth:`~.catalog.Store.vacuum`; issue 54: another run's session
deleted a replay's fresh step files before ``Store.replace_steps`` swapped them in)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Held:
    fd: int
    count: int


HELD: dict[str, Held] = {}
"""Resolved directory -> its lock file's descriptor and how many holders in this process."""
GUARD = threading.Lock()


def holds(directory: str | Path) -> bool:
    """Whether this process holds the writer lock of ``directory``."""
    return str(Path(directory).resolve()) in HELD

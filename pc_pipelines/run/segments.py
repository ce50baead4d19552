"""Training segments: how a run is cut into Dagster partitions, and how a sensor decides what to train next.

Pure (no Dagster): the code location's assets and sensor call these, and the unit tests drive them directly.

**Partitions.** A run of ``total_steps`` steps trains in segments of ``segment_steps``; segment ``k`` is the
partition ``<run>/seg-<kkkk>`` of ONE dynamic partitions definition (Dagster rejects self-dependent assets without
time windows, and two dynamic dimensions would form a full cross product of runs and segments). Worked example,
``segment_steps=10, total_steps=25``::

    seg-0000  steps  1..10   starts from the base policy     (checkpoint after step 10 ends it)
    seg-0001  steps 11..20   starts from the checkpoint after step 10
    seg-0002  steps 21..25   starts from the checkpoint after step 20 (the last segment is shorter)

Steps count from 1 in the store as on every screen (:mod:`pc_pipelines.steps`), and a segment is named by its
partition key on every screen: seg-0000 is "segment seg-0000 of 3, steps 1..10". Segment ``k`` needs the checkpoint
after step ``first(k) - 1`` (0: the base policy); the run keeps every checkpoint at a multiple of
``segment_steps`` steps (``training.keep_every``), so any segment can be re-materialized later.

**Who writes a segment.** One process at a time writes a run (the run's writer lock,
:mod:`pc_pipelines.store.runlock`). The ``training_segment`` asset takes that lock *before* it records anything:
a materialization refused because another process holds the run (``RunBusyError``) leaves the segment's row as it
was and fails its Dagster step with the holder's pid and host. Any segment can be re-materialized later: a done
segment stays ``done`` while it is re-trained and if the re-run fails (its rows and checkpoints stay valid until the
replay replaces them, atomically, at its end), so a run whose segments are all done stays ``finished``.

**The sensor** (:func:`decide`) looks at every run with a segment plan and returns one :class:`SensorDecision` per
run, carrying its reason: request the first segment that is not done when the one before it is done; wait while
the run is in flight (one segment at a time per run, also enforced by a run-queue tag limit); pause the run after
``max_failures`` consecutive failures of its next segment; finish it when every segment is done. A run is in flight
while any queued or running Dagster run trains one of its partitions (tagged by the sensor or launched by hand: the
partition tag Dagster sets on every partitioned run says which), or while a live process holds its writer lock
(a ``pilot-commit`` command, a launched pod whose Dagster run is gone). Dagster launches a given run key once per
sensor, so every attempt gets a key of its own: ``<run>/<k>`` for the first, then ``<run>/<k>/retry-<n>``, ``n`` the
segment's attempts so far, moved past any key the sensor already used (a run refused or cancelled before it
recorded an attempt used its key too).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..steps import segment_name

SEGMENT_RE = re.compile(r"^(?P<run>[A-Za-z0-9][A-Za-z0-9_.-]*)/seg-(?P<k>\d{4,})$")


class SegmentError(ValueError):
    """A segment key or plan that cannot work; the message says how to fix it."""


def partition_key(run_id: str, segment: int) -> str:
    """``partition_key("pc-s0", 3) == "pc-s0/seg-0003"``."""
    if segment < 0:
        raise SegmentError(f"segment {segment}: segments count from 0")
    return f"{run_id}/seg-{segment:04d}"


def parse_partition_key(key: str) -> tuple[str, int]:
    """``"pc-s0/seg-0003" -> ("pc-s0", 3)``."""
    m = SEGMENT_RE.match(key)
    if m is None:
        raise SegmentError(
            f"partition {key!r} is not a training segment key. Fix: segments are named <run>/seg-<NNNN> "
            "(e.g. pc-s0/seg-0000) and are added by the start_run job, not by hand."
        )
    return m["run"], int(m["k"])


@dataclass(frozen=True)
class SegmentPlan:
    """How a run of ``total_steps`` steps is cut into segments of ``segment_steps``."""

    segment_steps: int
    total_steps: int

    def __post_init__(self) -> None:
        if self.segment_steps < 1:
            raise SegmentError(f"segment_steps={self.segment_steps}: a segment trains at least one step")
        if self.total_steps < 1:
            raise SegmentError(f"total_steps={self.total_steps}: a run trains at least one step")

    @property
    def num_segments(self) -> int:
        return -(-self.total_steps // self.segment_steps)

    def bounds(self, segment: int) -> tuple[int, int]:
        """(first, last) step of ``segment``, both inclusive."""
        if not 0 <= segment < self.num_segments:
            raise SegmentError(f"segment {segment}: this run has segments 0..{self.num_segments - 1}")
        first = segment * self.segment_steps + 1  # steps count from 1
        return first, min(first - 1 + self.segment_steps, self.total_steps)

    def all_bounds(self) -> list[tuple[int, int]]:
        return [self.bounds(k) for k in range(self.num_segments)]


def resume_step(first: int, last: int, checkpoints: Sequence[int], done: bool) -> int:
    """The checkpoint (step after which it was taken; 0 = the base policy) a segment ``first..last`` starts from.

    A segment that is done is recomputed from the previous segment's checkpoint (``first - 1``): re-materializing
    replaces its rows rather than skipping. One that failed or was killed resumes from its newest checkpoint inside
    the segment. Example: steps 11..20, checkpoints [5, 10, 15]: a retry starts after step 15; a re-materialization
    of the done segment after step 10. Raises when the previous segment's checkpoint is missing."""
    have = set(checkpoints)
    if first > 1 and (first - 1) not in have:
        raise SegmentError(
            f"no checkpoint after step {first - 1}: the previous segment is not done. Fix: materialize it first "
            "(the sensor advances a run's segments in order)."
        )
    if done:
        return first - 1
    inside = [s for s in have if first - 1 <= s < last]
    return max(inside, default=first - 1)


# ---- the sensor's decisions -------------------------------------------------------------------------------------
class Action(enum.Enum):
    REQUEST = "request"  # launch the segment
    WAIT = "wait"  # a segment of this run is in flight
    PAUSE = "pause"  # too many consecutive failures: stop advancing, record why
    FINISH = "finish"  # every segment is done
    SKIP = "skip"  # paused, finished or failed by the user: nothing to do


@dataclass(frozen=True)
class SegmentView:
    """What the sensor knows of one segment: the store's row."""

    segment: int
    status: str  # planned | running | done | failed | stopped
    attempts: int = 0
    consecutive_failures: int = 0
    error: str | None = None


@dataclass(frozen=True)
class RunView:
    run_id: str
    status: str  # the store's run status: running | paused | finished | failed
    segments: tuple[SegmentView, ...]
    in_flight: bool  # a Dagster run training one of its segments is queued or running, or a process writes it
    busy: str = ""  # what is in flight, in words (the WAIT decision's reason)
    used_run_keys: frozenset[str] = frozenset()  # run keys the sensor's earlier requests for this run used


@dataclass(frozen=True)
class SensorDecision:
    run_id: str
    action: Action
    reason: str
    segment: int | None = None
    run_key: str | None = None

    @property
    def partition_key(self) -> str | None:
        return None if self.segment is None else partition_key(self.run_id, self.segment)


def run_key(run_id: str, segment: int, attempts: int, used: frozenset[str] | set[str] = frozenset()) -> str:
    """The sensor's run key for the next attempt of a segment: ``<run>/<k>``, then ``<run>/<k>/retry-<n>`` with ``n``
    = ``attempts``, or the first ``n`` above it whose key is not in ``used`` (Dagster would skip a used key)."""
    n = attempts
    while True:
        key = f"{run_id}/{segment}" if n == 0 else f"{run_id}/{segment}/retry-{n}"
        if key not in used:
            return key
        n += 1


def decide(run: RunView, max_failures: int) -> SensorDecision:
    """The sensor's decision for one run (see the module docstring)."""
    if run.status in ("paused", "finished"):
        return SensorDecision(run.run_id, Action.SKIP, f"run is {run.status}")
    if not run.segments:
        return SensorDecision(run.run_id, Action.SKIP, "run has no segment plan (not started by start_run)")
    if run.in_flight:
        return SensorDecision(run.run_id, Action.WAIT,
                              "a segment of this run is in flight" + (f": {run.busy}" if run.busy else ""))
    nxt = next((s for s in run.segments if s.status != "done"), None)
    if nxt is None:
        return SensorDecision(run.run_id, Action.FINISH, f"all {len(run.segments)} segments are done")
    if nxt.consecutive_failures >= max_failures:
        return SensorDecision(
            run.run_id, Action.PAUSE,
            f"segment {segment_name(nxt.segment)} failed {nxt.consecutive_failures} times in a row (limit {max_failures}); last "
            f"error: {nxt.error or 'unknown'}. Fix the cause, then re-materialize {partition_key(run.run_id, nxt.segment)}.",
            segment=nxt.segment,
        )
    if nxt.status == "running":
        # The store says running but nothing is in flight: the process died without recording it.
        return SensorDecision(
            run.run_id, Action.REQUEST, f"segment {segment_name(nxt.segment)} was interrupted; resuming it from its last checkpoint",
            segment=nxt.segment, run_key=run_key(run.run_id, nxt.segment, nxt.attempts, run.used_run_keys),
        )
    what = {"failed": "retrying", "stopped": "resuming (from its checkpoint) the stopped"}.get(nxt.status, "next")
    return SensorDecision(
        run.run_id, Action.REQUEST, f"{what} segment {segment_name(nxt.segment)} of {len(run.segments)}",
        segment=nxt.segment, run_key=run_key(run.run_id, nxt.segment, nxt.attempts, run.used_run_keys),
    )

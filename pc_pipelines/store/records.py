"""The store's plain records: a run's :class:`RunRecord` as registered, and what a reading session found
(:class:`StoreScan`, its :class:`StepProblem` rows)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    family: str
    method: str
    preset: str
    seed: int
    config: dict[str, Any]
    config_hash: str
    kind: str
    lineage: dict[str, Any] | None = None

    @classmethod
    def for_config(cls, config: Any, run_id: str, kind: str, lineage: dict[str, Any] | None = None) -> RunRecord:
        """The record of a run of a resolved ``RunConfig`` (typed loosely: the store does not import the config)."""
        return cls(
            run_id=run_id,
            family=config.family,
            method=config.method,
            preset=config.preset,
            seed=config.seed,
            config=config.to_dict(),
            config_hash=config.config_hash,
            kind=kind,
            lineage=lineage,
        )


@dataclass(frozen=True)
class StepProblem:
    """A step the store should have and cannot serve: ``damaged`` (its directory fails its manifest; left out of
    every query), ``missing`` (no directory and no catalog rows: a gap in the run's step numbers)."""

    run_id: str
    step: int
    kind: str
    detail: str
    path: str | None
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "step": self.step, "kind": self.kind, "detail": self.detail,
                "path": self.path, "fix": self.fix}


PROBLEM_SCHEMA = pa.schema([("run_id", pa.string()), ("step", pa.int64()), ("kind", pa.string()),
                            ("detail", pa.string()), ("path", pa.string()), ("fix", pa.string())])


@dataclass
class StoreScan:
    """What one reading session found: the verified step files per table, and the problems."""

    files: dict[str, list[str]]
    problems: list[StepProblem]
    runs: int
    steps_checked: int

"""The store and the checkpoint storage."""


from abc import abstractmethod
from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from pc_pipelines.run.checkpoints import latest_checkpoint
from pc_pipelines.store import Store


class StoreResource(ConfigurableResource):
    """The DuckDB store every run writes to (step logs go to ``<path>.runs/``)."""

    path: str = Field(default="runs/pc.duckdb", description="The store's DuckDB catalog file.")

    def get(self, vacuum: bool = True) -> Store:
        """The store, created or upgraded if needed. ``vacuum`` deletes compacted step files only of the runs this
        process holds the writer lock of (``Store.init``), never another run's (issue 54's vacuum race)."""
        store = Store(self.path)
        store.init(vacuum=vacuum)
        return store


class CheckpointResource(ConfigurableResource):
    """Where a run's directory (checkpoints, TensorBoard events) lives."""

    @abstractmethod
    def run_dir(self, run_id: str) -> Path: ...

    def runs_root(self) -> Path:
        return self.run_dir("_").parent

    def latest_step(self, run_id: str) -> int | None:
        """The last completed step of the run's newest complete checkpoint (None: no checkpoint yet)."""
        latest = latest_checkpoint(self.run_dir(run_id) / "checkpoints")
        return latest[0] if latest else None


class LocalCheckpointResource(CheckpointResource):
    """Run directories on the local file system: ``<root>/<run_id>/``."""

    root: str = Field(default="runs", description="Directory holding one sub-directory per run.")

    def run_dir(self, run_id: str) -> Path:
        return Path(self.root).resolve() / run_id

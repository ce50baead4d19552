"""What the code needs to know about one dataset: :class:`DatasetSpec`, the entry of the dataset registry
(:mod:`.registry`). A dataset's module defines its spec next to its loading and preparing code; the registry lists
the specs. This module imports nothing but the standard library, so every dataset module can import it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRAINING = "training"
"""A run trains on it (start_run's ``dataset``); its held-out split, if any, is one of the run's eval sets."""
EVAL = "eval"
"""Evaluation sets only: every run on a prepared dataset is also evaluated on it (the benchmarks)."""
ROLES = (TRAINING, EVAL)

CONFIG_HELP = {
    "heldout": "Rows of the held-out evaluation split (0: none). Must leave training rows.",
    "seed": "Seed of the held-out split: the rows with the smallest sha256(f'{seed}:{id}') are held out, independent "
            "of the order of rows in the file.",
    "gold_workers": "Grader worker processes for checking the gold answers (default: automatic, the idle cores for "
                    "4,000+ distinct golds).",
}
"""The descriptions of a prepared dataset's asset config fields, unless its spec's ``config_help`` says otherwise."""


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: its name, how it is prepared, where its prepared files live and how a run loads its task.

    A dataset with ``load`` and ``prepare`` is prepared by the generic data asset
    (``pc_pipelines_dagster/assets/data.py`` builds its asset, config and Great Expectations checks from this spec;
    ``DataResource`` gets its ``<name>_path`` setting, the code location reads ``PC_<NAME>_PATH``); one without has an
    asset written by hand (``asset`` names it)."""

    name: str
    """The dataset's name: start_run's ``dataset``, its asset's key (unless ``asset``), its prepared file's stem."""
    title: str
    """Its name in messages, e.g. ``DeepMath-103K``."""
    description: str
    """What it is (the generic asset's description)."""
    role: str = TRAINING
    """:data:`TRAINING` or :data:`EVAL`."""
    asset: str | None = None
    """The Dagster asset that prepares it, when its key is not ``name`` (the embedded task: ``arith_task``)."""
    location: str | None = None
    """Its prepared files under the data directory (default ``<name>.parquet``, with ``<name>.quarantine.parquet``
    and ``<name>.stats.json`` beside it)."""
    load: Callable[[str | None], Any] | None = None
    """``load(path)``: the raw rows (a pyarrow Table) from the local copy at ``path`` (``DataResource.<name>_path``;
    None when unset: raise :class:`~.readers.DatasetError` saying how to provide it)."""
    prepare: Callable[..., Any] | None = None
    """``prepare(table, heldout=, seed=, gold_workers=)``: a :class:`~.prepare.PreparedDataset` of source ``name``
    (usually :func:`~.prepare.prepare_rows`: filters, quarantine, held-out split)."""
    heldout: int = 0
    """Rows held out by default (the asset config's ``heldout``)."""
    forbid_binary: bool = False
    """Its checks include ``no_binary_answers`` (its ``prepare`` removes yes/no/true/false answers)."""
    min_kept_fraction: float = 0.9
    """Default lower bound of its ``row_count_in_range`` check, as a fraction of the rows read."""
    config_help: Mapping[str, str] = field(default_factory=dict)
    """Descriptions of its asset's config (keys of :data:`CONFIG_HELP`, plus ``config`` and ``checks``: the config
    classes' docstrings) where the generic ones do not fit."""
    task: Callable[[Any, Path], Any] | None = None
    """``task(run_config, data_dir)``: the run's :class:`~.task.TaskData`, or None when :func:`~pc_pipelines.run.
    prepare_run` builds it (the embedded task). None here: the prepared files under ``data_dir``
    (:func:`~.prepared_task.load_prepared_task`: the ``train`` rows, the ``heldout`` rows and the benchmarks)."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise ValueError(f"dataset name {self.name!r}: use lower-case letters, digits and _ (it names an asset, a "
                             "file and a setting), e.g. 'gsm8k'.")
        if self.role not in ROLES:
            raise ValueError(f"dataset {self.name!r}: role={self.role!r}; use one of {ROLES}.")
        if (self.load is None) != (self.prepare is None):
            raise ValueError(f"dataset {self.name!r}: give both load and prepare (the generic asset), or neither (an "
                             "asset of its own).")
        unknown = set(self.config_help) - {*CONFIG_HELP, "config", "checks"}
        if unknown:
            raise ValueError(f"dataset {self.name!r}: config_help has unknown keys {sorted(unknown)}.")

    @property
    def asset_key(self) -> str:
        """The key of the Dagster asset that prepares it."""
        return self.asset or self.name

    @property
    def generic(self) -> bool:
        """Prepared by the generic data asset (it has ``load`` and ``prepare``)."""
        return self.load is not None

    @property
    def path_setting(self) -> str | None:
        """The ``DataResource`` setting of its local copy (generic datasets only)."""
        return f"{self.name}_path" if self.generic else None

    @property
    def env_var(self) -> str | None:
        """The environment variable the code location maps onto :attr:`path_setting`."""
        return f"PC_{self.name.upper()}_PATH" if self.generic else None

    def path(self, data_dir: str | Path) -> Path:
        """Its prepared file (or directory) under ``data_dir``."""
        return Path(data_dir) / (self.location or f"{self.name}.parquet")

    def help(self, key: str) -> str:
        """The description of config field ``key`` (:data:`CONFIG_HELP` unless ``config_help`` has its own)."""
        return self.config_help.get(key) or CONFIG_HELP[key]

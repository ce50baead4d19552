"""Where the real datasets are. Nothing is downloaded: each path points at a local Parquet / JSONL file or a
``datasets.save_to_disk`` directory; an asset whose path is unset fails saying how to set it.

``DataResource`` has one ``<name>_path`` setting per dataset of the registry prepared by the generic data asset
(:mod:`pc_pipelines.data.registry`: ``deepmath_path``, ``polaris_path``, ...), built when this module is imported,
then the benchmarks' settings and ``out_dir``."""

from collections.abc import Mapping

from dagster import ConfigurableResource
from pydantic import Field, create_model

from pc_pipelines.data.registry import datasets


class _DataSettings(ConfigurableResource):
    """What every ``DataResource`` has besides its fields."""

    def path_of(self, dataset: str) -> str | None:
        """The local copy of generic dataset ``dataset`` (its ``<name>_path`` setting)."""
        return getattr(self, f"{dataset}_path", None)


def _path_fields() -> dict:
    return {
        spec.path_setting: (str | None, Field(
            default=None, description=f"{spec.title}: a local Parquet/JSONL file or a `datasets` directory."))
        for spec in datasets() if spec.generic
    }


DataResource = create_model(
    "DataResource",
    __base__=_DataSettings,
    __module__=__name__,
    **_path_fields(),
    benchmarks_dir=(str | None, Field(
        default=None,
        description="Directory with <benchmark>/test.jsonl evaluation sets. Unset: the six sets shipped with the "
        "package (pc_pipelines/data/eval_sets, whose README lists sources, licenses and sha256).",
    )),
    verify_benchmarks=(bool, Field(
        default=True,
        description="Refuse a benchmark file whose sha256 is not the shipped copy's (naming the file). False: "
        "evaluate on another version of the files, on purpose.",
    )),
    out_dir=(str, Field(default="runs/data", description="Where prepared datasets and quarantines are written.")),
)


def data_paths(env: Mapping[str, str]) -> dict[str, str | None]:
    """The ``<name>_path`` settings from the environment (``PC_<NAME>_PATH``, unset or empty: None), for the datasets
    ``DataResource`` was built with (one registered after this module was imported has no setting)."""
    return {spec.path_setting: env.get(spec.env_var) or None for spec in datasets()
            if spec.generic and spec.path_setting in DataResource.model_fields}

"""Where the real datasets are. Nothing is downloaded: each path points at a local Parquet / JSONL file or a
``datasets.save_to_disk`` directory; an asset whose path is unset fails saying how to set it."""


from dagster import ConfigurableResource
from pydantic import Field


class DataResource(ConfigurableResource):
    deepmath_path: str | None = Field(
        default=None, description="DeepMath-103K: a local Parquet/JSONL file or a `datasets` directory."
    )
    polaris_path: str | None = Field(
        default=None, description="Polaris-53K: a local Parquet/JSONL file or a `datasets` directory."
    )
    benchmarks_dir: str = Field(
        default="../shared/data/benchmarks", description="Directory with <benchmark>/test.jsonl evaluation sets."
    )
    out_dir: str = Field(default="runs/data", description="Where prepared datasets and quarantines are written.")

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
    benchmarks_dir: str | None = Field(
        default=None,
        description="Directory with <benchmark>/test.jsonl evaluation sets. Unset: the six sets shipped with the "
        "package (pc_pipelines/data/eval_sets, whose README lists sources, licenses and sha256).",
    )
    verify_benchmarks: bool = Field(
        default=True,
        description="Refuse a benchmark file whose sha256 is not the shipped copy's (naming the file). False: "
        "evaluate on another version of the files, on purpose.",
    )
    out_dir: str = Field(default="runs/data", description="Where prepared datasets and quarantines are written.")

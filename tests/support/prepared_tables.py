"""A prepared-dataset table for the expectation tests (imported by both of them)."""

import pyarrow as pa

from pc_pipelines.data.prepare import PREPARED_SCHEMA


def table(ids, problems, answers) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "id": ids,
            "problem": problems,
            "answer": answers,
            "difficulty": pa.array([None] * n, pa.float64()),
            "source": ["deepmath"] * n,
            "split": ["train"] * n,
            "row_index": pa.array(range(n), pa.int64()),
        },
        schema=PREPARED_SCHEMA,
    )

"""Fixtures shared by the data tests: the DeepMath rows as a table, and that table prepared."""

import pyarrow as pa
import pytest
from deepmath_rows import deepmath_records

from pc_pipelines.data.deepmath import prepare_deepmath


@pytest.fixture(scope="module")
def deepmath_table():
    return pa.Table.from_pylist(deepmath_records())


@pytest.fixture(scope="module")
def prepared(deepmath_table, grader):
    return prepare_deepmath(deepmath_table, heldout=5, seed=0, grader=grader)

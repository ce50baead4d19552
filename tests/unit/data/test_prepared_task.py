"""A prepared dataset as the trainer's task data (pc_pipelines.data.prepared_task)."""

import pyarrow as pa
import pytest
from deepmath_rows import TEMPLATE

from pc_pipelines.data.prepared_task import to_task_data


def test_to_task_data(prepared):
    task = to_task_data(prepared, TEMPLATE)
    rows = prepared.rows.to_pylist()
    train = [r for r in rows if r["split"] == "train"]
    held = [r for r in rows if r["split"] == "heldout"]
    assert len(task.prompts) == len(task.golds) == 19
    assert task.prompts[0] == TEMPLATE.format(question=train[0]["problem"])
    assert task.prompts[0].startswith("What is $1+1$? Let's think step by step") and task.prompts[0].endswith(
        "\\boxed{}."
    )
    assert task.golds == [r["answer"] for r in train]
    assert [e.name for e in task.eval_sets] == ["heldout"]
    assert task.eval_sets[0].golds == [r["answer"] for r in held]
    bench = pa.table({"problem": ["1+2?"], "answer": ["3"]})
    task2 = to_task_data(prepared.rows, TEMPLATE, eval_name="deepmath_heldout", eval_tables={"aime24": bench})
    assert [e.name for e in task2.eval_sets] == ["deepmath_heldout", "aime24"]
    assert task2.eval_sets[1].prompts == [TEMPLATE.format(question="1+2?")]
    with pytest.raises(ValueError, match="placeholder"):
        to_task_data(prepared, "no placeholder")

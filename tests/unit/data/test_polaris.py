"""Polaris preparation (pc_pipelines.data.polaris): difficulty from its pass-rate fractions, and stats."""

import pyarrow as pa
import pyarrow.parquet as pq
from deepmath_rows import TEMPLATE

from pc_pipelines.data.polaris import load_polaris, prepare_polaris
from pc_pipelines.data.prepared_task import to_task_data


def test_polaris_difficulty_and_stats(tmp_path, grader):
    rows = [
        {"problem": "Find $x$ if $2x = 14$.", "answer": "7", "difficulty": "7/8"},
        {"problem": "Compute $3^2$.", "answer": "9", "difficulty": "8/8"},
        {"problem": "Is 5 odd?", "answer": "Yes", "difficulty": "0/8"},  # no binary filter for Polaris
        {"problem": "Sum of roots of $x^2-5x+6$?", "answer": "5", "difficulty": "hard"},  # kept, null
        {"problem": "Area of a unit circle?", "answer": "\\pi", "difficulty": None},
        {"problem": "Half of 1?", "answer": "\\frac{1}{2}", "difficulty": " 3 / 4 "},
        {"problem": "Bad gold", "answer": "\\frac{", "difficulty": "1/8"},
        {"problem": "Compute $3^2$.", "answer": "9", "difficulty": "8/8"},  # duplicate
        {"problem": "Ratio by zero?", "answer": "1", "difficulty": "1/0"},  # kept, null
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "polaris.parquet")
    p = prepare_polaris(load_polaris(tmp_path / "polaris.parquet"), grader=grader)
    assert p.rows.column("difficulty").to_pylist() == [0.875, 1.0, 0.0, None, None, 0.75, None]
    assert p.rows.column("answer").to_pylist() == ["7", "9", "Yes", "5", "\\pi", "\\frac{1}{2}", "1"]
    assert set(p.rows.column("split").to_pylist()) == {"train"}
    s = p.stats
    assert (s["rows_in"], s["kept"], s["quarantined"], s["difficulty_unparsed"]) == (9, 7, 2, 2)
    assert s["quarantined_by_reason"] == {"empty_problem": 0, "empty_answer": 0, "duplicate_problem": 1,
                                          "unparsable_answer": 1}
    assert "binary_removed" not in s and (s["train"], s["heldout"]) == (7, 0)
    assert all(i.startswith("polaris-") for i in p.rows.column("id").to_pylist())
    task = to_task_data(p, TEMPLATE)
    assert len(task.prompts) == 7 and task.eval_sets == []
    held = prepare_polaris(load_polaris(tmp_path / "polaris.parquet"), heldout=2, seed=5, grader=grader)
    assert held.stats["heldout"] == 2 and held.rows.column("split").to_pylist().count("heldout") == 2

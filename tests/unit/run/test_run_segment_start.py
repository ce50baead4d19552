"""How a segment opens its run is one value (``start``: resume, new or overwrite), not a pair of flags the driver
reconciles: ``pilot-commit train`` maps ``--resume`` / ``--overwrite`` to it (refusing both at once), and a value
that cannot go with ``from_step`` (a replay restores a checkpoint of the run) is refused before the run is
touched: no lock file, no store, no run directory."""

from __future__ import annotations

import pytest

from pc_pipelines.config import resolve
from pc_pipelines.data.task import EvalSet, TaskData
from pc_pipelines.errors import RunError
from pc_pipelines.run import TrainingRun, run_segment
from pc_pipelines.store import Store


def a_run(tmp_path) -> TrainingRun:
    cfg = resolve("embedded", {"task.num_prompts": 8, "allocator.train_batch": 4}, method="grpo", seed=1)
    task = TaskData([f"p{i}" for i in range(8)], [str(i) for i in range(8)], [EvalSet("toy", ["q"], ["a"])])
    return TrainingRun("opened", cfg, tmp_path / "runs" / "opened", tmp_path / "no-policy", task)


@pytest.mark.parametrize(("start", "says"), [
    ("overwrite", "from_step=0 restores a checkpoint of the run: it needs start='resume', not 'overwrite'"),
    ("new", "from_step=0 restores a checkpoint of the run: it needs start='resume', not 'new'"),
])
def test_a_start_that_cannot_go_with_from_step_is_refused_before_the_run_is_touched(tmp_path, start, says):
    store = Store(tmp_path / "pc.duckdb")
    with pytest.raises(RunError) as err:
        run_segment(a_run(tmp_path), store, until_step=1, from_step=0, start=start)
    assert str(err.value) == says + "."
    assert list(tmp_path.iterdir()) == []  # no store, no run directory, no lock file


def test_an_unknown_start_is_refused(tmp_path):
    with pytest.raises(RunError, match=r"start='again': use one of \('resume', 'new', 'overwrite'\)"):
        run_segment(a_run(tmp_path), Store(tmp_path / "pc.duckdb"), until_step=1, start="again")
    assert list(tmp_path.iterdir()) == []

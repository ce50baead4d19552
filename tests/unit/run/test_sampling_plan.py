"""A run keeps one sampling plan from start to end (pc_pipelines/run/local.py: keep_sampling_plan)."""

from __future__ import annotations

import json

import pytest

from pc_pipelines.errors import RunError
from pc_pipelines.rollout import sampling_plan
from pc_pipelines.run.local import SAMPLING_PLAN, keep_sampling_plan

PLAN = {"engine": "transformers", "max_batch_sequences": 16, "device": "cpu"}


def test_the_first_segment_writes_the_plan_and_later_ones_must_match(tmp_path):
    run_dir = tmp_path / "r"
    keep_sampling_plan(run_dir, PLAN)
    assert json.loads((run_dir / SAMPLING_PLAN).read_text()) == PLAN
    keep_sampling_plan(run_dir, dict(PLAN))  # the same plan (a Ray engine at the same chunk size has it): fine
    with pytest.raises(RunError, match=r"r: its rollouts were drawn with .*\"max_batch_sequences\": 16.*this engine "
                                       r"draws with .*\"max_batch_sequences\": 8.*Fix: use the run's engine settings"):
        keep_sampling_plan(run_dir, {**PLAN, "max_batch_sequences": 8})
    assert json.loads((run_dir / SAMPLING_PLAN).read_text()) == PLAN  # the refusal changed nothing
    keep_sampling_plan(run_dir, None)  # an engine that does not say: nothing checked


def test_an_unreadable_plan_is_refused_with_the_fix(tmp_path):
    (tmp_path / SAMPLING_PLAN).write_text("{not json")
    with pytest.raises(RunError, match=r"unreadable.*Fix: write the engine settings the run started with"):
        keep_sampling_plan(tmp_path, PLAN)
    assert (tmp_path / SAMPLING_PLAN).read_text() == "{not json"


def test_engines_say_what_decides_their_draws():
    class Silent:
        pass

    class Saying:
        def sampling_plan(self):
            return {"engine": "x"}

    assert sampling_plan(Silent()) is None and sampling_plan(None) is None
    assert sampling_plan(Saying()) == {"engine": "x"}


def test_an_evaluation_with_other_engine_settings_warns_that_its_numbers_will_differ(tmp_path, caplog):
    from types import SimpleNamespace

    from pc_pipelines.run.checkpoint_eval import warn_if_other_plan

    class Engine:
        def __init__(self, plan):
            self.plan = plan

        def sampling_plan(self):
            return self.plan

    run = SimpleNamespace(run_id="r", run_dir=tmp_path)
    assert warn_if_other_plan(run, Engine(PLAN)) is False  # nothing recorded yet: nothing to compare
    keep_sampling_plan(tmp_path, PLAN)
    assert warn_if_other_plan(run, Engine(dict(PLAN))) is False and not caplog.records
    assert warn_if_other_plan(run, Engine(None)) is False  # an engine that does not say
    assert warn_if_other_plan(run, Engine({**PLAN, "max_batch_sequences": 8})) is True
    assert "will not equal the run's evaluation" in caplog.text and "Fix: evaluate with the run's engine" in caplog.text

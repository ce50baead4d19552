"""A segment's progress after each step: the counts, the rounding, seconds a step and the time left, and the line
the console prints with the same numbers."""

import pytest

from pc_pipelines.run.progress import SegmentProgress, duration
from pc_pipelines.run.records import StepRecord


def record(step: int, cumulative: int, sampled: int = 100, trained: int = 64, eval_accuracy=None) -> StepRecord:
    ledger = {"sampled_rollouts": sampled, "trained_rollouts": trained, "informative_share": 0.8754}
    return StepRecord(step=step, ledger=ledger, loss=-0.01, mean_reward=0.61239, reward_std=0.45611,
                      cumulative_rollouts=cumulative, timings={}, eval_accuracy=eval_accuracy)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_counts_rates_and_time_left_of_a_middle_segment():
    clock = Clock()
    # Segment seg-0001 of 3: steps 11..20 of a 30-step run.
    prog = SegmentProgress("r", 1, 3, 11, 20, 30, clock=clock)
    clock.t += 12.0
    p = prog.observe(record(11, 1_100))
    assert (p.segment_step, p.segment_steps, p.run_step, p.run_steps) == (1, 10, 11, 30)
    assert p.seconds_per_step == 12.0 and p.eta_s == 9 * 12.0
    clock.t += 8.0
    p = prog.observe(record(12, 1_200, eval_accuracy=0.71234))
    assert p.seconds_per_step == 10.0 and p.eta_s == 80.0  # (12 + 8) / 2 a step, 8 steps left
    meta = p.metadata()
    assert meta["progress"] == "r: segment seg-0001 of 3, step 2 of 10; run step 12 of 30"
    assert meta["segment"] == "seg-0001" and meta["segments"] == 3  # its partition key, as in the words
    assert meta["step"] == 12 == meta["run_step"]  # the stored step, on every screen
    assert (meta["mean_reward"], meta["reward_std"], meta["informative_share"], meta["eval_accuracy"]) == \
        (0.612, 0.456, 0.875, 0.712)
    assert meta["eta"] == "1 min 20 s" and meta["eta_s"] == 80
    assert meta["step_rollouts"] == 100 and meta["cumulative_rollouts"] == 1_200
    assert p.line() == ("step 2/10 of segment seg-0001 of 3 (run step 12/30): mean reward 0.612, reward std 0.456, informative "
                        "0.88, rollouts 100 (cumulative 1,200), 10.0 s/step, ETA 1 min 20 s, held-out accuracy 0.712")


def test_the_history_priors_skips_are_in_the_line_and_the_observation_only_when_it_skipped():
    clock = Clock()
    prog = SegmentProgress("r", 0, 1, 1, 10, 10, clock=clock)
    clock.t += 2.0
    rec = record(1, 100)
    rec.ledger.update(screened_by_prior=1234, prior_rollouts_saved=5678)
    p = prog.observe(rec)
    assert p.line().endswith(", ETA 18 s, skipped by prior 1,234 (pilots saved 5,678 rollouts)")
    meta = p.metadata()
    assert (meta["screened_by_prior"], meta["prior_rollouts_saved"]) == (1234, 5678)
    quiet = prog.observe(record(2, 200))
    assert "prior" not in quiet.line() and "screened_by_prior" not in quiet.metadata()


def test_last_step_has_no_time_left_and_no_eval_field_when_not_evaluated():
    clock = Clock()
    prog = SegmentProgress("r", 0, 1, 1, 1, 1, clock=clock)
    clock.t += 3.0
    meta = prog.observe(record(1, 100, trained=0)).metadata()
    assert meta["eta_s"] == 0 and meta["eta"] == "0 s" and "eval_accuracy" not in meta
    assert meta["mean_reward"] == 0.0  # nothing trained this step: no reward to show


def test_a_segment_outside_its_run_is_refused():
    with pytest.raises(ValueError, match="do not fit a run of 10 steps"):
        SegmentProgress("r", 0, 1, 5, 12, 10)


@pytest.mark.parametrize(("seconds", "text"), [(None, "-"), (0.4, "0 s"), (59.4, "59 s"), (65, "1 min 05 s"),
                                               (7_620, "2 h 07 min")])
def test_duration_reads_like_a_person_would_say_it(seconds, text):
    assert duration(seconds) == text

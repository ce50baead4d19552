"""pc_pipelines.evaluation: mean@k per set, a set's own k (AIME / AMC at mean@32), and the store rows."""

import json

import pytest

from pc_pipelines.data.evaluation_sets import BENCHMARK_SPECS, SMALL_SET_K
from pc_pipelines.data.prepared_task import to_task_data
from pc_pipelines.data.task import EvalSet
from pc_pipelines.evaluation import EvalResult, evaluate_sets
from pc_pipelines.rollout.base import FINISH_STOP, RequestOutput, Rollout

GRADER_TIMEOUT_S = 30.0  # the ``grader`` fixture's (tests/conftest.py)

class ScriptedEngine:
    """A fake engine (this is a unit test of evaluate_sets): rollout i of a request answers correctly iff
    i < correct[prompt]; it records the n of every request."""

    def __init__(self, correct: dict[str, int], gold: dict[str, str]):
        self.correct, self.gold, self.calls = correct, gold, []

    def generate(self, requests, params):
        self.calls.append([(r.prompt, r.n) for r in requests])
        return [RequestOutput([0], [Rollout([1], rf"\boxed{{{self.gold[r.prompt] if i < self.correct[r.prompt] else 'x'}}}",
                                            [0.0], FINISH_STOP) for i in range(r.n)]) for r in requests]


def test_a_set_with_its_own_k_is_sampled_and_averaged_with_it(grader):
    sets = [EvalSet("math500", ["m1", "m2"], ["1", "2"]), EvalSet("aime24", ["a1"], ["3"], k=32)]
    engine = ScriptedEngine({"m1": 3, "m2": 1, "a1": 8}, {"m1": "1", "m2": "2", "a1": "3"})
    res = evaluate_sets(engine, grader, sets, 4, 0.7, 1.0, 16, seed=0)
    assert engine.calls == [[("m1", 4), ("m2", 4), ("a1", 32)]]  # one call, each set at its own k
    assert res.accuracy == {"math500": pytest.approx(4 / 8), "aime24": pytest.approx(8 / 32)}
    assert (res.k_of("math500"), res.k_of("aime24")) == (4, 32)
    assert res.mean == pytest.approx((0.5 + 0.25) / 2)  # unweighted over sets
    rows = {r["benchmark"]: r for r in res.rows("run", 7)}
    assert (rows["math500"]["k"], rows["aime24"]["k"], rows["aime24"]["step"]) == (4, 32, 7)


def test_bad_k_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="aime24.*k=0.*training.eval_samples"):
        EvalSet("aime24", ["a"], ["1"], k=0)


def test_prepared_benchmarks_carry_mean_at_32_for_the_small_competition_sets():
    import pyarrow as pa

    assert {n for n, s in BENCHMARK_SPECS.items() if s.eval_k == SMALL_SET_K} == {"aime24", "aime25", "amc23"}
    train = pa.table({"problem": ["1+1", "2+2"], "answer": ["2", "4"], "split": ["train", "heldout"]})
    bench = pa.table({"problem": ["p"], "answer": ["1"]})
    task = to_task_data(train, "{question}", "heldout", eval_tables={"aime25": bench, "math500": bench, "mine": bench})
    assert [(s.name, s.k) for s in task.eval_sets] == [("heldout", None), ("aime25", 32), ("math500", None),
                                                        ("mine", None)]


def test_a_result_survives_the_json_an_evaluation_pod_reports():
    res = EvalResult({"aime24": 0.125, "math500": 0.5}, {"aime24": 30, "math500": 500}, 4, 0.7,
                     {"aime24": 32, "math500": 4})
    back = EvalResult.from_json(json.loads(json.dumps(res.to_json())))
    assert back == res and back.rows("r", 9) == res.rows("r", 9)
    assert [r["k"] for r in back.rows("r", 9)] == [32, 4]
    with pytest.raises(ValueError, match=r"without \['k_per_set'\].*Fix: run the same pc-pipelines version"):
        EvalResult.from_json({k: v for k, v in res.to_json().items() if k != "k_per_set"})

"""research/precision.py's pieces: its four runs and where two ledgers first part."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_precision():
    spec = importlib.util.spec_from_file_location("precision_bench", ROOT / "research/precision.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("precision_bench", mod)
    spec.loader.exec_module(mod)
    return mod


def test_four_runs_native_pair_first_and_only_the_scalar_ones_set_the_kernels():
    p = load_precision()
    jobs = p.jobs(seed=3, steps=60)
    assert [j.run_id for j in jobs] == ["precision-float32-native-s3", "precision-float64-native-s3",
                                        "precision-float32-default-s3", "precision-float64-default-s3"]
    assert [dict(j.env).get("ATEN_CPU_CAPABILITY") for j in jobs] == [None, None, "default", "default"]
    assert [j.overrides[0] for j in jobs] == ["training.dtype=float32", "training.dtype=float64"] * 2
    assert {j.preset for j in jobs} == {"bench"} and {j.steps for j in jobs} == {60}


def test_first_difference_is_the_first_step_that_differs_or_none():
    p = load_precision()
    a = [{"step": s, "loss": 0.5, "mean_reward": 0.25} for s in range(4)]
    b = [dict(r) for r in a]
    assert p.first_difference(a, b, "loss") is None
    b[2]["loss"] = 0.5 + 1e-12  # a last-bit difference counts
    b[3]["mean_reward"] = 0.3
    assert p.first_difference(a, b, "loss") == 2 and p.first_difference(a, b, "mean_reward") == 3

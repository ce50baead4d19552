"""`pilot-commit train`'s console without training: its --help offers only what train accepts (the training methods,
no simulator flags; a simulator-only method typed anyway is refused naming the fix), the closing block shows the
first and the last evaluated step (once when they are the same) with the final numbers, and transformers' own
progress bars are silenced while ours run, then restored. Real runs: tests/e2e/test_cli_train.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from pc_pipelines.allocation import METHODS, training_methods
from pc_pipelines.cli import build_parser, main
from pc_pipelines.cli.args import SIMULATOR_FLAGS
from pc_pipelines.cli.train import closing_lines, transformers_bars_off


def help_of(command: str) -> str:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command].format_help()


def test_train_help_offers_the_training_methods_and_no_simulator_flag():
    assert SIMULATOR_FLAGS == ("--prompts", "--spread")
    simulator_only = [m for m in METHODS if m not in training_methods()]
    assert simulator_only == ["oracle"]
    for command in ("train", "base-policy"):
        text = help_of(command)
        assert "oracle" not in text
        for flag in SIMULATOR_FLAGS:
            assert flag not in text, (command, flag)
    assert "{" + ",".join(training_methods()) + "}" in help_of("train")
    simulate = help_of("simulate")  # the simulator keeps them
    assert "oracle" in simulate and all(flag in simulate for flag in SIMULATOR_FLAGS)


@pytest.mark.parametrize("args", [["--method", "oracle"], ["--set", "allocator.method=oracle"]])
def test_a_simulator_only_method_is_still_refused_with_the_fix(args, tmp_path, capsys):
    assert main(["train", *args, "--out", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "method oracle is simulator-only. Fix: real training runs one of grpo, dapo, pc." in err
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_an_unknown_method_or_a_simulator_flag_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["train", "--method", "nope"])
    assert exc.value.code == 2 and "(choose from 'grpo', 'dapo', 'pc')" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--prompts", "5"])
    assert "unrecognized arguments: --prompts 5" in capsys.readouterr().err
    assert build_parser().parse_args(["simulate", "--prompts", "5", "--method", "oracle"]).prompts == 5


def rows(step: int, accs: list[float]) -> list[dict]:
    return [{"step": step, "benchmark": f"arith_d{i + 1}", "accuracy": a} for i, a in enumerate(accs)]


def closing(curve, last_step, checkpoint=Path("/runs/r/checkpoints/step-00000005")) -> list[str]:
    return closing_lines("r", 5, 1234, curve, last_step, 4, 0.7, checkpoint, Path("/runs/r/tensorboard"),
                         Path("/runs/my store/pc.duckdb"))


def test_the_closing_block_shows_the_first_and_the_last_evaluated_step(monkeypatch):
    """Steps 0 (before training) and 5 read "start" and "step 5": the stored steps (pc_pipelines/steps.py)."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")  # the scripts on PATH: bare names
    curve = rows(0, [0.5, 0.25]) + rows(2, [0.0, 0.0]) + rows(5, [0.75, 0.5])
    lines = closing(curve, {"step": 5, "mean_reward": 0.4375, "trained_rollouts": 64})
    assert lines == [
        "held-out accuracy (mean@4, T=0.7):",
        "  set             start     step 5",
        "  arith_d1        0.500      0.750",
        "  arith_d2        0.250      0.500",
        "  mean            0.375      0.625",
        "run r: 5 steps; final mean reward 0.438 (step 5); final eval accuracy 0.625 (step 5); 1,234 rollouts sampled",
        "checkpoint:  /runs/r/checkpoints/step-00000005",
        "tensorboard: tensorboard --logdir /runs/r/tensorboard",
        "store:       pilot-commit runs --store '/runs/my store/pc.duckdb'",  # a path to paste into a shell
    ]


def test_the_closing_block_shows_a_single_evaluation_once():
    lines = closing(rows(0, [0.5, 0.25]), {"step": 5, "mean_reward": 0.0, "trained_rollouts": 0})
    assert lines[1].split() == ["set", "start"]
    assert lines[2].split() == ["arith_d1", "0.500"] and lines[4].split() == ["mean", "0.375"]
    assert lines[5] == ("run r: 5 steps; final mean reward - (step 5 trained no group); final eval accuracy 0.375 "
                        "(start); 1,234 rollouts sampled")


def test_the_closing_block_without_any_evaluation_or_step():
    lines = closing([], None, checkpoint=None)
    assert lines[0] == "run r: 5 steps; no step trained yet; not evaluated; 1,234 rollouts sampled"
    assert lines[1] == "checkpoint:  none yet"


def test_a_set_missing_at_one_step_shows_a_dash_and_the_mean_of_the_others():
    curve = rows(0, [0.5, 0.25]) + rows(3, [1.0])
    lines = closing(curve, {"step": 3, "mean_reward": 1.0, "trained_rollouts": 8})
    assert lines[3].split() == ["arith_d2", "0.250", "-"] and lines[4].split() == ["mean", "0.375", "1.000"]


def test_transformers_bars_are_off_inside_and_restored_after():
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    with transformers_bars_off():
        assert not hf_logging.is_progress_bar_enabled()
        assert type(hf_logging.tqdm(range(2), desc="Loading weights")).__name__ == "EmptyTqdm"
    assert hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with transformers_bars_off():
            pass
        assert not hf_logging.is_progress_bar_enabled()  # off before: stays off
    finally:
        hf_logging.enable_progress_bar()

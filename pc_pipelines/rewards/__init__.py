"""Rewards: math-verify grading of boxed answers, timeout-safe and cached (docs/DESIGN.md section 2).

Importing this package is cheap: math-verify (and sympy) are imported on the first verification.
See ``pc_pipelines.rewards.math`` for the rules and the timeout design.
"""

from .extract import extract_boxed
from .math import (
    Grade,
    GradeOutcome,
    GraderStats,
    MathGrader,
    default_grader,
    math_reward,
)

__all__ = [
    "Grade",
    "GradeOutcome",
    "GraderStats",
    "MathGrader",
    "default_grader",
    "extract_boxed",
    "math_reward",
]

"""Every float field of every typed config refuses NaN and infinity, naming the field and the fix (issue 18).

Range checks written as ``x < 0`` let NaN through (comparisons with NaN are False): a NaN temperature made a run
that "succeeded" having trained nothing. The fields are found by type, so a float field added later is covered.
"""

from __future__ import annotations

import math
import typing
from dataclasses import fields, replace

import pytest

from pc_pipelines.allocation import AllocatorConfig
from pc_pipelines.config import ArithTaskConfig, PolicyConfig, SimConfig, TrainingConfig
from pc_pipelines.errors import ConfigError
from pc_pipelines.rollout.base import SamplingParams

CONFIGS = [AllocatorConfig, TrainingConfig, SimConfig, ArithTaskConfig, PolicyConfig]


def float_fields(cls) -> list[str]:
    hints = typing.get_type_hints(cls)
    return [f.name for f in fields(cls) if hints[f.name] is float or hints[f.name] == (float | None)]


CASES = [(cls, name, bad) for cls in CONFIGS for name in float_fields(cls)
         for bad in (math.nan, math.inf, -math.inf)]


def test_every_config_has_float_fields_found():
    found = {cls.__name__: float_fields(cls) for cls in CONFIGS}
    assert "temperature" in found["TrainingConfig"] and "lr" in found["TrainingConfig"]
    assert {"oversample", "p_lower", "p_upper", "p_solve", "survival_margin"} <= set(found["AllocatorConfig"])
    assert {"difficulty_mean", "local_rate", "global_rate"} <= set(found["SimConfig"])
    assert found["PolicyConfig"] == ["sft_lr", "sft_hold_lr", "sft_target", "sft_onset"] and found["ArithTaskConfig"] == ["sft_long_share"]


@pytest.mark.parametrize("cls,name,bad", CASES, ids=[f"{c.__name__}.{n}={b}" for c, n, b in CASES])
def test_nonfinite_float_fields_are_refused_naming_the_field(cls, name, bad):
    with pytest.raises(ConfigError) as e:
        replace(cls(), **{name: bad})
    msg = str(e.value)
    assert msg.startswith(f"{cls.__name__}.{name}=") and "must be a finite number" in msg and "Fix:" in msg


@pytest.mark.parametrize("name", ["temperature", "top_p"])
def test_sampling_params_refuse_nan(name):
    with pytest.raises(ValueError, match=f"SamplingParams.{name}=nan: must be a finite number. Fix"):
        SamplingParams(**{name: math.nan})

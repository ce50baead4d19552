"""Run ids (issue 18): one validator, a documented set, and every id the code generates is in it."""

from __future__ import annotations

import pytest

from pc_pipelines.config import available_presets, resolve
from pc_pipelines.store.names import RUN_ID_PATTERN, RunIdError, run_id_problem, validate_run_id


@pytest.mark.parametrize("good", ["a", "victim", "sim-pc-s0-1a2b3c4d", "paper-1.5b-deepmath-n128-pc-s3-abcdef12",
                                  "A.b_c-9", "9lives", "x" * 128])
def test_valid_run_ids(good):
    assert validate_run_id(good) == good
    assert run_id_problem(good) is None


@pytest.mark.parametrize("bad, why", [
    ("", "is empty"), ("*", "'*'"), ("[a-z]*", "'['"), ("?ictim", "'?'"), ("a/b", "'/'"), ("..", "starts with '.'"),
    (".hidden", "starts with '.'"), ("_schema", "starts with '_'"), ("-rf", "starts with '-'"), ("my run", "' '"),
    ("x" * 129, "129 characters"), ("é" * 200, "characters long"), ("a\x00b", "'\\x00'"), ("r{1,2}", "'{'"),
])
def test_invalid_run_ids_are_refused_naming_the_set_and_the_fix(bad, why):
    with pytest.raises(RunIdError) as exc:
        validate_run_id(bad, field="--run-name")
    msg = str(exc.value)
    assert msg.startswith("--run-name ") and why in msg, msg
    assert RUN_ID_PATTERN in msg and "Fix:" in msg
    assert len(msg) < 600  # a 255-byte name is shown shortened, never dumped whole


def test_every_default_run_id_of_every_preset_and_method_is_valid():
    for preset in available_presets():
        for method in ("grpo", "dapo", "pc"):
            for seed in (0, 17):
                rid = resolve(preset, method=method, seed=seed).default_run_id()
                assert run_id_problem(rid) is None, (preset, rid)

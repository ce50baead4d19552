"""Settings that would be silently ignored or fail mid-run are refused when the config is made (issue 40): PC's
eviction settings with GRPO / DAPO, ``return_share`` with strict eviction, an ``oversample`` whose b_g is no
count, a prompt template with a placeholder other than ``{question}``; and messages that quote what a user typed
stay short (:func:`~pc_pipelines.errors.brief_text`, the CLI's one-line argparse errors)."""

from __future__ import annotations

import pytest

from pc_pipelines.allocation import Allocator, check_config
from pc_pipelines.cli import build_parser
from pc_pipelines.config import OVERSAMPLE_MAX, AllocatorConfig, TrainingConfig, available_presets, resolve
from pc_pipelines.errors import ConfigError, brief_text, field_error, shell_command
from pc_pipelines_dagster.automation.jobs import StartRunConfig, check_start_run


# ---- PC's eviction settings with a method that has no pilots ----------------------------------------------------
@pytest.mark.parametrize("method", ["grpo", "dapo"])
@pytest.mark.parametrize("override", ["allocator.eviction_strategy", "allocator.return_share"])
def test_a_pc_eviction_setting_with_grpo_or_dapo_is_refused_like_n_pilot(method, override):
    value = "easy_pool" if override.endswith("strategy") else 0.5
    with pytest.raises(ConfigError) as err:
        resolve("simulator", {override: value}, method=method)
    text = str(err.value)
    assert text.startswith(f"--set {override}={value!r}") and f"a {method} run" in text
    assert text.endswith("Fix: drop it, or use --method pc.")
    with pytest.raises(ConfigError, match=r"--set allocator.n_pilot=4 \(or --n-pilot / --n-commit\) is a PC setting"):
        resolve("simulator", {"allocator.n_pilot": 4}, method=method)  # the refusal these follow


@pytest.mark.parametrize("method", ["grpo", "dapo", "oracle"])
def test_the_allocator_refuses_pc_eviction_settings_for_a_method_without_pilots(method):
    for change, name in (({"eviction_strategy": "easy_pool"}, "eviction_strategy"), ({"return_share": 0.5}, "return_share")):
        cfg = AllocatorConfig(method=method, **change)
        with pytest.raises(ConfigError) as err:
            check_config(cfg)
        assert str(err.value).startswith(f"AllocatorConfig.{name}=")
        assert f"a {method} run draws no pilots" in str(err.value) and "or set method=pc." in str(err.value)
        with pytest.raises(ConfigError, match=name):
            Allocator(cfg, 100)
    check_config(AllocatorConfig(method=method))  # the defaults count as not set


def test_return_share_with_strict_eviction_is_refused():
    with pytest.raises(ConfigError) as err:
        resolve("simulator", {"allocator.return_share": 0.25})
    assert str(err.value) == (
        "--set allocator.return_share=0.25 is an easy_pool setting, but allocator.eviction_strategy='strict': no "
        "solved prompt comes back, so it would be ignored. Fix: drop it, or add --set "
        "allocator.eviction_strategy=easy_pool.")
    with pytest.raises(ConfigError, match=r"AllocatorConfig.return_share=0.3: is an easy_pool setting.*Fix: drop it"):
        check_config(AllocatorConfig(return_share=0.3))
    easy = resolve("simulator", {"allocator.return_share": 0.25, "allocator.eviction_strategy": "easy_pool"})
    assert (easy.allocator.eviction_strategy, easy.allocator.return_share) == ("easy_pool", 0.25)
    check_config(easy.allocator)


def test_every_preset_resolves_for_every_method_and_the_pc_settings_of_a_preset_are_not_refused():
    """Presets spell out strict eviction and return_share 0.125 (paper.yaml): that is not "set"; a GRPO run of a
    preset keeps its hash."""
    for preset in available_presets():
        for method in ("grpo", "dapo", "pc", "oracle"):
            check_config(resolve(preset, {}, method=method).allocator)
    paper = resolve("paper", {}, method="grpo")
    assert (paper.allocator.eviction_strategy, paper.allocator.return_share) == ("strict", 0.125)


def test_the_start_run_job_refuses_a_pc_eviction_setting_for_grpo():
    config = StartRunConfig(method="grpo", preset="embedded", overrides=["allocator.eviction_strategy=easy_pool"])
    with pytest.raises(ConfigError) as err:
        check_start_run(config)
    assert str(err.value).startswith("start_run config overrides: --set allocator.eviction_strategy='easy_pool' is "
                                     "a PC setting: a grpo run")
    assert str(err.value).endswith("Fix: drop it, or use --method pc.")


# ---- oversample ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [1e308, 1e20, OVERSAMPLE_MAX + 0.5, 0.5, True])
def test_oversample_outside_1_to_100_is_refused_naming_the_range(value):
    with pytest.raises(ConfigError) as err:
        AllocatorConfig(oversample=value)
    assert str(err.value).startswith("AllocatorConfig.oversample=")
    assert "Fix: set oversample in [1, 100], e.g. 3 as the paper." in str(err.value)


def test_oversample_at_its_bounds_makes_a_count():
    assert AllocatorConfig(oversample=OVERSAMPLE_MAX, train_batch=128).sampling_batch == 12_800
    assert AllocatorConfig(oversample=1, train_batch=128).sampling_batch == 128


# ---- prompt_template ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("template", "says"), [
    ("{question}{x}", "has the placeholder '{x}', but only {question} is filled in. Fix: drop it, or write {{ and }}"),
    ("{question} {}", "has the placeholder '{}', but only {question} is filled in"),
    ("{0} {question}", "has the placeholder '{0}'"),
    ("{question.upper}", "has the placeholder '{question.upper}'"),
    ("{question} \\boxed{", "has a brace that does not pair (Single '{' encountered in format string). Fix: write {{ and }}"),
    ("{question", "has a brace that does not pair (expected '}' before end of string)"),
    ("{question} }", "has a brace that does not pair (Single '}' encountered in format string)"),
    ("{question:{x}}", "does not format with a question (KeyError"),
    ("Solve it.", "has no {question} placeholder. Fix: include {question} where the problem goes."),
])
def test_a_prompt_template_with_another_placeholder_or_a_lone_brace_is_refused(template, says):
    with pytest.raises(ConfigError) as err:
        TrainingConfig(prompt_template=template)
    assert str(err.value).startswith(f"TrainingConfig.prompt_template={template!r}: ") and says in str(err.value)


def test_good_prompt_templates_are_kept():
    for template in (TrainingConfig().prompt_template, "{question}", "Q: {question}\nA: \\boxed{{}}", "{question!s}"):
        assert TrainingConfig(prompt_template=template).prompt_template == template


def test_a_config_error_quotes_a_long_value_cut():
    class Holder:
        prompt_template = "x" * 100_000

    text = str(field_error(Holder(), "prompt_template", "why", "fix"))
    assert text.startswith("Holder.prompt_template='xxx") and len(text) < 200 and "(100,000 characters)" in text and text.endswith("Fix: fix.")
    with pytest.raises(ConfigError) as err:
        TrainingConfig(prompt_template="{question}{" + "y" * 100_000 + "}")
    assert len(str(err.value)) < 400 and "(100,002 characters)" in str(err.value)


# ---- what the CLI echoes -----------------------------------------------------------------------------------------
def test_brief_text_cuts_long_words_escapes_control_characters_and_caps_the_whole():
    assert brief_text("unrecognized arguments: --run " + "a" * 100_000) == (
        "unrecognized arguments: --run " + "a" * 80 + "... (100,000 characters)")
    assert brief_text("invalid choice: 'a\nb'") == "invalid choice: 'a\\nb'"
    assert brief_text("x " * 10_000).endswith("... (20,000 characters)") and len(brief_text("x " * 10_000)) < 700
    kept = "argument --run-name: --run-name '" + "a" * 77 + "...' is 100000 characters long"
    assert brief_text(kept) == kept  # what brief() already cut is left alone


def test_an_argparse_error_is_one_short_line_with_the_fix(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["report", "--store", "s.duckdb", "--run", "r" * 100_000])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and len(err) < 300
    assert err == ("pilot-commit: error: unrecognized arguments: --run " + "r" * 80 + "... (100,000 characters). "
                   f"Fix: see `{shell_command('pilot-commit', 'report', '--help')}`.\n")

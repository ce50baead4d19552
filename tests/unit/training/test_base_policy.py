"""Loading a policy runs nothing that comes with it (issue 31): a directory asking for its own code (an ``auto_map``)
is refused before transformers reads it, and pickle-format weights holding more than tensors are refused with our
fix, not torch's advice to load them with ``weights_only=False``. Clean pickle-format weights still load (tensors
only, ``weights_only=True``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from pickle_payload import Payload
from safetensors.torch import load_file

from pc_pipelines.errors import RunError
from pc_pipelines.training.base_policy import load_policy, refuse_custom_code


def custom_code(policy: Path, marker: Path, where: str = "config.json") -> None:
    """Give ``policy`` an auto_map to a module of its own that would create ``marker`` when imported."""
    (policy / "modeling_custom.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    cfg = json.loads((policy / where).read_text())
    key = "AutoModelForCausalLM" if where == "config.json" else "AutoTokenizer"
    cfg["auto_map"] = {key: "modeling_custom.CustomLM"}
    (policy / where).write_text(json.dumps(cfg))


@pytest.fixture
def policy(base_policy, tmp_path) -> Path:
    p = tmp_path / "policy"
    shutil.copytree(base_policy, p)
    return p


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json"])
def test_a_policy_asking_for_its_own_code_is_refused_before_loading(where, policy, tmp_path):
    marker = tmp_path / "RAN"
    custom_code(policy, marker, where)
    with pytest.raises(RunError) as err:
        load_policy(policy)
    msg = str(err.value)
    assert f"the policy at {policy} needs Python code of its own ({where} has an auto_map" in msg
    assert "modeling_custom.CustomLM" in msg and "Fix: use a model whose architecture transformers ships" in msg
    assert not marker.exists()


def test_refuse_custom_code_leaves_a_broken_config_to_the_loader(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": ')
    refuse_custom_code(tmp_path)  # not JSON: transformers' error, mapped by load_model, says so
    refuse_custom_code(tmp_path / "missing")


def pickled(policy: Path, extra: dict | None = None) -> Path:
    """The policy with its weights as a pytorch_model.bin (torch's pickle format) instead of safetensors."""
    state = load_file(policy / "model.safetensors")
    (policy / "model.safetensors").unlink()
    torch.save({**state, **(extra or {})}, policy / "pytorch_model.bin")
    return policy / "pytorch_model.bin"


def test_pickled_weights_with_a_payload_are_refused_with_our_fix(policy, tmp_path):
    marker = tmp_path / "PWNED"
    weights = pickled(policy, {"x": Payload(marker)})
    torch.load(weights, weights_only=False)  # the payload is live: a plain load runs it
    assert marker.exists()
    marker.unlink()
    with pytest.raises(RunError) as err:
        load_policy(policy)
    msg = str(err.value)
    assert not marker.exists()
    assert msg.startswith(f"the policy at {policy}: its weights (pytorch_model.bin) are a pickle file holding objects "
                          "other than tensors (posix.system)")
    assert "Fix: convert them to safetensors with `model.save_pretrained(dir, safe_serialization=True)`" in msg
    assert "weights_only" not in msg


def test_clean_pickled_weights_load_as_tensors(policy, base_policy):
    pickled(policy)
    model, tok = load_policy(policy)
    want, _ = load_policy(base_policy)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), want.state_dict().values()))


def test_load_model_passes_the_refusal_on_unchanged(policy, tmp_path):
    from pc_pipelines.run.local import load_model

    custom_code(policy, tmp_path / "RAN")
    with pytest.raises(RunError) as err:
        load_model(policy, "cpu", "float32", what="the policy of checkpoint step-00000003")
    assert str(err.value).startswith(f"the policy of checkpoint step-00000003 at {policy} needs Python code")
    assert "cannot be loaded" not in str(err.value)


def test_a_damaged_cached_warm_start_is_moved_aside_and_built_again(tmp_path, monkeypatch, caplog):
    """A cached build whose files no longer match its SHA256SUMS is set aside (kept for inspection) and rebuilt;
    an intact one is used as it is."""
    from pc_pipelines import durable
    from pc_pipelines.config import resolve
    from pc_pipelines.training import base_policy as bp

    cfg = resolve("embedded", {"task.sft_examples": 123})  # not the shipped recipe: a cached build
    task, pol, template = cfg.task, cfg.policy, cfg.training.prompt_template
    assert bp.shipped_base_policy(task, pol, template) is None
    builds = []

    def fake_build(out_dir, *args, **kwargs):
        out = Path(out_dir)
        stage = durable.Staging(out)
        stage.write("weights.bin", f"build {len(builds)}".encode())
        stage.write(bp.META_FILE, b"{}")
        bp.write_sums(stage.path)
        stage.publish()
        builds.append(out)
        return out

    monkeypatch.setattr(bp, "build_base_policy", fake_build)
    path = bp.ensure_base_policy(task, pol, template, cache_dir=tmp_path)
    assert (path / "weights.bin").read_bytes() == b"build 0" and len(builds) == 1
    assert bp.ensure_base_policy(task, pol, template, cache_dir=tmp_path) == path and len(builds) == 1  # intact
    (path / "weights.bin").write_bytes(b"build X")  # flipped bytes in the cache
    with caplog.at_level("WARNING"):
        again = bp.ensure_base_policy(task, pol, template, cache_dir=tmp_path)
    assert again == path and len(builds) == 2 and (path / "weights.bin").read_bytes() == b"build 1"
    aside = tmp_path / f"damaged-{path.name}"
    assert (aside / "weights.bin").read_bytes() == b"build X"
    assert "is damaged" in caplog.text and str(aside) in caplog.text

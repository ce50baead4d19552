"""Fixtures of the Ray rollout tests: a tiny random Qwen2 with the embedded tokenizer (as the engine contract tests
build it) and one torch thread in this process (the actors' count: chunks equal bit for bit only at equal thread
counts). ``procs`` (this process's descendants from /proc) is in ``tests/conftest.py``."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from pc_pipelines.config import PolicyConfig
from pc_pipelines.data.tokenizer import INSTRUCTION, build_tokenizer
from pc_pipelines.rollout import RolloutRequest
from pc_pipelines.training.base_policy import model_config

# 14 sequences: with max_batch_sequences=4, 4 chunks (2 per actor with 2 actors); prompt lengths differ, so the
# length sort reorders requests.
REQS = [
    RolloutRequest("00012+00003" + INSTRUCTION, 3),
    RolloutRequest("7+8", 5),
    RolloutRequest("1" + INSTRUCTION, 4),
    RolloutRequest("99+1" + INSTRUCTION, 2),
]


@pytest.fixture(scope="module")
def round_requests() -> list[RolloutRequest]:
    return REQS


@pytest.fixture(scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def policy(one_thread):
    """(model, tokenizer): a fresh tiny random Qwen2 per module (the weight tests update it)."""
    torch.manual_seed(0)
    tok = build_tokenizer()
    cfg = model_config(PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), len(tok), 0, 1)
    return AutoModelForCausalLM.from_config(cfg).eval(), tok

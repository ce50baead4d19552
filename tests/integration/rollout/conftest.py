"""Fixtures of the Ray rollout tests: a tiny random Qwen2 with the embedded tokenizer (as the engine contract tests
build it), one torch thread in this process (the actors' count: chunks equal bit for bit only at equal thread
counts), and this process's descendants read from /proc (every process a test starts must be gone after it)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from pc_pipelines.data.tokenizer import INSTRUCTION, build_tokenizer
from pc_pipelines.policy import PolicyConfig
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


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited (its parent has not reaped it yet)


def descendants(pid: int | None = None) -> set[int]:
    """Live descendants of ``pid`` (default: this process), from /proc."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid or os.getpid()]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out and _alive(c):
                out.add(c)
                todo.append(c)
    return out


def wait_gone(pids: set[int], timeout: float = 30.0) -> set[int]:
    """The pids still alive after waiting up to ``timeout`` seconds for all of them to exit."""
    deadline = time.monotonic() + timeout
    while True:
        left = {p for p in pids if _alive(p)}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.fixture(scope="module")
def procs():
    """The /proc helpers, as a fixture (test modules are not importable from each other)."""
    return SimpleNamespace(descendants=descendants, wait_gone=wait_gone)

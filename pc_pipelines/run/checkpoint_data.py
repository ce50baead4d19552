"""What a checkpoint's files hold, checked to be what pc-pipelines writes before any of it is used.

A manifest proves a checkpoint whole, not sound: whoever can write the checkpoint can rewrite a value and the
manifest's sizes and sha256s with it. The scan before loading (:mod:`.checkpoints`, ``load_plain``) keeps anything
from running; the checks here keep a value the run cannot use from reaching torch, numpy, safetensors or the run's
ledger, where it would surface as a traceback, or as a run turned ``failed`` with a library's text as its reason,
or as a wrong total. Each takes what was read and returns it checked (or None), or raises :func:`refused`:

* ``rng.pt`` (:func:`rng_states`): torch's CPU generator state (a uint8 tensor of its exact size), numpy's global
  MT19937 state (not another bit generator's), Python's version-3 state (625 numbers below 2**32 and a gauss
  value); each is tried on a scratch generator, never on the global ones.
* ``policy/*.safetensors`` (:func:`safetensors_problem`): the header's length fits the file (read with 8 bytes,
  never allocated), the header is a JSON object, each tensor's dtype times shape is its byte span and the spans
  tile the data exactly, as safetensors requires.
* ``meta.json``'s totals (:func:`totals_problem`): whole numbers >= 0, ``steps`` the checkpoint's step (steps count from 1), and the
  sums of the store's rows of those steps when the store has them all.

``trainer.pt`` is checked by the trainer itself, against its live optimizer
(:meth:`~pc_pipelines.training.trainer.PolicyTrainer.state_problem`).
"""

from __future__ import annotations

import json
import math
import random
import struct
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RunError
from .records import Totals

SAFETENSORS_MAX_HEADER = 100_000_000
"""The longest header safetensors reads (its own limit)."""
SAFETENSORS_DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
                          "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
                          "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}


def refused(checkpoint: Path, rel: str, problem: str) -> RunError:
    """The refusal of a checkpoint whose file ``rel`` holds a value pc-pipelines never writes (``problem``)."""
    return RunError(
        f"checkpoint {checkpoint}: {rel}: {problem}: pc-pipelines never writes that, so the checkpoint was altered or "
        f"damaged; nothing of the run changed. Fix: move it aside (e.g. to damaged-{checkpoint.name}) to resume from "
        "the one before it, or start a new --run-name."
    )


def _short(value: Any) -> str:
    """``repr(value)`` cut to 80 characters (a value echoed in an error)."""
    if isinstance(value, (list, tuple, dict)) and len(value) > 8:
        return f"a {type(value).__name__} of {len(value)}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _whole(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


# ---- rng.pt ----------------------------------------------------------------------------------------------------------
def rng_states(checkpoint: Path, rng: Any) -> dict[str, Any]:
    """The RNG states of ``rng.pt`` as read (``load_plain``), checked and in the form the setters take; else
    :func:`refused`. numpy's key may be a list (how it is written) or a uint32 array (how it was written before)."""
    if not isinstance(rng, dict) or not {"torch", "numpy", "python"} <= rng.keys():
        raise refused(checkpoint, "rng.pt", "it holds no torch, numpy and Python RNG states")
    out = {}
    for name, check in (("torch", _torch_state), ("numpy", _numpy_state), ("python", _python_state)):
        state, problem = check(rng[name])
        if problem is not None:
            raise refused(checkpoint, "rng.pt", problem)
        out[name] = state
    return out


def _torch_state(state: Any) -> tuple[Any, str | None]:
    import torch

    size = torch.get_rng_state().numel()
    if not isinstance(state, torch.Tensor):
        return None, f"its torch state is {_short(state)}, not a tensor"
    if state.dtype != torch.uint8 or state.layout != torch.strided or state.dim() != 1:
        return None, f"its torch state is a {state.dtype} tensor of shape {list(state.shape)}, not {size} bytes (uint8)"
    if state.numel() != size:
        return None, f"its torch state is {state.numel()} bytes, not the {size} of torch's CPU generator"
    state = state.contiguous().clone()
    try:
        torch.Generator().set_state(state)  # a scratch generator: the global one is set only once all are checked
    except (RuntimeError, ValueError) as exc:
        return None, f"its torch state is not one of torch's CPU generator ({_first_line(exc)})"
    return state, None


def _numpy_state(state: Any) -> tuple[Any, str | None]:
    name = state.get("bit_generator") if isinstance(state, dict) else (
        state[0] if isinstance(state, (tuple, list)) and state else None)
    if name != "MT19937":
        return None, (f"its numpy state is of the bit generator {_short(name)}, not MT19937 (numpy's global "
                      "generator, which the run draws from)")
    if not isinstance(state, (tuple, list)) or len(state) != 5:
        return None, "its numpy state is not (name, key, pos, has_gauss, cached_gaussian), as pc-pipelines writes it"
    _, key, pos, has_gauss, cached = state
    if isinstance(key, np.ndarray):
        key = key.tolist() if key.dtype.kind in "iu" and key.ndim == 1 else None
    if not isinstance(key, (list, tuple)) or len(key) != 624:
        return None, f"its numpy key is {_short(key)}, not 624 numbers"
    if not all(_whole(k) and 0 <= k < 2**32 for k in key):
        return None, "its numpy key holds a value that is not a whole number in [0, 2**32)"
    if not (_whole(pos) and 0 <= pos <= 624) or has_gauss not in (0, 1) or isinstance(has_gauss, float):
        return None, f"its numpy pos {_short(pos)} / has_gauss {_short(has_gauss)} are not 0..624 / 0 or 1"
    if not isinstance(cached, (int, float)) or isinstance(cached, bool):
        return None, f"its numpy cached_gaussian is {_short(cached)}, not a number"
    checked = ("MT19937", np.asarray(key, dtype=np.uint32), int(pos), int(has_gauss), float(cached))
    try:
        np.random.RandomState().set_state(checked)  # a scratch generator
    except (ValueError, TypeError) as exc:
        return None, f"its numpy state is not one of MT19937 ({_first_line(exc)})"
    return checked, None


def _python_state(state: Any) -> tuple[Any, str | None]:
    if not isinstance(state, (tuple, list)) or len(state) != 3:
        return None, "its Python random state is not (version, internal state, gauss)"
    version, internal, gauss = state
    if version != 3 or not _whole(version):
        return None, f"its Python random state has version {_short(version)}, not 3"
    if not isinstance(internal, (tuple, list)):
        return None, f"its Python random state holds {_short(internal)}, not 625 numbers"
    if len(internal) != 625:
        return None, f"its Python random state holds {len(internal)} numbers, not 625"
    if not all(_whole(x) and 0 <= x < 2**32 for x in internal):
        return None, "its Python random state holds a value that is not a whole number in [0, 2**32)"
    if gauss is not None and (not isinstance(gauss, float)):
        return None, f"its Python random state's gauss value is {_short(gauss)}, not None or a float"
    checked = (3, tuple(int(x) for x in internal), gauss)
    try:
        random.Random().setstate(checked)  # a scratch generator
    except (ValueError, TypeError, OverflowError) as exc:
        return None, f"its Python random state is not one of Python's generator ({_first_line(exc)})"
    return checked, None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:80]


# ---- safetensors -----------------------------------------------------------------------------------------------------
def safetensors_problem(path: Path) -> str | None:
    """None when the file at ``path`` is a safetensors file safetensors reads as it is (its layout only: the values
    are the weights'), else what is wrong with it, one line. Reads its 8-byte header length first: a header longer
    than the file is never read."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"it is {size} bytes, too short for a safetensors header"
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            return f"its header is {n} bytes long, the file has {size}"
        if n > SAFETENSORS_MAX_HEADER:
            return f"its header is {n} bytes long, more than safetensors reads ({SAFETENSORS_MAX_HEADER})"
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        return "its header is not JSON"
    if not isinstance(header, dict):
        return f"its header is a JSON {type(header).__name__}, not an object of tensors"
    data = size - 8 - n
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                return "its __metadata__ is not an object of strings"
            continue
        what = f"tensor {_short(name)}"
        if not isinstance(info, dict):
            return f"{what} is described by {_short(info)}, not an object"
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in SAFETENSORS_DTYPE_BITS:
            return f"{what} has dtype {_short(dtype)}, not one safetensors reads"
        if not isinstance(shape, list) or not all(_whole(d) and d >= 0 for d in shape):
            return f"{what} has shape {_short(shape)}, not a list of sizes"
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_whole(o) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            return f"{what} has data_offsets {_short(offsets)}, not [begin, end]"
        begin, end = offsets
        if end > data:
            return f"{what} spans bytes {begin}..{end} of its data, which has {data} bytes"
        bits = math.prod(shape) * SAFETENSORS_DTYPE_BITS[dtype]
        if bits != (end - begin) * 8:
            return f"{what} is {dtype} of shape {shape} ({bits / 8:g} bytes), its span {begin}..{end} has {end - begin}"
        spans.append((begin, end, name))
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            return f"tensor {_short(name)} begins at byte {begin} of its data, not {at} where the one before ends"
        at = end
    if at != data:
        return f"its tensors end at byte {at} of its data, which has {data} bytes"
    return None


def refuse_damaged_weights(checkpoint: Path, under: str = "policy") -> None:
    """:func:`refused` for the first ``*.safetensors`` under ``checkpoint / under`` that
    :func:`safetensors_problem` finds wrong."""
    for path in sorted((checkpoint / under).glob("*.safetensors")):
        problem = safetensors_problem(path)
        if problem is not None:
            raise refused(checkpoint, path.relative_to(checkpoint).as_posix(), problem)


# ---- meta.json -------------------------------------------------------------------------------------------------------
TOTALS = tuple(f.name for f in fields(Totals))
STORE_TOTALS = {"sampled_rollouts": "sampled_rollouts", "trained_rollouts": "trained_rollouts",
                "engine_calls": "engine_calls"}
"""The totals the store's ``steps`` rows hold, one column each."""


def totals_problem(totals: Any, step: int, rows: list[dict[str, Any]]) -> str | None:
    """None when ``totals`` (``meta.json``'s, of the checkpoint after ``step``) are the run's ledger through that
    step: whole numbers >= 0 of :class:`~.records.Totals`' fields, ``steps`` = step (steps count from 1), and, when
    ``rows`` (the store's ``steps`` rows of steps 1..step) are all there, their sums (of each column they all fill); else what is
    wrong, one line."""
    if not isinstance(totals, dict):
        return f"totals is {_short(totals)}, not an object of {', '.join(TOTALS)}"
    unknown = [k for k in totals if k not in TOTALS]
    if unknown:
        return f"totals has {_short(unknown[0])}, not one of {', '.join(TOTALS)}"
    for key, value in totals.items():
        if not _whole(value) or value < 0:
            return f"totals.{key} is {_short(value)}, not a whole number >= 0"
    if totals.get("steps", step) != step:
        return f"totals.steps is {totals['steps']}, the checkpoint is after step {step} ({step} steps)"
    if sorted(int(r["step"]) for r in rows) == list(range(1, step + 1)):
        for key, column in STORE_TOTALS.items():
            if key not in totals or any(r[column] is None for r in rows):  # a column older rows lack
                continue
            stored = sum(int(r[column]) for r in rows)
            if totals[key] != stored:
                return f"totals.{key} is {totals[key]}, the store's steps 1..{step} add up to {stored}"
    return None

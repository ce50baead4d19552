"""A run's checkpoints: their layout, listing, verification, retention, and writing / reading the run's own state.

``<run_dir>/checkpoints/step-NNNNNNNN`` (named by the last completed step) holds the backend's files (the local
backend: the policy as a normal HF directory, the optimizer state, the rollout payloads) and the run's own:
``allocator.json`` (stream, buffer, RNG), ``rng.pt`` (every global RNG state) and ``meta.json`` (the config hash
and the cumulative ledger). A checkpoint is written to a temporary directory and renamed into place, so a killed
write leaves the previous one intact; retention keeps the newest ``keep_checkpoints`` and every ``keep_every``.

**Checkpoints verify themselves.** The last file written (atomically, after every other file is synced) is
``manifest.json``: every file's name, size and sha256; a checkpoint is intact only when its files match it
(:func:`verify_checkpoint`). Format 1 checkpoints (no manifest) are checked for their files. torch is imported only
to write and read ``rng.pt``, so listing checkpoints stays light.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..allocation import Allocator
from ..errors import RunError
from ..store import Store
from .records import Totals
from .spec import TrainingRun

CHECKPOINT_FORMAT = 2  # 2: manifest.json (files, sizes, sha256) written last; 1: meta.json last, no manifest
READABLE_FORMATS = (1, 2)
MANIFEST = "manifest.json"
RUN_STATE_FILES = ("meta.json", "allocator.json", "rng.pt")
"""The run's own files, in every checkpoint whatever the backend."""
# What a checkpoint written before manifests listed their required files holds besides the weights
# (policy/*.safetensors or *.bin): the local backend's layout.
REQUIRED_FILES = ("meta.json", "trainer.pt", "allocator.json", "sidecar.parquet", "rng.pt", "policy/config.json")


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def list_checkpoints(checkpoint_dir: Path) -> list[tuple[int, Path]]:
    """Checkpoints (``step-N`` directories with a ``manifest.json`` or, format 1, a ``meta.json``), oldest first.
    Cheap: it does not verify them (:func:`verify_checkpoint`, :func:`newest_intact_checkpoint` do)."""
    out = []
    if checkpoint_dir.is_dir():
        for p in checkpoint_dir.iterdir():
            if p.name.startswith("step-") and ((p / MANIFEST).exists() or (p / "meta.json").exists()):
                try:
                    out.append((int(p.name[5:]), p))
                except ValueError:
                    continue
    return sorted(out)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: Path, required: list[str] | None = None) -> dict[str, Any]:
    """Sync every file of a checkpoint being written, then write its manifest (name, size, sha256 of each file,
    and the ``required`` ones the checkpoint cannot do without) atomically: the last file of the checkpoint."""
    files = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name not in (MANIFEST, MANIFEST + ".tmp"):
            with open(p, "rb") as f:
                os.fsync(f.fileno())
            files[p.relative_to(directory).as_posix()] = {"size": p.stat().st_size, "sha256": _sha256(p)}
    manifest: dict[str, Any] = {"format": CHECKPOINT_FORMAT, "files": files}
    if required is not None:
        manifest["required"] = sorted(set(required))
    tmp = directory / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / MANIFEST)
    return manifest


def read_json(path: Path) -> Any:
    """A checkpoint's JSON file; ValueError naming it when it is missing or not JSON."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path.name} is missing") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path.name} is not valid JSON ({exc})") from None


def verify_checkpoint(path: Path) -> str | None:
    """None when the checkpoint at ``path`` is intact, else what is wrong with it (one line).

    A checkpoint of format 2 is intact when every file its manifest lists has the listed size and sha256 and the
    manifest lists the files the checkpoint needs (its ``required`` list; a manifest without one: the local
    backend's files and weights); one of format 1 (no manifest, written before checkpoints
    verified themselves) when its required files are there and not empty."""
    path = Path(path)
    try:
        step = int(path.name.split("-", 1)[1])
    except (IndexError, ValueError):
        return f"{path.name} is not named step-<N>"
    if (path / MANIFEST).exists():
        try:
            manifest = read_json(path / MANIFEST)
            files = manifest["files"]
            assert isinstance(files, dict)
        except (ValueError, KeyError, TypeError, AssertionError):
            return f"{MANIFEST} is not a valid manifest"
        for rel, want in files.items():
            f = path / rel
            if not f.is_file():
                return f"{rel} is missing"
            size = f.stat().st_size
            if size != want.get("size"):
                return f"{rel} has {size} bytes, its manifest says {want.get('size')} (truncated or replaced)"
        for rel, want in files.items():
            if _sha256(path / rel) != want.get("sha256"):
                return f"{rel} does not match its sha256 in the manifest (corrupted)"
        if "required" in manifest:
            lacking = [r for r in (*RUN_STATE_FILES, *manifest["required"]) if r not in files]
            if lacking:
                return f"its manifest lists no {', '.join(dict.fromkeys(lacking))}"
        else:
            lacking = [r for r in REQUIRED_FILES if r not in files]
            if lacking or not any(r.startswith("policy/") and r.endswith((".safetensors", ".bin")) for r in files):
                return f"its manifest lists no {', '.join(lacking) or 'policy weights'}"
    else:
        try:
            meta = read_json(path / "meta.json")
        except ValueError as exc:
            return str(exc)
        if not isinstance(meta, dict) or meta.get("format", 1) != 1:
            return f"{MANIFEST} is missing (a checkpoint of format {CHECKPOINT_FORMAT} writes it last)"
        for rel in REQUIRED_FILES:
            f = path / rel
            if not f.is_file() or f.stat().st_size == 0:
                return f"{rel} is {'empty' if f.is_file() else 'missing'}"
        if not [p for p in (path / "policy").iterdir() if p.suffix in (".safetensors", ".bin") and p.stat().st_size]:
            return "policy/ has no weights"
    try:
        meta = read_json(path / "meta.json")
    except ValueError as exc:
        return str(exc)
    if not isinstance(meta, dict) or meta.get("step") != step or "totals" not in meta:
        return f"meta.json does not describe step {step}"
    return None


def quarantine_checkpoint(path: Path) -> Path:
    """Move a damaged checkpoint aside to ``damaged-step-NNNNNNNN[-k]`` (kept for inspection; no listing sees it)."""
    for k in range(1000):
        target = path.with_name(f"damaged-{path.name}" + (f"-{k}" if k else ""))
        if not target.exists():
            os.rename(path, target)
            return target
    raise RunError(f"cannot move the damaged checkpoint {path} aside: too many damaged copies. Fix: delete them.")


def newest_intact_checkpoint(
    checkpoint_dir: Path, at_most: int | None = None
) -> tuple[tuple[int, Path] | None, list[tuple[Path, str]]]:
    """The newest intact checkpoint (taken after a step ``<= at_most``, when given) and the damaged ones newer
    than it, each with what is wrong with it."""
    damaged: list[tuple[Path, str]] = []
    for step, path in reversed(list_checkpoints(checkpoint_dir)):
        if at_most is not None and step > at_most:
            continue
        problem = verify_checkpoint(path)
        if problem is None:
            return (step, path), damaged
        damaged.append((path, problem))
    return None, damaged


def latest_checkpoint(checkpoint_dir: Path) -> tuple[int, Path] | None:
    ckpts = list_checkpoints(checkpoint_dir)
    return ckpts[-1] if ckpts else None


def checkpoint_at(checkpoint_dir: Path, step: int) -> Path | None:
    """The complete checkpoint taken after ``step``, if any."""
    return next((p for s, p in list_checkpoints(checkpoint_dir) if s == step), None)


def stale_checkpoints(ckpts: list[tuple[int, Path]], keep_last: int, keep_every: int) -> list[tuple[int, Path]]:
    """The checkpoints retention deletes: all but the newest ``keep_last`` and those after a multiple of
    ``keep_every`` steps. Example: steps 4, 9, 14, 19, 24 with keep_last 2 and keep_every 10 keep 9 (10 steps),
    19 (20 steps, also among the newest two) and 24, and delete 4 and 14."""
    newest = ckpts[-keep_last:] if keep_last > 0 else []
    return [
        (s, p) for s, p in ckpts
        if (s, p) not in newest and not (keep_every > 0 and (s + 1) % keep_every == 0)
    ]



# ---- the run's own state: written beside the backend's files, read back before anything of the run changes ----------
def save_checkpoint(run: TrainingRun, store: Store, allocator: Allocator, totals: Totals,
                    write_backend_files: Callable[[Path], list[str]]) -> Path:
    """Write the checkpoint after the allocator's last completed step: the backend's files
    (``write_backend_files(directory)`` returns those the checkpoint cannot do without), then the run's own state,
    then the manifest; rename it into place, record it in the store and apply the retention. Returns its
    directory."""
    import torch

    step = allocator.step - 1
    root = run.checkpoint_dir
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
    tmp = root / f".tmp-{checkpoint_name(step)}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        required = write_backend_files(tmp)
        (tmp / "allocator.json").write_text(json.dumps(allocator.state_dict()))
        torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
                   tmp / "rng.pt")
        meta = {"format": CHECKPOINT_FORMAT, "run_id": run.run_id, "config_hash": run.config.config_hash,
                "step": step, "totals": totals.__dict__}
        (tmp / "meta.json").write_text(json.dumps(meta))
        write_manifest(tmp, [*RUN_STATE_FILES, *required])  # last: intact when its files match its manifest
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a full disk gets the partial checkpoint's space back
        raise
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    store.add_checkpoint(run.run_id, step, str(final))
    cfg = run.config.training
    for _, old in stale_checkpoints(list_checkpoints(root), cfg.keep_checkpoints, cfg.keep_every):
        shutil.rmtree(old, ignore_errors=True)
    for junk in root.glob(".tmp-*"):
        shutil.rmtree(junk, ignore_errors=True)
    return final


def checkpoint_meta(run: TrainingRun, path: Path) -> dict[str, Any]:
    """The ``meta.json`` of the checkpoint at ``path``, checked to be readable and to belong to ``run``'s config."""
    try:
        meta = read_json(path / "meta.json")
    except ValueError as exc:
        raise RunError(f"checkpoint {path}: {exc}. Fix: resume from an earlier checkpoint.") from None
    if meta.get("format") not in READABLE_FORMATS:
        raise RunError(f"checkpoint {path} has format {meta.get('format')}, this version reads {READABLE_FORMATS}.")
    if meta.get("config_hash") != run.config.config_hash:
        raise RunError(
            f"checkpoint {path} belongs to config {meta.get('config_hash')}, not {run.config.config_hash}. Fix: resume "
            "with the run's original preset and --set overrides, or start a new --run-name."
        )
    return meta


def unreadable(path: Path, exc: BaseException) -> RunError:
    """The error of a checkpoint file that cannot be read (an unverifiable format 1 checkpoint can be damaged)."""
    return RunError(f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc}). Fix: move it aside "
                    f"(e.g. to damaged-{path.name}) to resume from the one before it.")


def load_run_state(path: Path) -> tuple[Allocator, dict[str, Any]]:
    """The allocator and the global RNG states saved in the checkpoint at ``path`` (nothing is applied yet)."""
    import torch

    try:
        allocator = Allocator.from_state_dict(json.loads((path / "allocator.json").read_text()))
        rng = torch.load(path / "rng.pt", weights_only=False)
    except Exception as exc:
        raise unreadable(path, exc) from None
    return allocator, rng


def restore_rng(rng: dict[str, Any]) -> None:
    """Set the global torch, numpy and Python RNGs to the states a checkpoint saved."""
    import torch

    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])

"""A run's checkpoints: their layout, listing, verification, retention, and writing / reading the run's own state.

``<run_dir>/checkpoints/step-NNNNNNNN`` (named by the last completed step: ``step-00000010`` holds the run after 10
steps, steps counted from 1 as everywhere) holds the backend's files (the local
backend: the policy as a normal HF directory, the optimizer state, the rollout payloads) and the run's own:
``allocator.json`` (stream, buffer, RNG), ``rng.pt`` (every global RNG state) and ``meta.json`` (the config hash
and the cumulative ledger). A checkpoint is written to a temporary directory and renamed into place
(:mod:`pc_pipelines.durable`), so a killed write leaves the previous one intact; retention keeps the newest
``keep_checkpoints`` and every ``keep_every``.

**Checkpoints verify themselves.** The last file written (atomically, after every other file is synced) is
``manifest.json``: every file's name, size and sha256; a checkpoint is intact only when its files match it
(:func:`verify_checkpoint`). Format 1 checkpoints (no manifest) are checked for their files. torch is imported only
to write and read torch files, so listing checkpoints stays light.

**Nothing in a checkpoint runs.** A manifest proves a checkpoint whole, not harmless: whoever can write it can
rewrite the sizes and sha256s. So a torch file of a checkpoint is read as tensors and plain data only: its pickle
is scanned without running it (:func:`pickle_problem`) and loaded with ``weights_only=True``
(:func:`load_plain`); anything else in it (a class, a function: ``posix.system``) refuses the resume with the fix,
before anything of the run is loaded or changed. ``rng.pt`` holds plain data (numpy's key as a list of ints); one
written before holds numpy arrays, read through exactly the numpy names they need. verl loads its own actor files
unrestricted, so the verl backend scans them first against the classes they hold (:func:`refuse_unsafe_pickles`);
its payloads are tensors and JSON (:class:`~pc_pipelines.training.verl_batch.PayloadStore`), scanned the same way.
The scan also bounds the load's memory by the file's own bytes (:mod:`.torch_files`): a compressed entry, a call
that allocates from a number in the file (``bytearray(1_500_000_000)`` in a 1 KB file), a storage larger than its
bytes are refused the same way, before torch reads the file.
A checkpoint refused so is not skipped for an older one, as a damaged one is: its files match its manifest,
so someone altered it, and which steps to give up is the operator's call (the fix says how).

**A full disk is a full disk**: torch's zip writer given a path hides ENOSPC (``RuntimeError: ... unexpected
pos``), so torch files are written through a Python file (:func:`save_torch`), and an error of the backend's
writers (verl's workers save with torch themselves) on a filesystem left with no room is reported as ENOSPC
(:func:`~pc_pipelines.run.stopping.disk_full_error`).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .. import durable
from ..allocation import Allocator, AllocatorConfig
from ..errors import RunError
from ..store import Store
from .checkpoint_data import rng_states
from .records import Totals
from .stopping import disk_full_error
from .torch_files import torch_file_problem
from .training_run import TrainingRun

CHECKPOINT_FORMAT = 3  # 3: steps counted from 1; 2: manifest.json (files, sizes, sha256) written last; 1: meta.json last
READABLE_FORMATS = (1, 2, 3)
COUNTS_FROM_ONE = 3
"""Checkpoints of formats 1 and 2 (written before store v12) count steps from 0: ``step-00000009`` (meta ``step`` 9)
holds the run after 10 steps. They are read as they are and listed under the run's step numbers
(:func:`checkpoint_step`: 9 -> 10), so they still resume."""
MANIFEST = "manifest.json"
CHECKPOINT_MANIFEST = durable.JsonManifest(MANIFEST, order=("format", "files", "required"))
RUN_STATE_FILES = ("meta.json", "allocator.json", "rng.pt")
"""The run's own files, in every checkpoint whatever the backend."""
# What a checkpoint written before manifests listed their required files holds besides the weights
# (policy/*.safetensors or *.bin): the local backend's layout.
REQUIRED_FILES = ("meta.json", "trainer.pt", "allocator.json", "sidecar.parquet", "rng.pt", "policy/config.json")


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def _format(path: Path) -> int | None:
    """The format a checkpoint says it has (its manifest's, else its ``meta.json``'s; 1 without either)."""
    for name in (MANIFEST, "meta.json"):
        try:
            fmt = json.loads((path / name).read_text()).get("format", 1)
        except (OSError, ValueError, AttributeError):
            continue
        return fmt if isinstance(fmt, int) else None
    return None


def checkpoint_step(path: Path) -> int | None:
    """The run's step (steps counted from 1) after which the checkpoint at ``path`` was taken: its name's number,
    one more for a checkpoint of a format that counted from 0 (:data:`COUNTS_FROM_ONE`). None: not ``step-<N>``."""
    try:
        named = int(path.name[5:]) if path.name.startswith("step-") else None
    except ValueError:
        return None
    if named is None:
        return None
    fmt = _format(path)
    return named if fmt is None or fmt >= COUNTS_FROM_ONE else named + 1


def list_checkpoints(checkpoint_dir: Path) -> list[tuple[int, Path]]:
    """Checkpoints (``step-N`` directories with a ``manifest.json`` or, format 1, a ``meta.json``) as (the run's
    step after which each was taken, path), oldest first; of two for one step (one written before steps counted
    from 1, one after), the newer format. Cheap: it does not verify them (:func:`verify_checkpoint`,
    :func:`newest_intact_checkpoint` do)."""
    found: dict[int, Path] = {}
    if checkpoint_dir.is_dir():
        for p in sorted(checkpoint_dir.iterdir()):
            if p.name.startswith("step-") and ((p / MANIFEST).exists() or (p / "meta.json").exists()):
                step = checkpoint_step(p)
                if step is not None and (step not in found or int(p.name[5:]) == step):
                    found[step] = p
    return sorted(found.items())


def write_manifest(directory: Path, required: list[str] | None = None) -> durable.Manifest:
    """Sync every file of the checkpoint at ``directory``, then write its manifest (name, size, sha256 of each file,
    and the ``required`` ones the checkpoint cannot do without) atomically, last (:func:`~pc_pipelines.durable.seal`,
    in place: how a checkpoint changed by hand is sealed again; :func:`save_checkpoint` seals its staging copy)."""
    fields = {"format": CHECKPOINT_FORMAT} | ({} if required is None else {"required": sorted(set(required))})
    return durable.seal(directory, CHECKPOINT_MANIFEST, fields)


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
    problem = durable.verify_dir(path, CHECKPOINT_MANIFEST, check=_lists_what_it_needs,
                                 without_manifest=lambda: _format1_problem(path))
    if problem:
        return problem
    try:
        meta = read_json(path / "meta.json")
    except ValueError as exc:
        return str(exc)
    if not isinstance(meta, dict) or meta.get("step") != step or "totals" not in meta:  # as named, either numbering
        return f"meta.json does not describe step {step}"
    return None


def _lists_what_it_needs(manifest: durable.Manifest) -> str | None:
    """Whether a manifest lists the files its checkpoint needs: its ``required`` list and the run's own files;
    a manifest without one (written before manifests listed them): the local backend's files and weights."""
    files = manifest.files
    if "required" in manifest.fields:
        required = manifest.fields["required"]
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            return f"{MANIFEST} is damaged (required is not a list of names)"
        lacking = [r for r in (*RUN_STATE_FILES, *required) if r not in files]
        return f"its manifest lists no {', '.join(dict.fromkeys(lacking))}" if lacking else None
    lacking = [r for r in REQUIRED_FILES if r not in files]
    if lacking or not any(r.startswith("policy/") and r.endswith((".safetensors", ".bin")) for r in files):
        return f"its manifest lists no {', '.join(lacking) or 'policy weights'}"
    return None


def _format1_problem(path: Path) -> str | None:
    """A checkpoint without a manifest: of format 1 (written before checkpoints verified themselves), its required
    files there and not empty; else damaged."""
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
    return None


def quarantine_checkpoint(path: Path) -> Path:
    """Move a damaged checkpoint aside to ``damaged-step-NNNNNNNN[-k]`` (kept for inspection; no listing sees it)."""
    try:
        return durable.quarantine(path)
    except FileExistsError:
        msg = f"cannot move the damaged checkpoint {path} aside: too many damaged copies. Fix: delete them."
        raise RunError(msg) from None


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
    ``keep_every`` steps. Example: steps 5, 10, 15, 20, 25 with keep_last 2 and keep_every 10 keep 10, 20 (also
    among the newest two) and 25, and delete 5 and 15."""
    newest = ckpts[-keep_last:] if keep_last > 0 else []
    return [
        (s, p) for s, p in ckpts
        if (s, p) not in newest and not (keep_every > 0 and s % keep_every == 0)
    ]



# ---- the run's own state: written beside the backend's files, read back before anything of the run changes ----------
def save_checkpoint(run: TrainingRun, store: Store, allocator: Allocator, totals: Totals,
                    write_backend_files: Callable[[Path], list[str]]) -> Path:
    """Write the checkpoint after the allocator's last completed step: the backend's files
    (``write_backend_files(directory)`` returns those the checkpoint cannot do without), then the run's own state,
    then the manifest; rename it into place, record it in the store and apply the retention. Returns its
    directory."""
    step = allocator.step  # steps done: the last step's number
    root = run.checkpoint_dir
    root.mkdir(parents=True, exist_ok=True)
    stage = durable.Staging(root / checkpoint_name(step), tmp=root / f".tmp-{checkpoint_name(step)}-{os.getpid()}")
    tmp = stage.path
    try:
        required = write_backend_files(tmp)
        (tmp / "allocator.json").write_text(json.dumps(allocator.state_dict()))
        save_torch(rng_state(), tmp / "rng.pt")
        meta = {"format": CHECKPOINT_FORMAT, "run_id": run.run_id, "config_hash": run.config.config_hash,
                "step": step, "totals": totals.__dict__}
        (tmp / "meta.json").write_text(json.dumps(meta))
        stage.seal(CHECKPOINT_MANIFEST, {"format": CHECKPOINT_FORMAT,  # last: intact when its files match it
                                         "required": sorted({*RUN_STATE_FILES, *required})})
    except BaseException as exc:
        full = disk_full_error(exc, tmp)  # a writer that hid ENOSPC (verl's); asked before the space comes back
        stage.discard()  # a full disk gets the partial checkpoint's space back
        if full is not None:
            raise full from exc
        raise
    final = stage.publish()  # a replayed step's checkpoint replaces the old one (renamed aside, then deleted)
    store.add_checkpoint(run.run_id, step, str(final))
    cfg = run.config.training
    for _, old in stale_checkpoints(list_checkpoints(root), cfg.keep_checkpoints, cfg.keep_every):
        shutil.rmtree(old, ignore_errors=True)
    for junk in [*root.glob(".tmp-*"), *root.glob(".old-*")]:
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
    return RunError(f"checkpoint {path} cannot be read ({type(exc).__name__}: {_first_line(exc)}). Fix: move it aside "
                    f"(e.g. to damaged-{path.name}) to resume from the one before it.")


def load_run_state(path: Path, checked: AllocatorConfig | None = None) -> tuple[Allocator, dict[str, Any]]:
    """The allocator and the global RNG states saved in the checkpoint at ``path`` (nothing is applied yet).
    ``checked``: the run's allocator config, checked where the run started; the saved one must equal it."""
    try:
        allocator = Allocator.from_state_dict(json.loads((path / "allocator.json").read_text()), checked)
    except Exception as exc:
        raise unreadable(path, exc) from None
    return allocator, load_rng(path)


# ---- torch files: written so a full disk says so, read as tensors and plain data only ------------------------------
class _Sink:
    """The file :func:`save_torch` hands torch: it keeps the OSError of a failed write, which torch's zip writer
    turns into ``RuntimeError: [enforce fail at inline_container.cc:...] unexpected pos``."""

    def __init__(self, f) -> None:
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.f.flush()


def save_torch(obj: Any, path: Path) -> None:
    """``torch.save(obj, path)`` through a Python file, so a full disk (or any failed write) is the OSError it was,
    naming ``path``, not torch's ``unexpected pos``."""
    import torch

    path = Path(path)
    with open(path, "wb") as f:
        sink = _Sink(f)
        try:
            torch.save(obj, sink)
            f.flush()
        except (RuntimeError, OSError) as exc:
            err = sink.error or (exc if isinstance(exc, OSError) else None)
            if err is None:
                raise
            with contextlib.suppress(OSError):
                f.close()  # its buffered bytes fail the same way: the first error is the one to tell
            raise OSError(err.errno, err.strerror or str(err), str(path)) from exc


def pickle_problem(path: Path, allowed: Iterable[str] = ()) -> str | None:
    """None when the torch file at ``path`` holds tensors and plain data only (what ``torch.load(weights_only=True)``
    reads), plus instances of the classes named in ``allowed``, and loads in about the memory of its own bytes; else
    what else it holds or why it would take more, one line. Read from its bytes, never run
    (:func:`~.torch_files.torch_file_problem`): a file that is not a ``torch.save`` zip file, a compressed entry, a
    call that allocates from a number in the file (``bytearray(1_500_000_000)``), a storage larger than its bytes
    are refused too."""
    return torch_file_problem(path, allowed)


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s text, never torch's advice to load with ``weights_only=False`` (which would run
    whatever the file holds): for that, what torch refused, in our words."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if "weights_only" in text or "weights only" in text.lower():
        return "torch's weights-only loader refused what it holds"
    return text[:200]


def altered(checkpoint: Path, rel: str, problem: str) -> RunError:
    """The refusal of a checkpoint whose torch file ``rel`` holds more than pc-pipelines writes (``problem``)."""
    return RunError(
        f"checkpoint {checkpoint}: {rel} {problem}: pc-pipelines never writes those, so the checkpoint was altered; "
        f"nothing in it was run and nothing of the run changed. Fix: move it aside (e.g. to "
        f"damaged-{checkpoint.name}) to resume from the one before it, or start a new --run-name."
    )


def refuse_unsafe_pickles(checkpoint: Path, under: str, allowed: Iterable[str] = ()) -> list[Path]:
    """Scan every ``*.pt`` under ``checkpoint / under`` (:func:`pickle_problem`, nothing runs) and raise
    :func:`altered`'s RunError for the first that holds anything but tensors, plain data and ``allowed`` classes.
    For files a library loads with ``weights_only=False`` (verl's actor checkpoint). Returns the files scanned."""
    allowed = frozenset(allowed)
    files = sorted((checkpoint / under).rglob("*.pt"))
    for f in files:
        problem = pickle_problem(f, allowed)
        if problem is not None:
            raise altered(checkpoint, f.relative_to(checkpoint).as_posix(), problem)
    return files


def load_plain(checkpoint: Path, rel: str, safe_globals: Iterable[Any] = ()) -> Any:
    """The torch file ``checkpoint / rel`` read as tensors and plain data (``weights_only=True``), after a scan
    that runs nothing; ``safe_globals`` (objects, or ``(object, "module.name")`` pairs) are the only classes and
    functions it may name besides. Anything else: :func:`altered`; a file that cannot be read: :func:`unreadable`."""
    import torch

    safe = list(safe_globals)
    names = [g[1] if isinstance(g, tuple) else f"{g.__module__}.{g.__name__}" for g in safe]
    path = checkpoint / rel
    if not path.is_file():
        raise unreadable(checkpoint, FileNotFoundError(f"{rel} is missing"))
    problem = pickle_problem(path, names)
    if problem is not None:
        raise altered(checkpoint, rel, problem)
    try:
        with torch.serialization.safe_globals(safe):
            return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as exc:  # the weights-only unpickler refused what the scan let by
        found = re.findall(r"GLOBAL (\S+)|got <class '([^']+)'>", str(exc))
        what = ", ".join(a or b for a, b in found) or _first_line(exc)
        raise altered(checkpoint, rel, f"holds objects other than tensors and plain data ({what})") from None
    except Exception as exc:
        raise unreadable(checkpoint, exc) from None


# ---- rng.pt ------------------------------------------------------------------------------------------------------------
def rng_state() -> dict[str, Any]:
    """Every global RNG state as plain data: torch's (a uint8 tensor), numpy's legacy one (name, key as a list of
    624 ints, pos, has_gauss, cached_gaussian) and Python's. ``np.random.set_state`` takes it as it is (so does a
    version that read rng.pt unrestricted)."""
    import torch

    name, key, pos, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(), "numpy": (str(name), key.tolist(), int(pos), int(has_gauss), float(cached)),
            "python": random.getstate()}


def _old_rng_globals() -> list[Any]:
    """What an rng.pt written before issue 31 names (numpy's state as an array): exactly numpy's array
    reconstruction, under its numpy 2 and numpy 1 names, and the uint32 dtype of its key."""
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy 1
        from numpy.core.multiarray import _reconstruct

    return [(_reconstruct, "numpy._core.multiarray._reconstruct"), (_reconstruct, "numpy.core.multiarray._reconstruct"),
            np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def load_rng(checkpoint: Path) -> dict[str, Any]:
    """The global RNG states of the checkpoint at ``checkpoint`` (``rng.pt``), checked to be states the run's
    generators take (:func:`~.checkpoint_data.rng_states`); one written before issue 31 (numpy's key as an array)
    reads the same."""
    return rng_states(checkpoint, load_plain(checkpoint, "rng.pt", _old_rng_globals()))


def restore_rng(rng: dict[str, Any]) -> None:
    """Set the global torch, numpy and Python RNGs to the states a checkpoint saved."""
    import torch

    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])

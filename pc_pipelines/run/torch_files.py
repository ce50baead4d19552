"""A ``torch.save`` file read without trusting it: what it holds and how much memory loading it takes, told from its
bytes before torch reads any of it.

:func:`torch_file_problem` reads the zip's central directory and walks the pickle (``data.pkl``) with stand-ins:
nothing of the file runs, no global it names is imported or called. It refuses

* a file that is not a ``torch.save`` zip, or whose entries are compressed or claim more bytes than the file has
  (``torch.save`` stores every entry as it is: a deflated ``data.pkl`` of 390 KB can expand to 1.5 GB);
* a ``data.pkl`` over :data:`MAX_PICKLE_BYTES` (the objects a pickle builds take tens of times its bytes);
* a class or function outside tensors, plain data and the caller's ``allowed`` names;
* a call of anything that allocates what a number in the file says (``bytearray(1_500_000_000)``,
  ``torch.FloatStorage(n)``, a quantized tensor's size): only the calls of :data:`PLAIN_CALLS` and ``allowed`` run
  when torch loads it;
* a storage whose declared elements are more bytes than its ``data/<key>`` entry holds, a tensor of more elements
  than its storage (a view that repeats it), a numpy array rebuilt at a size other than numpy's own ``(0,)``.

What passes loads in about the memory of its own bytes, with ``weights_only=True`` or (verl's actor files, scanned
against their classes) unrestricted.
"""

from __future__ import annotations

import _compat_pickle
import io
import os
import pickle
import pickletools
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MAX_PICKLE_BYTES = 64 << 20
"""The largest ``data.pkl`` read (the file's object structure; its tensors' bytes are other entries): a resume's
trainer.pt of a 7B model's optimizer holds well under 10 MB of it."""

PLAIN_CALLS = frozenset({
    "collections.OrderedDict", "collections.Counter", "builtins.set", "builtins.complex", "_codecs.encode",
    "torch.Size", "torch.device", "torch.serialization._get_layout",
    "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor_v3", "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state", "torch._tensor._rebuild_from_type_v2",
    "torch._utils._rebuild_wrapper_subclass",
})
"""What a file of tensors and plain data may call while it loads: containers, tensors rebuilt over their storages
(checked here), names. Not torch's storage and tensor constructors, ``bytearray``, quantized, sparse, nested or
device-cast tensors, which allocate from a number in the file: torch lets its weights-only loader call them."""

_TENSORS = ("torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor_v3")
_NUMPY_RECONSTRUCT = ("numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct")


def _cut(value: Any, n: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


class _Call:
    """A stand-in for what a call of a global returned: its name, arguments and the state set on it."""

    def __init__(self, name: str, args: tuple) -> None:
        self.name, self.args, self.state = name, args, None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


class _Storage:
    """A stand-in for a persistent id (torch's ``('storage', type, key, location, numel)``)."""

    def __init__(self, pid: Any) -> None:
        self.pid = pid


class _Walk(pickle.Unpickler):
    """The pickle walked with stand-ins: every global is a class of its own that records its calls."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.globals: dict[str, type] = {}
        self.calls: list[_Call] = []
        self.storages: list[_Storage] = []

    def find_class(self, module: str, name: str) -> type:
        if (module, name) in _compat_pickle.NAME_MAPPING:  # Python 2 names, as pickle's own loader maps them
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        full = f"{module}.{name}"
        if full not in self.globals:
            walk = self

            def new(cls, *args, **kwargs):
                call = _Call(full, args)
                walk.calls.append(call)
                return call

            self.globals[full] = type(full, (), {"__new__": new, "__init__": lambda *a, **k: None, "name": full})
        return self.globals[full]

    def persistent_load(self, pid: Any) -> _Storage:
        storage = _Storage(pid)
        self.storages.append(storage)
        return storage


def _zip_problem(infos: list[zipfile.ZipInfo], size: int) -> str | None:
    seen: set[str] = set()
    total = 0
    for i in infos:
        if i.filename in seen:
            return f"holds two zip entries named {i.filename[:80]}; torch.save writes each once"
        seen.add(i.filename)
        if i.compress_type != zipfile.ZIP_STORED or i.compress_size != i.file_size:
            return (f"holds a compressed entry ({i.filename[:80]}: {i.compress_size:,} bytes that expand to "
                    f"{i.file_size:,}); torch.save stores every entry as it is")
        total += i.file_size
    if total > size:
        return f"has zip entries of {total:,} bytes in all, more than the file's {size:,}"
    return None


def _element_size(storage_type: Any) -> int | None:
    """Bytes per element of a storage class named in a persistent id (None: not a storage class torch loads)."""
    import torch
    from torch import _weights_only_unpickler as wu

    name = getattr(storage_type, "name", None)
    if name == "torch.storage.UntypedStorage":
        return 1
    real = wu._get_allowed_globals().get(name) if isinstance(name, str) else None
    dtype = getattr(real, "dtype", None) if name.endswith("Storage") else None  # torch's StorageType(dtype=...)
    return torch._utils._element_size(dtype) if isinstance(dtype, torch.dtype) else None


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, _Call) and value.name == "torch.Size" and value.args:
        value = value.args[0]
    if isinstance(value, tuple) and all(type(x) is int and x >= 0 for x in value):
        return list(value)
    return None


def _storage_problem(storage: _Storage, entries: dict[str, int], prefix: str) -> str | None:
    pid = storage.pid
    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[2], str)
            and isinstance(pid[3], str) and type(pid[4]) is int and pid[4] >= 0):
        return f"holds a storage record torch.save does not write ({_cut(pid)})"
    _, storage_type, key, _, numel = pid
    key = key[:40]
    itemsize = _element_size(storage_type)
    if itemsize is None:
        return f"holds a storage of a type torch.save does not write ({_cut(getattr(storage_type, 'name', storage_type))})"
    have = entries.get(f"{prefix}data/{key}")
    if have is None:
        return f"declares storage {key}, which has no entry data/{key}"
    if numel * itemsize != have:
        return (f"declares storage {key} of {numel * itemsize:,} bytes ({numel:,} x {itemsize}), its entry "
                f"data/{key} holds {have:,}")
    return None


def _call_problem(call: _Call, callable_names: frozenset[str]) -> str | None:
    name, args = call.name, call.args
    if name == "torch._tensor._rebuild_from_type_v2" and len(args) >= 3:
        inner = getattr(args[0], "name", None)
        if inner not in callable_names or not isinstance(args[2], tuple):
            return f"rebuilds a tensor through {_cut(inner or args[0])}"
        return _call_problem(_Call(inner, args[2]), callable_names)
    if name not in callable_names:
        return (f"calls {name}({_cut(args, 40)[1:-1].rstrip(',')}) as it loads (a call that can allocate as much "
                "memory as a number in the file says)")
    if name in _TENSORS:
        if len(args) < 4 or not isinstance(args[0], _Storage) or type(args[1]) is not int:
            return "holds a tensor record torch.save does not write"
        size = _ints(args[2])
        storage_numel = args[0].pid[4]
        if name == "torch._utils._rebuild_tensor_v3":  # an untyped storage: its numel counts bytes
            import torch

            dtype = getattr(torch, str(getattr(args[6], "name", "")).removeprefix("torch."), None) if len(args) > 6 else None
            if not isinstance(dtype, torch.dtype):
                return "holds a tensor record torch.save does not write"
            storage_numel //= torch._utils._element_size(dtype)
        if size is None or _ints(args[3]) is None:
            return f"holds a tensor of size {_cut(args[2])}, stride {_cut(args[3])}"
        numel = 1
        for s in size:
            numel *= s
        if numel > storage_numel:
            return (f"holds a tensor of {numel:,} elements over a storage of {storage_numel:,} (a view that repeats "
                    "its storage)")
    if name in _NUMPY_RECONSTRUCT and (len(args) < 2 or args[1] != (0,)):
        return f"rebuilds a numpy array at shape {_cut(args[1:2])}; numpy pickles every array at (0,)"
    return None


def torch_file_problem(path: str | Path, allowed: Iterable[str] = ()) -> str | None:
    """None when the torch file at ``path`` holds tensors and plain data only, plus instances of the classes named
    in ``allowed``, in about the memory of its own bytes; else what is wrong with it, one line (see the module)."""
    from torch import _weights_only_unpickler as wu

    allowed = frozenset(allowed)
    try:
        size = os.stat(path).st_size
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
            if not infos:
                return "is an empty zip file, not a torch.save file"
            problem = _zip_problem(infos, size)
            if problem:
                return problem
            prefix = infos[0].filename.split("/", 1)[0] + "/"  # torch's archive name: the first entry's folder
            entries = {i.filename: i.file_size for i in infos}
            if entries.get(prefix + "data.pkl") is None:
                return "is not a torch.save file (it has no data.pkl)"
            if entries[prefix + "data.pkl"] > MAX_PICKLE_BYTES:
                return (f"has a data.pkl of {entries[prefix + 'data.pkl']:,} bytes, more than the "
                        f"{MAX_PICKLE_BYTES:,} a torch.save of pc-pipelines' state holds")
            data = z.read(prefix + "data.pkl")
    except zipfile.BadZipFile:
        return "is not a torch.save zip file"
    except (OSError, EOFError, ValueError) as exc:
        return f"cannot be read as a zip file ({type(exc).__name__})"
    try:
        for _ in pickletools.genops(data):  # every opcode and length checked against the bytes there
            pass
        walk = _Walk(data)
        walk.load()
    except Exception as exc:
        return f"has a data.pkl that is not a pickle of tensors and plain data ({type(exc).__name__})"
    names = set(walk.globals)
    safe = set(wu._get_allowed_globals()) | set(wu._get_user_allowed_globals()) | allowed
    extra = sorted(names - safe)
    if extra:
        return f"holds objects other than tensors and plain data ({', '.join(extra)})"
    for storage in walk.storages:
        problem = _storage_problem(storage, entries, prefix)
        if problem:
            return problem
    callable_names = PLAIN_CALLS | allowed
    for call in walk.calls:
        problem = _call_problem(call, callable_names)
        if problem:
            return problem
    return None

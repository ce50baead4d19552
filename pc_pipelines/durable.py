"""Durable directories: written whole or not at all, verified against a manifest, set aside when damaged.

The one rule behind checkpoints (``run/checkpoints.py``), step directories (``store/steplog.py``) and warm starts
(``training/base_policy.py``); each keeps its own file names, manifest format and caller-specific checks.

**Writing** (:class:`Staging`, or :func:`write_dir` for the whole rule): files go into a temporary sibling
directory (``.tmp-<name>-<nonce>``, which no reader lists). :meth:`Staging.seal` fsyncs every file, then writes the
manifest (each file's name, size and sha256, plus the caller's fields) LAST and fsyncs it and the directory;
:meth:`Staging.publish` renames the directory into place and fsyncs the parent. A directory that is already there
is renamed aside first (``.old-<name>-<nonce>``), the new one renamed in, the old one deleted: a crash between the
two renames leaves the directory absent, never half old and half new. A process killed before the rename leaves
only the temporary directory; sweeping such leftovers (``.tmp-*``, ``.old-*``) is the caller's, which knows when
no other writer is at work.

**Verifying** (:func:`verify_dir`): every file the manifest lists is present with the listed size and, with
``checksums``, the listed sha256; the caller's hooks add its own checks (files it must list, what the manifest or
each file says about itself) and decide what a directory without a manifest (written before manifests) must hold.
The answer is None or what is wrong, in one line.

**Setting aside** (:func:`quarantine`): a damaged directory is renamed to a name no reader lists (default
``damaged-<name>`` beside it; ``-1``, ``-2``, ... when taken), kept for inspection.

**A file the user names** (:func:`write_user_output`: a plot's ``--out``, a report a script writes): what is at the
path decides how it is written, and nothing but a regular file is ever replaced. A new path or a regular file is
written whole (temporary sibling, fsync, rename); a symlink is written through to its target (the link stays); a
character device or FIFO (``/dev/null``, ``/dev/stdout``, a named pipe) is opened and written to; a block device, a
socket or a folder is refused with the fix (:class:`OutputRefused`). What the command reads (the store's catalog,
its ``.runs/`` tree, a checkpoint, an input) is never an output: :func:`check_user_output` refuses such a path before
anything is written, and before the work that makes the output (issue 54: `timeline --out` onto the catalog replaced
it with a PNG).

Manifest formats (:class:`JsonManifest`, :class:`Sha256Sums`) write byte-for-byte what their callers always wrote.
Standard library only: this is the package's bottom layer.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple


class Entry(NamedTuple):
    """One file of a manifest: its size in bytes (None: the format records none) and its sha256 (hex)."""

    size: int | None
    sha256: str


@dataclass
class Manifest:
    """A parsed manifest: the files it lists (relative POSIX names) and every other field the caller gave."""

    files: dict[str, Entry]
    fields: dict[str, Any] = field(default_factory=dict)


def _checked_name(name: Any) -> str:
    """A listed name: relative, normalized, inside the directory (a manifest names nothing elsewhere)."""
    if not isinstance(name, str) or not name or name.startswith("/") or any(
            part in ("", ".", "..") for part in name.split("/")):
        raise ValueError(f"{name!r} is not a file name inside the directory")
    return name


class JsonManifest:
    """A JSON manifest ``{<fields>..., "files": {name: {"size": n, "sha256": hex}}}``, indented by one space.
    ``order``: keys written first, in this order (``"files"`` among them); ``sort_keys``: every key sorted."""

    def __init__(self, name: str, order: Iterable[str] = (), sort_keys: bool = False) -> None:
        self.name, self.order, self.sort_keys = name, tuple(order), sort_keys

    def dump(self, manifest: Manifest) -> bytes:
        files = {n: {"size": e.size, "sha256": e.sha256} for n, e in manifest.files.items()}
        doc = {**manifest.fields, "files": files}
        doc = {**{k: doc[k] for k in self.order if k in doc}, **doc}
        return json.dumps(doc, indent=1, sort_keys=self.sort_keys).encode()

    def parse(self, raw: bytes) -> Manifest:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
            raise ValueError("no files object")
        files = {}
        for name, e in doc["files"].items():
            if not (isinstance(e, dict) and type(e.get("size")) is int and isinstance(e.get("sha256"), str)):
                raise ValueError(f"the entry of {name!r} is not {{size, sha256}}")
            files[_checked_name(name)] = Entry(e["size"], e["sha256"])
        return Manifest(files, {k: v for k, v in doc.items() if k != "files"})


class Sha256Sums:
    """``sha256sum``'s format: a line ``<sha256>  <name>`` per file, no sizes and no other fields."""

    def __init__(self, name: str = "SHA256SUMS") -> None:
        self.name = name

    def dump(self, manifest: Manifest) -> bytes:
        return "".join(f"{e.sha256}  {n}\n" for n, e in manifest.files.items()).encode()

    def parse(self, raw: bytes) -> Manifest:
        files = {}
        for i, line in enumerate(raw.decode().splitlines(), 1):
            digest, sep, name = line.partition("  ")
            if not sep:
                raise ValueError(f"line {i} is not '<sha256>  <name>'")
            files[_checked_name(name)] = Entry(None, digest)
        return Manifest(files)


ManifestFormat = JsonManifest | Sha256Sums


# ---- files and directories on disk ----------------------------------------------------------------------------------
def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fsync_dir(path: str | Path) -> None:
    """fsync a directory (its entries: files created, renamed or removed in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str | Path, data: bytes, replace: bool = False) -> None:
    """Write ``data`` to a new file (``replace``: or over an existing one) and fsync it before returning."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    fd = os.open(path, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


class OutputRefused(OSError):
    """A user-named output path that is not written (a folder, a block device, a socket, or what the command reads:
    :func:`check_user_output`): ``str(exc)`` says what it is and the fix, in one line. An OSError, so a caller's
    handler of write failures reports it too."""

    KIND_FIX = ("name a new file or a regular file (a symlink to one is written through), or a character device or "
                "FIFO to stream into")

    def __init__(self, path: str | Path, what: str, err: int, fix: str | None = None) -> None:
        self.path, self.what, self.fix = Path(path), what, fix or self.KIND_FIX
        super().__init__(err, f"{path} is {what}; it is not written over. Fix: {self.fix}")

    def __reduce__(self):
        return type(self), (self.path, self.what, self.errno, self.fix)

    def __str__(self) -> str:
        return self.strerror


READ_FIX = ("name a new file outside what the command reads (the store's catalog, its <catalog>.runs/ folder, the "
            "runs' checkpoints and its inputs)")


def _same_file(a: str | Path, b: str | Path) -> bool:
    try:
        return os.path.samestat(os.stat(a), os.stat(b))
    except (OSError, ValueError):
        return False


def read_clash(path: str | Path, reads: Iterable[tuple[str | Path, str]]) -> str | None:
    """What ``path`` (after its symlinks) is among ``reads`` (``(path, what it is)`` pairs: files and folders the
    command reads or keeps, e.g. ``(catalog, "the store's catalog")``): ``"<what> <real path>"`` when it is one of
    them (the same name, a link to it or a hard link of it), ``"inside <what> <real path>"`` when it lies under one of
    those folders; None when it is none of them."""
    real = os.path.realpath(path)
    for read, what in reads:
        target = os.path.realpath(read)
        if real == target or _same_file(path, read):
            return f"{what} {target}"
        if real.startswith(target.rstrip(os.sep) + os.sep):
            return f"inside {what} {target}"
    return None


def _refuse_clash(path: str | Path, reads: Iterable[tuple[str | Path, str]]) -> None:
    clash = read_clash(path, reads)
    if clash is not None:
        raise OutputRefused(path, f"{clash}, which this command reads", errno.EPERM, READ_FIX)


def _refuse_kind(path: str | Path, mode: int) -> None:
    """Raise :class:`OutputRefused` unless ``mode`` is a regular file, a character device or a FIFO."""
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return
    if stat.S_ISDIR(mode):
        raise OutputRefused(path, "a directory", errno.EISDIR)
    if stat.S_ISBLK(mode):
        raise OutputRefused(path, "a block device (a disk: a file's bytes written onto it destroy what it holds)",
                            errno.EPERM)
    if stat.S_ISSOCK(mode):
        raise OutputRefused(path, "a socket (it takes connections, not a file)", errno.ENXIO)
    raise OutputRefused(path, f"not a file (mode {stat.filemode(mode)})", errno.EPERM)


def check_user_output(path: str | Path, reads: Iterable[tuple[str | Path, str]] = (), *,
                      folder: bool = False) -> None:
    """Where a command may write a file the user named, checked before anything is written (and before the work
    that makes it): :class:`OutputRefused` with the fix when ``path`` (after symlinks) is, or lies inside, anything
    of ``reads`` (the store's catalog and its ``.runs/`` tree, a checkpoint, an input of the same command; see
    :func:`read_clash`), or when what is there cannot take a file (a folder, a block device, a socket: the rule of
    :func:`write_user_output`). ``folder``: ``path`` is a folder the command writes files into (a report's plots):
    only the clash is checked. :func:`write_user_output` checks the same before it writes."""
    _refuse_clash(path, reads)
    if folder or _descriptor(path)[1] is not None:
        return
    try:
        st = os.stat(path)
    except OSError:
        return  # nothing there yet (or a dangling link): written as a new file
    _refuse_kind(path, st.st_mode)


def _link_hops(path: str | Path) -> list[str]:
    """``path`` and each path its symlinks lead to, in order (the folders above each resolved, the last not)."""
    p, hops = os.path.abspath(path), []
    for _ in range(40):  # the kernel's own limit on symlinks followed
        p = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
        hops.append(p)
        if not os.path.islink(p):
            break
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return hops


def _descriptor(path: str | Path) -> tuple[bool, int | None]:
    """Whether ``path`` reaches its file through a process's descriptor table (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/<pid>/fd/N``: an open file of a running process, not a name to replace), and the descriptor's number
    when it is this process's own."""
    own = f"/proc/{os.getpid()}/fd"
    for hop in _link_hops(path):
        folder, name = os.path.split(hop)
        if folder == own and name.isdigit():
            return True, int(name)
        if folder.startswith("/proc/"):
            return True, None
    return False, None


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _stream_into(path: str | Path, data: bytes, flags: int) -> None:
    """Open what is at ``path`` (never creating, truncating or renaming it) and write ``data`` into it."""
    fd = os.open(path, os.O_WRONLY | flags)
    try:
        _write_fd(fd, data)
    finally:
        os.close(fd)


def _replace_file(final: Path, data: bytes, mode: int | None) -> None:
    """``data`` into a temporary sibling of ``final`` (``mode``: its permission bits, else the umask's), fsynced, then
    renamed over ``final`` and the folder fsynced: a reader sees the old file or the new one, never half of one."""
    tmp = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        write_file(tmp, data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(final.parent)


def write_user_output(path: str | Path, data: bytes, reads: Iterable[tuple[str | Path, str]] = ()) -> str:
    """Write ``data`` to the path a user named, by what is there (following symlinks):

    * nothing (a new path, or a symlink whose target does not exist yet): created whole through a temporary sibling
      and a rename (in the target's folder, for a symlink: the link stays a link);
    * a regular file: replaced whole the same way, keeping its permission bits;
    * this process's own descriptor (``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``: a pipe, a terminal, a
      socket, or a file a shell redirected it to): written to that descriptor, as ``print`` would (a shell's ``>>``
      keeps what it had); another process's open file (``/proc/<pid>/fd/N``) is appended to, never truncated;
    * a character device (``/dev/null``, a terminal) or a FIFO (``mkfifo``): opened for writing and written to, as
      ``cat > path`` would; a FIFO waits for its reader, as it does for any writer;
    * a folder, a block device (a disk: writing a file's bytes onto it destroys what it holds, never what a user
      means), a socket (nothing can open one) or anything else: :class:`OutputRefused`, with the fix.

    Nothing but a regular file is ever unlinked or renamed over. Returns how it was written: ``"created"``,
    ``"replaced"``, ``"streamed"`` (into a device, a FIFO or a descriptor) or ``"appended"``. Write failures raise
    the OSError they are. ``reads``: what the command reads; a path among them (or inside one) is refused before
    anything is written (:func:`check_user_output`)."""
    path = Path(path)
    _refuse_clash(path, reads)
    through, own_fd = _descriptor(path)
    if own_fd is not None:  # this process's own stdout (or other descriptor): written as print would
        try:
            st = os.fstat(own_fd)
        except OSError:
            st = None  # not open here: the path decides below
        if st is not None and not (stat.S_ISDIR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
            _write_fd(own_fd, data)
            return "streamed"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not os.path.islink(path):
            _replace_file(path, data, None)
            return "created"
        target = Path(os.path.realpath(path))  # a dangling link: its target is created, the link kept
        _replace_file(target, data, None)
        return "created"
    mode = st.st_mode
    if stat.S_ISREG(mode):
        if through:  # another process's open file
            _stream_into(path, data, os.O_APPEND)
            return "appended"
        _replace_file(Path(os.path.realpath(path)), data, stat.S_IMODE(mode))
        return "replaced"
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        _stream_into(path, data, 0)
        return "streamed"
    _refuse_kind(path, mode)
    raise AssertionError("unreachable: _refuse_kind refuses every other kind")


def seal(directory: str | Path, fmt: ManifestFormat, fields: Mapping[str, Any] | None = None,
         known: Mapping[str, Entry] | None = None, in_place: bool = True) -> Manifest:
    """fsync every file under ``directory`` (and its subdirectories), then write its manifest last: every file's
    name, size and sha256 (``known`` ones, already fsynced, as given) and ``fields``; then fsync the directory.
    ``in_place``: the directory is visible, so the manifest goes to ``<name>.tmp`` first and replaces the old one
    atomically; a staging directory (not in place) gets it directly, its rename making it visible."""
    directory = Path(directory)
    known = known or {}
    files, subdirs = {}, []
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if p.is_dir() and not p.is_symlink():
            subdirs.append(p)
        elif p.is_file() and rel not in (fmt.name, fmt.name + ".tmp"):
            if rel in known:
                files[rel] = known[rel]
                continue
            with open(p, "rb") as f:
                os.fsync(f.fileno())
            files[rel] = Entry(p.stat().st_size, sha256_file(p))
    for d in reversed(subdirs):  # deepest first: the entries of every file written
        fsync_dir(d)
    manifest = Manifest(files, dict(fields or {}))
    data = fmt.dump(manifest)
    if in_place:
        write_file(directory / (fmt.name + ".tmp"), data, replace=True)
        os.replace(directory / (fmt.name + ".tmp"), directory / fmt.name)
    else:
        write_file(directory / fmt.name, data, replace=True)
    fsync_dir(directory)
    return manifest


class Staging:
    """A directory being written: a temporary sibling of ``final`` (``tmp``, default ``.tmp-<name>-<nonce>``),
    created empty (a leftover of that name is removed first). Write files into :attr:`path` (through :meth:`write`
    or any writer), :meth:`seal` it, :meth:`publish` it; :meth:`discard` it on failure."""

    def __init__(self, final: str | Path, tmp: str | Path | None = None) -> None:
        self.final = Path(final)
        self.path = Path(tmp) if tmp is not None else self.final.with_name(
            f".tmp-{self.final.name}-{uuid.uuid4().hex[:8]}")
        self.known: dict[str, Entry] = {}
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.mkdir()

    def write(self, rel: str, data: bytes) -> None:
        """A new file ``rel`` holding ``data``, fsynced, its size and sha256 taken from ``data``."""
        write_file(self.path / rel, data)
        self.known[rel] = Entry(len(data), hashlib.sha256(data).hexdigest())

    def seal(self, fmt: ManifestFormat, fields: Mapping[str, Any] | None = None) -> Manifest:
        """Every file fsynced, the manifest last, the directory fsynced (:func:`seal`)."""
        return seal(self.path, fmt, fields, self.known, in_place=False)

    def publish(self, aside: str | Path | None = None) -> Path:
        """Rename the sealed directory to ``final`` and fsync the parent. One already there is renamed to ``aside``
        (default ``.old-<name>-<nonce>``) first and deleted after: a crash between the renames leaves neither."""
        parent = self.final.parent
        if os.path.lexists(self.final):
            old = Path(aside) if aside is not None else self.final.with_name(
                f".old-{self.final.name}-{uuid.uuid4().hex[:8]}")
            if os.path.lexists(old):  # a leftover of an earlier replacement under the same name: obsolete
                shutil.rmtree(old)
            os.rename(self.final, old)
            os.rename(self.path, self.final)
            fsync_dir(parent)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(self.path, self.final)
            fsync_dir(parent)
        return self.final

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def write_dir(final: str | Path, fill: Callable[[Staging], Mapping[str, Any] | None], fmt: ManifestFormat,
              tmp: str | Path | None = None, aside: str | Path | None = None) -> Path:
    """The whole rule: ``fill(staging)`` writes the files into ``staging.path`` and returns the manifest's fields
    (or None); then :meth:`Staging.seal` and :meth:`Staging.publish`. A failure before the rename removes the
    temporary directory and re-raises. Returns ``final``."""
    stage = Staging(final, tmp)
    try:
        stage.seal(fmt, fill(stage))
    except BaseException:
        stage.discard()
        raise
    return stage.publish(aside)


# ---- verifying -------------------------------------------------------------------------------------------------------
MESSAGES = {
    "manifest_missing": "{manifest} is missing",
    "manifest_unreadable": "{manifest} unreadable ({detail})",
    "manifest_damaged": "{manifest} is damaged ({detail})",
    "unlisted": "{manifest} lists no {names}",
    "missing": "{name} is missing",
    "unreadable": "{name} unreadable ({detail})",
    "size": "{name} is {found} bytes, the manifest says {listed} (truncated or replaced)",
    "sha256": "{name} has sha256 {found:.12}..., the manifest says {listed:.12}... (bytes changed)",
}
"""What :func:`verify_dir` says for each kind of damage; a caller may reword any (``messages``)."""


def verify_dir(
    directory: str | Path,
    fmt: ManifestFormat,
    checksums: bool = True,
    expect: Iterable[str] = (),
    check: Callable[[Manifest], str | None] | None = None,
    check_file: Callable[[str, bytes], str | None] | None = None,
    without_manifest: Callable[[], str | None] | None = None,
    messages: Mapping[str, str] | None = None,
) -> str | None:
    """None when ``directory`` matches its manifest; else what is wrong with it, in one line.

    In this order: the manifest is there (else ``without_manifest()`` decides, for directories written before
    manifests; without it: missing) and parses; it lists every name of ``expect``; ``check(manifest)`` (the
    caller's checks of its fields) finds nothing; every listed file (``expect`` first, in that order) is a file of
    the listed size; with ``checksums``, each has the listed sha256 and then ``check_file(name, its bytes)`` (the
    caller's check of what the file says it holds; given, each file is read whole) finds nothing. Plain ``os``
    calls on strings: readers verify many directories."""
    root = os.fspath(directory)
    text = {**MESSAGES, **(messages or {})}

    def say(kind: str, **kw: Any) -> str:
        return text[kind].format(manifest=fmt.name, **kw)

    try:
        with open(os.path.join(root, fmt.name), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return without_manifest() if without_manifest is not None else say("manifest_missing")
    except OSError as exc:
        return say("manifest_unreadable", detail=exc.strerror or exc)
    try:
        manifest = fmt.parse(raw)
    except ValueError as exc:
        return say("manifest_damaged", detail=exc)
    expect = list(dict.fromkeys(expect))
    lacking = [n for n in expect if n not in manifest.files]
    if lacking:
        return say("unlisted", names=", ".join(lacking))
    if check is not None:
        problem = check(manifest)
        if problem:
            return problem
    names = list(dict.fromkeys([*expect, *manifest.files]))
    for name in names:  # sizes first: cheap, and they catch truncated and missing files
        want = manifest.files[name]
        try:
            st = os.stat(os.path.join(root, name))
        except FileNotFoundError:
            return say("missing", name=name)
        except OSError as exc:
            return say("unreadable", name=name, detail=exc.strerror or exc)
        if not stat.S_ISREG(st.st_mode):
            return say("missing", name=name)
        if want.size is not None and st.st_size != want.size:
            return say("size", name=name, found=st.st_size, listed=want.size)
    if not checksums:
        return None
    for name in names:
        want = manifest.files[name]
        path = os.path.join(root, name)
        try:
            if check_file is None:
                data, digest = None, sha256_file(path)
            else:
                with open(path, "rb") as f:
                    data = f.read()
                digest = hashlib.sha256(data).hexdigest()
        except FileNotFoundError:
            return say("missing", name=name)
        except OSError as exc:
            return say("unreadable", name=name, detail=exc.strerror or exc)
        if digest != want.sha256:
            return say("sha256", name=name, found=digest, listed=want.sha256)
        if check_file is not None:
            problem = check_file(name, data)  # type: ignore[arg-type]
            if problem:
                return problem
    return None


# ---- setting aside ----------------------------------------------------------------------------------------------------
def quarantine(path: str | Path, dest: str | Path | None = None, tries: int = 1000) -> Path:
    """Move the directory ``path`` aside to ``dest`` (default ``damaged-<name>`` beside it; its parent is created),
    or to ``<dest>-1``, ``<dest>-2``, ... when taken, and fsync the directories it left and entered. Returns where
    it went; FileExistsError when all ``tries`` names are taken."""
    path = Path(path)
    dest = Path(dest) if dest is not None else path.with_name(f"damaged-{path.name}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    for k in range(tries):
        target = dest.with_name(dest.name + (f"-{k}" if k else ""))
        if not os.path.lexists(target):
            os.rename(path, target)
            fsync_dir(path.parent)
            if target.parent != path.parent:
                fsync_dir(target.parent)
            return target
    raise FileExistsError(errno.EEXIST, f"cannot move {path} aside: {dest.name} and {tries - 1} more names are taken",
                          str(dest))

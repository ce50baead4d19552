"""`pilot-commit` processes for the tests without paying Python's start-up each time (issue 53): a server process per
test worker imports torch, transformers and the CLI once, then forks one child per command. Each child is a process
of its own, as ``subprocess.run`` would start (its pid, its exit status, stdin / stdout / stderr on the test's pipes,
signals, ``atexit``), running the same entry point as ``python -m pc_pipelines.cli`` or the installed console
script; only the imports were done before the fork. A training command's start-up was ~3 s of CPU of its ~5 s.

A command whose environment changes what is read at import (``ATEN_CPU_CAPABILITY``, ``OMP_NUM_THREADS``,
``PYTHON*``, ...) starts a real interpreter instead, as does every command when ``PC_TEST_FORKSERVER=0``.
The server is started on first use, ends with its test process (its stdin closes), and is left out of
``proc_waits.descendants`` (its children are not).

Run as a script it is the server: ``python cli_forkserver.py SOCKET_PATH``."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

IMPORT_TIME_PREFIXES = ("PYTHON", "ATEN_", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS", "TORCH_", "LD_", "MALLOC",
                        "HF_", "TRANSFORMERS", "TOKENIZERS", "CUDA")
"""An environment variable with one of these prefixes whose value differs from the server's: a real interpreter
(Python, torch and transformers read them at start-up or import). Not ``RAY_`` / ``VLLM``: the server does not import
them (a child does, after the fork), and Ray's import sets ``RAY_CLIENT_MODE`` in the test process; nor
``TORCHINDUCTOR_``, which torch's compiler sets when a test first uses it."""
HANDLED = {"PYTHONUNBUFFERED", "PYTHONBREAKPOINT"}
"""Applied by the child: stdout / stderr written through; ``breakpoint()`` reads its variable when called (Ray's
``init`` sets it in the test process). ``PYTHONWARNINGS`` too, where the server started without it (the Dagster
webserver's CLI sets it in the test process): the child adds its filters as Python's start-up would."""
ENABLED_ENV = "PC_TEST_FORKSERVER"
LOG_ENV = "PC_TEST_FORKSERVER_LOG"
"""A file: each decision is appended to it (``pid forked|real KEYS``)."""
PRELOAD = ("torch", "transformers", "safetensors.torch", "torch.utils.tensorboard", "duckdb", "pyarrow.dataset",
           "math_verify", "pc_pipelines.cli", "pc_pipelines.run.local", "pc_pipelines.rewards")
"""Imported by the server before any fork: what a training command imports (a read-only command imports less, and
a child sees these already imported)."""
_MSG = struct.Struct("!I")
BASE_ENV = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
"""The environment the server starts with: this process's when the module was first imported (at collection,
before any test's ``monkeypatch.setenv``), so which test happens to start the server changes nothing."""


# ----------------------------------------------------------------------------------------------------------- client


class _Server:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="pcfs-")
        self.path = os.path.join(self.dir, "s")
        self.proc = subprocess.Popen([sys.executable, __file__, self.path], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=None, env=BASE_ENV, cwd="/")
        self.owner = os.getpid()
        deadline = time.monotonic() + 600  # a bound on the imports, for a machine under heavy load
        while not os.path.exists(self.path + ".ready"):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the CLI fork server exited with {self.proc.returncode} before it was ready")
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the CLI fork server was not ready after 600 s")
            time.sleep(0.02)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # the server's stdin at EOF: it exits
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_server: _Server | None = None
_lock = threading.Lock()


def server_pid() -> int | None:
    """The pid of this process's fork server, if it started one (proc_waits leaves it out of the descendants)."""
    return _server.proc.pid if _server is not None and _server.owner == os.getpid() else None


def _get_server() -> _Server:
    global _server
    with _lock:
        if _server is None or _server.owner != os.getpid() or _server.proc.poll() is not None:
            _server = _Server()
            import atexit

            atexit.register(_server.close)
        return _server


def usable(env: dict[str, str] | None) -> bool:
    """Whether a command with this environment can be forked from the server (else a real interpreter runs it)."""
    if os.environ.get(ENABLED_ENV, "1") == "0":
        return False
    env = dict(os.environ if env is None else env)
    handled = HANDLED | ({"PYTHONWARNINGS"} if "PYTHONWARNINGS" not in BASE_ENV else set())
    why = sorted(key for key in set(env) | set(BASE_ENV) if key not in handled and env.get(key) != BASE_ENV.get(key)
                 and key.startswith(IMPORT_TIME_PREFIXES))
    if os.environ.get(LOG_ENV):  # which commands ran in a real interpreter, and why (to keep the fallbacks rare)
        with open(os.environ[LOG_ENV], "a") as log:
            log.write(f"{os.getpid()} {'real' if why else 'forked'} {' '.join(why)}\n")
    return not why


def run(argv: list[str], *, entry: str, timeout: float | None, env: dict[str, str] | None,
        cwd: str | os.PathLike | None, stdout, text: bool, input: str | bytes | None) -> subprocess.CompletedProcess:
    """Like ``subprocess.run([*exe, *argv], stdout=stdout, stderr=PIPE, ...)``; ``entry``: ``"module"`` (``python -m
    pc_pipelines.cli``) or the console script's path."""
    server = _get_server()
    env = dict(os.environ if env is None else env)
    out_r = out_w = devnull = None
    if stdout == subprocess.PIPE:
        out_r, out_w = os.pipe()
        out_fd = out_w
    elif stdout is None:  # inherited, as a subprocess inherits this process's fd 1
        out_fd = 1
    elif stdout == subprocess.DEVNULL:
        out_fd = devnull = os.open(os.devnull, os.O_WRONLY)
    elif isinstance(stdout, int):
        out_fd = stdout
    else:
        out_fd = stdout.fileno()
    err_r, err_w = os.pipe()
    if input is not None:
        in_r, in_w = os.pipe()
        in_fd = in_r
    else:  # inherited, as a subprocess inherits this process's fd 0
        in_r = in_w = None
        in_fd = 0
    pipes = [fd for fd in (out_w, err_w, in_r, devnull) if fd is not None]
    request = json.dumps({"argv": list(argv), "entry": entry, "env": env,
                          "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd())}).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            conn.connect(server.path)
            socket.send_fds(conn, [_MSG.pack(len(request)) + request], [in_fd, out_fd, err_w])
        finally:  # the child holds its own copies now
            for fd in pipes:
                os.close(fd)
        pid = int(_recv_line(conn))
        chunks: dict[int, list[bytes]] = {}
        readers = [fd for fd in (out_r, err_r) if fd is not None]
        writer = None
        if in_w is not None:
            data = input.encode() if isinstance(input, str) else input
            writer = threading.Thread(target=_write_all, args=(in_w, data), daemon=True)
            writer.start()
        status = _collect(conn, readers, chunks, pid, timeout, [*argv])
        if writer is not None:
            writer.join(timeout=5)
    finally:
        conn.close()
        for fd in (out_r, err_r):
            if fd is not None:
                os.close(fd)
    out = b"".join(chunks.get(out_r, [])) if out_r is not None else None
    err = b"".join(chunks.get(err_r, []))
    if text:  # as subprocess's text mode: the locale's encoding, universal newlines
        import locale

        encoding = locale.getpreferredencoding(False)
        out = None if out is None else out.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")
        err = err.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")
    return subprocess.CompletedProcess(argv, status, out, err)


def _write_all(fd: int, data: bytes) -> None:
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BrokenPipeError:
        pass


def _recv_line(conn: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            raise RuntimeError("the CLI fork server closed the connection")
        buf += chunk
    return buf.strip()


def _collect(conn, readers, chunks, pid, timeout, argv) -> int:
    """Read the child's output until it closes, then its exit status (the server's second line); on timeout kill
    the child and raise ``subprocess.TimeoutExpired`` as ``subprocess.run`` does."""
    sel = selectors.DefaultSelector()
    for fd in readers:
        sel.register(fd, selectors.EVENT_READ)
    sel.register(conn, selectors.EVENT_READ)
    deadline = None if timeout is None else time.monotonic() + timeout
    status = None
    pending = b""
    while readers or status is None:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if deadline is not None and wait == 0.0:
            _kill(pid)
            raise subprocess.TimeoutExpired(argv, timeout)
        for key, _ in sel.select(wait):
            if key.fileobj is conn:
                data = conn.recv(64)
                if not data:
                    raise RuntimeError("the CLI fork server closed the connection before the exit status")
                pending += data
                if pending.endswith(b"\n"):
                    status = int(pending.strip())
                    sel.unregister(conn)
            else:
                data = os.read(key.fd, 65536)
                if data:
                    chunks.setdefault(key.fd, []).append(data)
                else:
                    sel.unregister(key.fd)
                    readers.remove(key.fd)
    sel.close()
    return status


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# ----------------------------------------------------------------------------------------------------------- server


def _serve(path: str) -> None:
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # an environment without it: its child imports what it needs
            importlib.import_module(name)
    import torch

    torch.random.default_generator.set_state(torch.Generator().get_state())  # as a fresh interpreter's
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    Path(path + ".ready").touch()
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    while True:
        for key, _ in sel.select(0.05):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                try:
                    pid = _spawn(conn, listener, children)
                except Exception as exc:  # a request that could not start: the client sees the closed connection
                    print(f"cli_forkserver: {exc!r}", file=sys.stderr)
                    conn.close()
                    continue
                children[pid] = conn
            elif not os.read(sys.stdin.fileno(), 1):  # the test process closed our stdin (or died): it is done
                for conn in children.values():
                    conn.close()
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)
                return
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                code = os.waitstatus_to_exitcode(status)
                with contextlib.suppress(OSError):
                    conn.sendall(f"{code}\n".encode())
                conn.close()


def _spawn(conn: socket.socket, listener: socket.socket, children: dict) -> int:
    head, fds, _, _ = socket.recv_fds(conn, _MSG.size, 3)
    (size,) = _MSG.unpack(head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise RuntimeError("request cut short")
        body += chunk
    request = json.loads(body)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            listener.close()
            conn.close()
            for other in children.values():
                other.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
        except BaseException:
            os._exit(70)
        _child(request)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    return pid


def _child(request: dict) -> None:
    import atexit
    import io
    import random
    import runpy
    import traceback

    code = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
        enc, errs = sys.stdout.encoding, sys.stdout.errors
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                     encoding=enc, errors=errs)
        for fd, name, err_mode in ((1, "stdout", errs), (2, "stderr", "backslashreplace")):
            raw = io.FileIO(fd, "w", closefd=False)
            binary = raw if unbuffered and fd == 1 else io.BufferedWriter(raw)
            stream = io.TextIOWrapper(binary, encoding=enc, errors=err_mode, line_buffering=raw.isatty() or fd == 2,
                                      write_through=unbuffered or fd == 2)
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)
        warn = request["env"].get("PYTHONWARNINGS")
        if warn and "PYTHONWARNINGS" not in BASE_ENV:  # as at an interpreter's start: sys.warnoptions, then filters
            import warnings

            options = [o for o in warn.split(",") if o]
            sys.warnoptions.extend(options)
            warnings._processoptions(options)
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        if request["entry"] == "module":
            sys.path[0] = os.getcwd()
            sys.argv = ["-m", *request["argv"]]  # run_module puts the module's file first, as `python -m` does
            runpy.run_module("pc_pipelines.cli", run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(request["entry"])
            sys.argv = [request["entry"], *request["argv"]]
            runpy.run_path(request["entry"], run_name="__main__")
        code = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        threading._shutdown()  # non-daemon threads, as at an interpreter's exit
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = 120
    except Exception:
        pass
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    if code == -signal.SIGINT:  # as Python ends on an uncaught Ctrl-C: killed by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


if __name__ == "__main__":
    sys.path[0] = "/"  # not this folder (tests/support); each child puts its own first entry there
    _serve(sys.argv[1])

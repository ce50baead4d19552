"""Shared by the reward tests: run a call on a fresh non-main thread (where SIGALRM cannot be used)."""

import threading
import time


def run_in_thread(fn, join_s: float = 60.0):
    """Runs fn on a fresh non-main thread; returns (result, wall seconds). Fails (instead of hanging) past join_s."""
    out: dict = {}

    def target():
        t0 = time.perf_counter()
        try:
            out["value"] = fn()
        except BaseException as e:  # any outcome of fn: re-raised below, on the calling thread
            out["error"] = e
        out["wall"] = time.perf_counter() - t0

    th = threading.Thread(target=target, name="not-main")
    th.start()
    th.join(join_s)
    assert not th.is_alive(), "grading on a non-main thread hung"
    if "error" in out:
        raise out["error"]
    return out["value"], out["wall"]

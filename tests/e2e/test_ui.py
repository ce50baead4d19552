"""The Dagster UI as `make ui` serves it: `dagster dev` on this repository's workspace.yaml with an instance made
from etc/dagster.yaml, the asset catalog and the global asset lineage rendered by headless Chromium.

The expected assets come from the loaded ``Definitions``, so the test follows the code location as assets are
added. Screenshots go to the test's tmp_path and, when ``PC_PIPELINES_ARTIFACTS`` is set, are copied there.
Chromium is required, never skipped: ``apt-get install -y chromium`` (``.ci/run`` installs it in CI)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "etc" / "dagster.yaml"
LOCATION = "pc_pipelines.definitions"  # workspace.yaml's python_module, which names the code location
STARTUP_TIMEOUT_S = 150
# Wide enough that the lineage graph is drawn at full node size (the full asset name is in each node's DOM);
# the screenshots use a laptop-sized window.
DOM_WINDOW = (3840, 2160)
SHOT_WINDOW = (1600, 1000)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(
        "The UI test renders the Dagster UI in headless Chromium and none is on PATH (chromium or "
        "chromium-browser). Install it: `apt-get install -y chromium` (with sudo when not root); .ci/run does.",
        pytrace=False,
    )


def expected_assets() -> tuple[list[list[str]], list[str]]:
    """Key paths and group names of the assets the code location defines, from its ``Definitions``. Stubs that
    Dagster makes for dependencies defined nowhere (e.g. ``deps=[AssetKey("benchmarks")]``) are left out: the
    UI hides them by default."""
    from pc_pipelines.definitions import defs

    graph = defs.resolve_asset_graph()
    nodes = [graph.get(key) for key in graph.get_all_asset_keys()]
    nodes = [node for node in nodes if not node.assets_def.is_auto_created_stub]
    assert nodes, "the code location defines no assets"
    return sorted(list(node.key.path) for node in nodes), sorted({node.group_name for node in nodes})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the process group led by ``proc`` (started with start_new_session), then SIGKILL what is left."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def sandbox_workspace(cwd: Path) -> Path:
    """This repository's workspace.yaml, copied into ``cwd`` with its working directories made absolute: the code
    location loads this checkout's code, while everything it resolves relative to the current directory (the
    default store ``runs/pc.duckdb`` that the advance_runs sensor opens on every tick, ``runs/data``) lands in
    ``cwd``, never in the checkout."""
    workspace = yaml.safe_load((ROOT / "workspace.yaml").read_text())
    for entry in workspace["load_from"]:
        for target in entry.values():
            if isinstance(target, dict):
                target["working_directory"] = str((ROOT / target.get("working_directory", ".")).resolve())
                if "relative_path" in target:
                    target["relative_path"] = str((ROOT / target["relative_path"]).resolve())
    path = cwd / "workspace.yaml"
    path.write_text(yaml.safe_dump(workspace))
    return path


def graphql(base: str, query: str, timeout: float = 10) -> dict:
    req = urllib.request.Request(
        f"{base}/graphql", data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


class Server:
    def __init__(self, base: str, log: Path):
        self.base, self.log = base, log

    def log_tail(self, n: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else "(no log)"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    chromium_binary()  # no Chromium: fail before the server start-up, not after it
    home = tmp_path_factory.mktemp("dagster-home")
    shutil.copy(TEMPLATE, home / "dagster.yaml")
    cwd = tmp_path_factory.mktemp("dagster-cwd")
    workspace = sandbox_workspace(cwd)
    log = home / "dagster-dev.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    keys, _ = expected_assets()
    # Its own session: `dagster dev` runs the webserver, the daemon and the code servers as children, and the
    # whole process group is stopped in the teardown.
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dagster", "dev", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(port)],
            cwd=cwd, env={**os.environ, "DAGSTER_HOME": str(home)}, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
    srv = Server(base, log)
    try:
        # Serving is not enough: wait until the code location has loaded and the webserver knows every asset.
        deadline, last = time.monotonic() + STARTUP_TIMEOUT_S, "nothing yet"
        while True:
            if proc.poll() is not None:
                pytest.fail(f"dagster dev exited with {proc.returncode} before serving\n{srv.log_tail()}")
            try:
                data = graphql(base, "{ assetNodes { assetKey { path } } }")
                served = sorted(node["assetKey"]["path"] for node in data["data"]["assetNodes"])
                if all(key in served for key in keys):
                    break
                last = f"assetNodes {served}, expected at least {keys}"
            except (urllib.error.URLError, OSError, KeyError, TypeError, ValueError) as e:
                last = repr(e)
            if time.monotonic() > deadline:
                pytest.fail(f"dagster dev did not serve all assets on {base} within {STARTUP_TIMEOUT_S} s "
                            f"(last: {last})\n{srv.log_tail()}")
            time.sleep(0.5)
        yield srv
    finally:
        kill_group(proc, grace_s=15)


def chromium(args: list[str], profile: Path, timeout: float = 90) -> str:
    """Headless Chromium in its own process group, with a throwaway profile; returns stdout."""
    cmd = [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-dev-shm-usage", "--no-first-run", f"--user-data-dir={profile}",
           "--virtual-time-budget=15000", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc, grace_s=2)
        pytest.fail(f"chromium timed out after {timeout} s: {' '.join(args)}")
    finally:
        kill_group(proc, grace_s=2)  # helper processes, if any outlived the browser
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {' '.join(args)}\n{err.decode()[-3000:]}"
    return out.decode(errors="replace")


def render_dom(url: str, patterns: dict[str, str], profile: Path, attempts: int = 3) -> tuple[str, list[str]]:
    """The rendered DOM of ``url`` and the names whose pattern it lacks; re-rendered (a loaded machine can be slow
    to draw the page) until nothing is missing."""
    for _ in range(attempts):
        dom = chromium([f"--window-size={DOM_WINDOW[0]},{DOM_WINDOW[1]}", "--dump-dom", url], profile)
        missing = [name for name, pattern in patterns.items() if not re.search(pattern, dom)]
        if not missing:
            break
    return dom, missing


def screenshot(url: str, path: Path, profile: Path) -> Path:
    chromium([f"--window-size={SHOT_WINDOW[0]},{SHOT_WINDOW[1]}", f"--screenshot={path}", url], profile)
    assert path.exists(), f"chromium wrote no screenshot to {path}"
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert len(data) > 20_000, f"{path} is only {len(data)} bytes"
    from PIL import Image

    with Image.open(path) as img:
        assert img.size == SHOT_WINDOW
        lo, hi = img.convert("L").getextrema()
        assert hi - lo > 64, f"{path} is (nearly) blank"
    if artifacts := os.environ.get("PC_PIPELINES_ARTIFACTS"):
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(artifacts) / path.name)
    return path


def missing_message(url: str, missing: list[str], dom: str) -> str:
    return f"{url}: {missing} not in the rendered DOM ({len(dom)} chars); DOM tail:\n{dom[-3000:]}"


def as_text(name: str) -> str:
    """A name as a whole element text or attribute value (``>name<``, ``="name"``), not part of a longer text."""
    return f"[>\"]{re.escape(name)}[<\"]"


def test_server_uses_the_template_run_queue(server):
    """The instance `make ui` makes from etc/dagster.yaml is accepted and limits each PC run to one segment."""
    cfg = graphql(server.base, "{ instance { runQueueConfig { maxConcurrentRuns tagConcurrencyLimitsYaml } } }")
    run_queue = cfg["data"]["instance"]["runQueueConfig"]
    assert run_queue is not None, f"no run queue configured: {cfg}\n{server.log_tail()}"
    limits = yaml.safe_load(run_queue["tagConcurrencyLimitsYaml"])
    assert {"key": "pc/run", "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in limits, limits


def test_catalog_lists_every_asset(server, tmp_path):
    """The asset catalog (/assets) has a row, with its link, for every asset key."""
    keys, _ = expected_assets()
    links = {"/".join(key): 'href="/assets/' + "/".join(urllib.parse.quote(p) for p in key) + '"' for key in keys}
    url = f"{server.base}/assets"
    dom, missing = render_dom(url, {name: re.escape(link) for name, link in links.items()}, tmp_path / "profile")
    assert not missing, missing_message(url, missing, dom)
    screenshot(url, tmp_path / "dagster-ui-catalog.png", tmp_path / "profile")


def test_lineage_graph_shows_every_asset(server, tmp_path):
    """The global asset lineage (/asset-groups) with every group expanded, through the `expanded` query parameter
    the UI itself writes: group ids are `global@global:<group>`, or `<repository>@<location>:<group>` under the
    per-code-location flag. Every group and every asset node (labelled with the last part of its key) is drawn."""
    keys, groups = expected_assets()
    expanded = [f"global@global:{g}" for g in groups] + [f"__repository__@{LOCATION}:{g}" for g in groups]
    url = f"{server.base}/asset-groups?" + urllib.parse.urlencode({"expanded": ",".join(expanded)})
    names = {key[-1] for key in keys} | set(groups)
    dom, missing = render_dom(url, {name: as_text(name) for name in sorted(names)}, tmp_path / "profile")
    assert not missing, missing_message(url, missing, dom)
    screenshot(url, tmp_path / "dagster-ui-asset-lineage.png", tmp_path / "profile")

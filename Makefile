# kdbench: `make help` lists the targets.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# `make test`'s pytest-xdist workers: one per core (at most 8), each with its share of the threads
TEST_WORKERS ?= auto

.PHONY: help install test test-fast demo lint keys bench-env bench gpu-check gpu-bundle

help:  ## list the targets
	@grep -E '^[a-z%-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install:  ## create .venv and install kdbench (editable) with the pinned versions of constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"

test:  ## the whole test suite (real-data tests run when KDBENCH_GLUE_DIR and KDBENCH_MODELS_DIR are set)
	$(BIN)/python -m pytest --numprocesses $(TEST_WORKERS) --maxprocesses 8 --dist loadfile

test-fast:  ## unit and config tests only
	$(BIN)/python -m pytest tests/unit tests/config

demo:  ## a small real distillation, MiniLM-L6 -> a 3-layer student on SST-2 (conf/experiment/demo.yaml)
	$(BIN)/python -m kdbench.run +experiment=demo $(ARGS)

sweep-%:  ## run an experiment preset's sweep: make sweep-mini_table1 (any conf/experiment/NAME.yaml)
	$(BIN)/python -m kdbench.run -m +experiment=$* $(ARGS)

report-%:  ## build the tables of a preset's sweep: make report-mini_table1 (into results/NAME)
	$(BIN)/python -m kdbench.report multirun/$* --out results/$* $(ARGS)

study-%:  ## a preset from nothing to tables: its sweep, the fine-tuning grids if task-agnostic, the report (results/NAME)
	$(BIN)/python -m kdbench.study $* $(ARGS)

lint:  ## ruff: the checks, and the format (lines of at most 100 characters)
	$(BIN)/ruff check src tests benchmarks experiments
	$(BIN)/ruff format --check src tests benchmarks experiments

keys:  ## write docs/keys.md, the config key reference, from the keys' declarations
	$(BIN)/python -m kdbench.planning.keys > docs/keys.md

bench-env:  ## .venv-bench: kdbench + the peers it is benchmarked against (TextBrewer), torch pinned
	test -x .venv-bench/bin/python || $(PYTHON) -m venv .venv-bench
	.venv-bench/bin/python -m pip install --quiet -c constraints.txt -e .
	.venv-bench/bin/python -m pip install --quiet --no-deps -r benchmarks/requirements.txt

bench:  ## the side-by-side benchmarks (kdbench vs a plain HF loop vs TextBrewer) -> benchmarks/RESULTS.md
	.venv-bench/bin/python benchmarks/run.py $(ARGS)

GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)

gpu-check:  ## one call of <= 9 min on a CUDA machine: gpu tests, benches, peers, a profile, the user's command (a dry run without CUDA)
	$(GPU_PYTHON) benchmarks/gpu_check.py $(if $(GPU_OUT),--out $(GPU_OUT))

gpu-bundle:  ## .gpu-bundle/: the wheels, MiniLM-L6 (fp16) and SST-2 an offline GPU machine needs (docs/speed.md)
	$(BIN)/python benchmarks/gpu_bundle.py

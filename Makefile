# Two commands set everything up: `make demo` and `make test` (README.md).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# torch first and pinned: 2.13.0 is a CPU build; an unpinned torch pulls a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
# The strict editable install links each file: reinstall when a module or spec is added or removed.
SOURCES := pyproject.toml $(shell find src parsers analytics runners -name '*.py' -o -name '*.toml' 2>/dev/null | sort)
STAMP := $(VENV)/.installed-$(shell echo $(SOURCES) | cksum | cut -d' ' -f1)

.PHONY: install demo test test-fast lint format bench slurm-up slurm-down run-gpt2-52b clean

install: $(STAMP)

$(STAMP): $(SOURCES)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q $(TORCH_PIN)
	# deepspeed's setup.py imports torch: build it against the torch just installed.
	$(BIN)/python -m pip install -q --no-build-isolation -e '.[train,dev]' --config-settings editable_mode=strict
	rm -f $(VENV)/.installed-*
	touch $@

demo: install
	@echo "== logstat parse fixtures/ --tflops (bundled real logs) ==" >&2
	$(BIN)/logstat parse fixtures/ --tflops
	@echo "== logstat table fixtures/ ==" >&2
	$(BIN)/logstat table fixtures/

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info

# A single-node Slurm cluster on this machine (tests/slurm_cluster.py; README "Slurm"). Standard library only.
slurm-up:
	$(PYTHON) tests/slurm_cluster.py up

slurm-down:
	$(PYTHON) tests/slurm_cluster.py down

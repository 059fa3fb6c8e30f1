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
	$(BIN)/ruff format --check .
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

# The seed's 52B GPT-2 benchmark (runners/specs/gpt2-52b-megatron-ds.toml). With sbatch on PATH and a
# Slurm controller answering, submit it; else print the rendered plan and its estimate (memory per GPU,
# pipeline efficiency, days for 100B tokens), then train a tiny variant here on 2 CPU processes and print
# its `logstat parse --tflops` row. Megatron-DeepSpeed needs CUDA, so on CPU the tiny DDP+PowerSGD spec
# (Megatron-format log) is the one that runs. Force a path with RUN_BACKEND=slurm|local.
RUN_SPEC ?= gpt2-52b-megatron-ds
RUN_TINY ?= gpt2-tiny-ddp-powersgd
RUN_BACKEND ?= $(shell command -v sbatch >/dev/null 2>&1 && sinfo -h >/dev/null 2>&1 && echo slurm || echo local)
run-gpt2-52b: install
	@if [ "$(RUN_BACKEND)" = slurm ]; then \
		$(BIN)/logstat run $(RUN_SPEC) --backend slurm; \
	else \
		echo "== no Slurm here: the plan of $(RUN_SPEC), then $(RUN_TINY) on this host ==" >&2; \
		$(BIN)/logstat run $(RUN_SPEC) --dry-run && \
		run_dir=$$($(BIN)/logstat run $(RUN_TINY) --backend local) && \
		$(BIN)/logstat parse "$$run_dir" --tflops; \
	fi

# Issue 6: logstat parse against the seed's perl one-liner and grep on a >= 1 GB corpus (bench-corpus/,
# git-ignored, reused while its sources are unchanged). Minutes; not part of `make test`. BENCH_ARGS=--runs 5 ...
bench: install
	$(BIN)/python tests/bench/run_bench.py $(BENCH_ARGS)

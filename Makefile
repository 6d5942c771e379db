# Three commands for a fresh machine: `make run` (the default benchmark), `make test` (the fast tier of the tests) and
# `make check` (the default run against the shipped reference, docs/check.md). They create .venv from the pinned
# lock file when it is missing or older than the lock; `make install` does only that.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PARITY := .parity
# The CPU build of torch by default, as the lock pins it (torch==…+cpu): from this machine's pip sources (a wheel
# folder as find-links, mirrors of the indexes: pip config) or else the PyTorch CPU index (or a mirror of it), for
# torch alone; where neither has it, PyPI's CUDA build, said so (requirements/install.py). GPU nodes: `make run
# CUDA=1` installs PyPI's CUDA 13 build of the lock's torch with its CUDA wheels pinned by requirements/lock-gpu.txt;
# or another CUDA build from PyTorch's index, e.g.  make run TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
TORCH_CPU_INDEX_URL ?= https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?=
CUDA ?=
CORES ?= all
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: install run test test-all check reference bench docs lint dry-run validate audit compare prefetch lock digest clean

$(BIN)/.installed: requirements/lock.txt requirements/lock-gpu.txt requirements/install.py pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python requirements/install.py torch --cpu-index $(TORCH_CPU_INDEX_URL) $(if $(CUDA),--cuda)$(if $(TORCH_INDEX_URL), --index-url $(TORCH_INDEX_URL))
	$(BIN)/python requirements/install.py lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

# Install only: .venv from the lock, nothing run.
install: $(BIN)/.installed

# The default run's longest chain is pbmc68k_batched's: gene tables, 18 sciLaMA runs, then its scoring
# (one process, ≈ 1.5 min with an empty JAX cache): it goes first so that lineage jobs fill the gaps
# instead of the scoring ending the run alone.
# results/default/ holds its scores: `default` is the name in config/config.yaml.
run: $(BIN)/.installed
	$(BIN)/snakemake --cores $(CORES) --prioritize results/default/scores/pbmc68k_batched.parquet
	@echo "Leaderboard: $(abspath results/default/leaderboard.md)"
	@echo "Report:      $(abspath results/default/index.html)"

# The fast tier: every test but the end-to-end (`e2e`: Snakemake in a subprocess) and `slow` ones, a few minutes on
# two cores — what a contributor runs before each commit. `make test-all` runs every test; it is what CI runs.
# --durations: the slowest tests, so that the suite's own cost stays visible
test: $(BIN)/.installed $(PARITY)/.installed
	$(BIN)/python -m pytest -m "not e2e and not slow" --durations=10

test-all: $(BIN)/.installed $(PARITY)/.installed
	$(BIN)/python -m pytest --durations=15

# Test-only packages that celldag must agree with (requirements/parity.txt), apart from .venv: the tests find them
# in .parity/ and skip, saying so, where it is absent.
$(PARITY)/.installed: requirements/parity.txt $(BIN)/.installed
	rm -rf $(PARITY)
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes --target $(PARITY) -r requirements/parity.txt
	touch $@

# Does this installation reproduce the release? The default run (made where missing or not current: Snakemake reruns
# nothing otherwise), its scores held against the shipped reference/default (docs/check.md): one verdict, the
# environment that differs, this machine's cost per rule. Exit 0 when nothing changed beyond noise.
check: run
	$(BIN)/celldag check

# The reference of the default run, for a release or a lab's own cluster (docs/check.md): the default run, the same on
# more seeds and perturbed reruns (config/reference.yaml), ≈ 13× the default run's time (≈ 1 h 30 min on 2 cores);
# writes reference/default/.
reference: $(BIN)/.installed
	$(BIN)/celldag reference --cores $(CORES)

# Speed against named peers (benchmarks/run_all.py): writes docs/performance.md and docs/performance-scaling.png
bench: $(BIN)/.installed $(PARITY)/.installed
	$(BIN)/python -m pip install --quiet -r requirements/bench.txt
	$(BIN)/python benchmarks/run_all.py

# The doc site (mkdocs.yml): every page of docs/ and the API from the docstrings, MkDocs Material with search, into
# site/ (open site/index.html; nothing is served or published). Strict: a dead link or anchor, a page left out of the
# nav or a docstring griffe cannot read fails the build. Installs requirements/docs.txt into .venv first.
docs: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -r requirements/docs.txt
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site
	@echo "Site: $(abspath site/index.html)"

# Check datasets of the registry without running anything: make validate DATASETS="pbmc68k_batched my_lab_data"
validate: $(BIN)/.installed
	$(BIN)/celldag validate $(DATASETS)

# Check finished results against their records, re-running a sample: make audit AUDIT_ARGS="--sample 5" (docs/audit.md)
audit: $(BIN)/.installed
	$(BIN)/celldag audit $(AUDIT_ARGS)

# A release check: store a results folder as the baseline, `make run`, then compare the new results with it
# score by score (docs/compare.md): make compare BASELINE=path/to/results/default
compare: $(BIN)/.installed
	$(if $(BASELINE),,$(error make compare needs the stored results folder to compare with: make compare BASELINE=path/to/results/default (docs/compare.md)))
	$(BIN)/celldag compare $(BASELINE) results/default --out results/compare

# On a machine with internet, fill a download mirror for compute nodes without it (docs/mirror.md):
#   make prefetch MIRROR=/shared/celldag-mirror [CONFIG=config/presets/paper.yaml]; without MIRROR: the config's downloads.mirror or $CELLDAG_MIRROR
prefetch: $(BIN)/.installed
	$(BIN)/celldag prefetch $(if $(MIRROR),--dest $(MIRROR)) $(if $(CONFIG),--configfile $(CONFIG))

lint: $(BIN)/.installed
	$(BIN)/ruff check src workflow tests benchmarks
	$(BIN)/ruff format --check src workflow tests benchmarks
	$(BIN)/lint-imports --no-cache --no-logo  # the floors and no cycles: pyproject.toml [tool.importlinter]
	$(BIN)/snakemake --lint

dry-run: $(BIN)/.installed
	$(BIN)/snakemake -n

# Re-resolve the lock from pyproject's ranges (review the diff before committing it). The lock pins the CPU build of
# torch, +cpu kept: a venv holding another build (CUDA=1, or PyPI's where the CPU build was out of reach) is refused.
lock: $(BIN)/.installed
	{ head -1 requirements/lock.txt; $(BIN)/python -m pip freeze --exclude-editable; } > requirements/lock.tmp
	grep -q '^torch==.*+cpu$$' requirements/lock.tmp || { rm requirements/lock.tmp; \
		echo "make lock: .venv's torch is not the CPU build (+cpu) the lock pins: remove .venv, then make install" >&2; exit 1; }
	mv requirements/lock.tmp requirements/lock.txt

# After any change of src/celldag: the digest the workflow names of the package it goes with (workflow/celldag-source.sha256;
# a workflow read from github(...) or a URL refuses an installed celldag whose source differs; celldag.release)
digest: $(BIN)/.installed
	$(BIN)/python -m celldag.release

clean:
	rm -rf results .snakemake

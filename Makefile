# Two entry points, each setting up what it needs on a fresh machine:
#   make demo   needs Python 3.11 (and npm for an EKS stack): installs the GKE components
#               and the local rehearsal only, then plans the default stack (gke-dev)
#               offline, rehearses its smoke Job along the preemption path the plan
#               found, and checks the example manifests against the same stack
#   make test   needs Python 3.11 and npm: the whole development toolchain, lint, format
#               check and the test suite (starts its own emulators)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DEMO_STAMP := $(VENV)/.demo-stamp
STACK  ?= gke-dev
# pip byte-compiles one file at a time; COMPILE does it on every core once the install is
# done (a fresh CI machine: about a minute less). Left to the tests' processes instead, the
# compiling cost the suite two and a half minutes: torch's trainers start by the hundred.
# A file no interpreter of ours can compile (some packages ship Python 2 samples) is skipped.
# Not the Pulumi providers and the Kubernetes SDKs, which only plans, Pulumi programs and the
# drill import (no trainer, emulator or worker): 500 of the environment's 730 MB of sources,
# 140 of the 250 CPU-seconds compileall took, of which a plan imports 14 to 40 MB. Their
# modules are compiled by the first process that imports them, which writes the bytecode for
# the rest: every recipe here runs without PYTHONDONTWRITEBYTECODE (CI images set it), which
# would have each process compile them again.
PIP    := $(BIN)/pip install --disable-pip-version-check --progress-bar on --no-compile -c constraints.txt
COMPILE = $(BIN)/python -m compileall -q -j 0 \
	-x '/(pulumi_(aws|azure_native|gcp|kubernetes)|kubernetes)/' $(VENV)/lib >/dev/null || true
unexport PYTHONDONTWRITEBYTECODE
# make test's environment is installed by uv (pinned in constraints.txt, put in by pip),
# from PyPI or UV_DEFAULT_INDEX (uv reads no pip.conf): 15 CPU-seconds where pip took 110,
# as it unpacks wheels in parallel into its cache (~/.cache/uv) and links them from there,
# as the tests' own environments do (tests/venvs.py). torch is still pip's (see TORCH_CPU).
UV_PIP  = $(BIN)/uv pip install --python $(BIN)/python -c constraints.txt
# The package itself, before the tests: see the test target.
COMPILE_PACKAGE = $(BIN)/python -m compileall -q -j 0 components >/dev/null
# PyPI's torch for Linux x86_64 is the CUDA build (about 5 GiB with its NVIDIA libraries);
# the CPU build, all the demo and the tests need, is on PyTorch's own index. It goes in
# first, alone and without its dependencies (the main install brings those), so that index
# is asked about torch only: a machine that cannot reach it falls back to the indexes it
# has after a few seconds of retries. Elsewhere (macOS, aarch64) PyPI's torch is the CPU one.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_CPU = $(if $(filter Linux-x86_64,$(shell uname -s)-$(shell uname -m)),\
	$(PIP) --no-deps torch --extra-index-url $(TORCH_CPU_INDEX),true)

.PHONY: demo test check lint plan bench dist clean postgres-server prometheus-tools

# Empty: the emulator of the store the stack's Job writes to (gs:// -> fake-gcs-server).
STORE  ?=

$(STAMP): pyproject.toml constraints.txt package-lock.json
	@echo "==> make test: setting up $(VENV) with the development toolchain (a few minutes)"
	$(PYTHON) -m venv $(VENV)
	$(TORCH_CPU)
	$(PIP) uv
	$(UV_PIP) -e '.[dev]'
	$(COMPILE)
	@echo "==> npm ci: Azurite and Karpenter's published schemas"
	npm ci --no-audit --no-fund --loglevel=error
	touch $(STAMP) $(DEMO_STAMP)

# The demo's own, smaller set: the GKE, EKS or AKS components of its stack and the local
# rehearsal (its emulators, torch on CPU, the timeline). A tree set up by `make test`
# already has it all.
$(DEMO_STAMP): pyproject.toml constraints.txt
	@echo "==> make demo: setting up $(VENV) with spotproof[$(DEMO_EXTRA),smoke] (a minute or two)"
	$(PYTHON) -m venv $(VENV)
	$(TORCH_CPU)
	$(PIP) -e '.[$(DEMO_EXTRA),smoke]'
	$(COMPILE)
	touch $(DEMO_STAMP)

DEMO_EXTRA = $(if $(filter eks-%,$(STACK)),aws,$(if $(filter aks-%,$(STACK)),azure,gcp))

demo: $(DEMO_STAMP)
	@$(if $(filter eks-%,$(STACK)),test -d node_modules || npm ci --no-audit --no-fund --loglevel=error,true)
	@echo "==> 1/3 spotproof plan --stack $(STACK): the whole Pulumi program, offline"
	$(BIN)/spotproof plan --stack $(STACK) --out out/$(STACK) --json out/$(STACK).json
	@echo "==> 2/3 spotproof smoke --stack $(STACK): a real training run, preempted on purpose"
	$(BIN)/spotproof smoke --stack $(STACK) $(if $(STORE),--store $(STORE)) --json out/smoke-$(STACK).json
	@echo "==> 3/3 spotproof check examples/ --stack $(STACK): hand-written manifests"
	$(BIN)/spotproof check examples/ --stack $(STACK)

# The package is installed editable, so its modules are compiled from components/ on every
# import unless their bytecode is there; where PYTHONDONTWRITEBYTECODE is set (CI images set
# it) no process wrote it, and each of the suite's few thousand Python processes compiled
# what it imported again (a trainer about 0.3 s, a plan more). compileall writes it ahead, on
# every core, rather than the first test of each worker at once; a module edited since is
# compiled afresh by the next import, as Python checks the source.
test: $(STAMP) lint postgres-server prometheus-tools
	$(COMPILE_PACKAGE)
	$(BIN)/pytest

# The inner loop: lint, then every test that starts no process of its own (no trainer,
# torchrun, pip, Node.js or Prometheus; the session's store emulators still start). CI runs
# `make test`, all of it.
check: $(STAMP) lint
	$(COMPILE_PACKAGE)
	$(BIN)/pytest -m "not processes"

# The batch tests UPSERT results into a real PostgreSQL; Debian's server package, if absent.
postgres-server:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		(apt-get update -qq && apt-get install -y -qq postgresql >/dev/null)

# The alert rules are checked and unit-tested with the real promtool (and the metrics with a
# real Prometheus): Debian's prometheus package, if absent, without the node exporter it
# recommends.
prometheus-tools:
	@command -v promtool >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		 apt-get install -y -qq --no-install-recommends prometheus >/dev/null)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

plan: demo

# Each prints its rows with the limit and the strongest peer measured in the same run;
# checkpoint_io.py and gang_io.py rewrite their tables in docs/performance.md from their runs.
bench: $(STAMP)
	$(BIN)/python benchmarks/checkpoint_io.py --readme docs/performance.md
	$(BIN)/python benchmarks/gang_io.py --readme docs/performance.md
	$(BIN)/python benchmarks/training_throughput.py --readme docs/performance.md
	$(BIN)/python benchmarks/batch_throughput.py
	$(BIN)/python benchmarks/capacity.py --readme docs/performance.md
	$(BIN)/python benchmarks/tier_resume.py --sizes 64 512 2048
	$(BIN)/python benchmarks/gang_goodput.py --readme docs/performance.md
	$(BIN)/python benchmarks/goodput.py

# The release artifacts: Karpenter's published schemas bundled into the package (so an EKS
# plan from a pip install needs Node.js but no npm install), then the sdist and the wheel.
dist: $(STAMP)
	scripts/bundle_karpenter_schemas.sh
	rm -rf dist
	$(BIN)/python -m build --outdir dist

clean:
	rm -rf $(VENV) node_modules out dist build .pytest_cache .ruff_cache \
		components/spotproof/plan/schemas/karpenter_schemas

# Two entry points, both self-bootstrapping on a fresh machine with Python 3.11 and npm:
#   make demo   offline plan of the default stack (gke-dev), then a local rehearsal of its
#               smoke Job along the preemption path the plan found, then the example
#               manifests checked against the same stack
#   make test   lint, format check and the whole test suite (starts its own emulators)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
STACK  ?= gke-dev

.PHONY: demo test lint plan bench dist clean postgres-server

# Empty: the emulator of the store the stack's Job writes to (gs:// -> fake-gcs-server).
STORE  ?=

$(STAMP): pyproject.toml constraints.txt package-lock.json
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	npm ci --no-audit --no-fund --loglevel=error
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/spotproof plan --stack $(STACK) --out out/$(STACK) --json out/$(STACK).json
	$(BIN)/spotproof smoke --stack $(STACK) $(if $(STORE),--store $(STORE)) --json out/smoke-$(STACK).json
	$(BIN)/spotproof check examples/ --stack $(STACK)

test: $(STAMP) lint postgres-server
	$(BIN)/pytest

# The batch tests UPSERT results into a real PostgreSQL; Debian's server package, if absent.
postgres-server:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		(apt-get update -qq && apt-get install -y -qq postgresql >/dev/null)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

plan: demo

# Each prints its rows with the limit and the strongest peer measured in the same run;
# checkpoint_io.py rewrites the README's table from its run.
bench: $(STAMP)
	$(BIN)/python benchmarks/checkpoint_io.py --readme README.md
	$(BIN)/python benchmarks/gang_io.py --readme README.md
	$(BIN)/python benchmarks/training_throughput.py
	$(BIN)/python benchmarks/batch_throughput.py
	$(BIN)/python benchmarks/capacity.py
	$(BIN)/python benchmarks/goodput.py

# The release artifacts: Karpenter's published schemas bundled into the package (so an EKS
# plan from a pip install needs Node.js but no npm install), then the sdist and the wheel.
dist: $(STAMP)
	scripts/bundle_karpenter_schemas.sh
	rm -rf dist
	$(BIN)/python -m build --outdir dist

clean:
	rm -rf $(VENV) node_modules out dist build .pytest_cache .ruff_cache \
		components/spotproof/plan/karpenter_schemas

# Two entry points do all set-up on a fresh machine:  `make run`  and  `make test`.
# Both create .venv, install torch==2.13.0 first (so no other torch build is pulled in), then
# the project's requirements and the project itself (editable: the `explorer` command), then fetch
# and convert the two embedded models once (SmolLM2-135M-Instruct and Gemma-3-270M).

VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# The project itself, installed editable so the `explorer` command works from any folder.
EDITABLE := $(VENV)/.editable
# The test suite keeps its caches (converted model, indexes) inside the checkout.
TEST_ENV := EXPLORER_CACHE=$(CURDIR)/.cache HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Two pytest workers, one torch thread each, a test file per worker at a time (files share their
# fixtures: one app, one browser), the files with the most slow tests first (tests/conftest.py orders
# them; xdist keeps that order), so no long file starts last. TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
TEST_PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

.PHONY: install run test test-fast lint bench model test-model browser axe gallery phoenix clean

$(STAMP): requirements.txt requirements-dev.txt
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -r requirements.txt -r requirements-dev.txt
	touch $(STAMP)

$(EDITABLE): $(STAMP) pyproject.toml
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
	touch $(EDITABLE)

install: $(STAMP) $(EDITABLE)

model: install
	$(PY) -m explorer model fetch --model all

test-model: install
	$(TEST_ENV) $(PY) -m explorer model fetch --model all

# Debian's chromium for the browser tests (never a downloaded browser build).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" = "0" ]; then (apt-get update -qq && apt-get install -y -qq chromium >/dev/null); \
		else echo "browser tests need /usr/bin/chromium: sudo apt-get install chromium"; exit 1; fi; \
	fi

# axe-core, pinned in package-lock.json, for the browser tests' accessibility checks: npm from Debian
# where it is missing (as root, like chromium), then `npm ci`. Without npm the checks skip, saying why.
node_modules/.package-lock.json: package.json package-lock.json
	@if ! command -v npm >/dev/null 2>&1 && [ "$$(id -u)" = "0" ]; then \
		(apt-get update -qq && apt-get install -y -qq npm >/dev/null) || true; \
	fi
	@if command -v npm >/dev/null 2>&1; then npm ci --no-audit --no-fund --loglevel=error; \
	else echo "npm not found (sudo apt-get install npm): the accessibility checks (axe-core) will be skipped"; fi

axe: node_modules/.package-lock.json

# Arize Phoenix, for the test that reads exported runs back through Phoenix's own API: a venv of its
# own (it pins versions the app's environment does not share, e.g. python-dateutil), version in
# requirements-phoenix.txt. Without network the test skips, saying why.
PHOENIX_VENV := .cache/phoenix-venv
$(PHOENIX_VENV)/.installed: requirements-phoenix.txt
	@python3 -m venv $(PHOENIX_VENV) && $(PHOENIX_VENV)/bin/pip install --quiet -r requirements-phoenix.txt \
		&& touch $@ || echo "could not install Arize Phoenix (no network?): its test will be skipped"

phoenix: $(PHOENIX_VENV)/.installed

# The recorded case-study runs the app opens with (assets/gallery): recorded again only when the
# shipped traces are of another trace version than the explorer writes (or missing).
gallery: install model
	$(PY) -m explorer.ui.runs.gallery --if-stale

run: install model gallery
	$(PY) app.py

test: install test-model browser axe phoenix
	$(PY) -m ruff check .
	$(TEST_ENV) OMP_NUM_THREADS=1 $(PY) -m pytest -q --durations=25 $(TEST_PARALLEL)

test-fast: install test-model
	$(TEST_ENV) OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not slow and not browser" $(TEST_PARALLEL)

lint: install
	$(PY) -m ruff check .

bench: install model
	$(PY) -m benchmarks.bench_engine
	$(PY) -m benchmarks.bench_retrieval
	$(PY) -m benchmarks.calibrate_thresholds

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts .cache node_modules

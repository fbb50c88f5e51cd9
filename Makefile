# Two entry points do all set-up on a fresh machine:  `make run`  and  `make test`.
# Both create .venv, install torch==2.13.0 first (so no other torch build is pulled in), then
# the project's requirements, then fetch and convert the embedded model once.

VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: install run test test-fast lint bench model browser clean

$(STAMP): requirements.txt requirements-dev.txt
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -r requirements.txt -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

model: install
	$(PY) -m explorer model fetch

# Debian's chromium for the browser tests (never a downloaded browser build).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" = "0" ]; then (apt-get update -qq && apt-get install -y -qq chromium >/dev/null); \
		else echo "browser tests need /usr/bin/chromium: sudo apt-get install chromium"; fi; \
	fi

run: install model
	$(PY) app.py

test: install model browser
	$(PY) -m ruff check .
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow and not browser"

lint: install
	$(PY) -m ruff check .

bench: install model
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts

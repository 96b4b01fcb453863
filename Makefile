# Shortcuts; the README's two commands work without make.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: venv serve test lint format check

$(PY):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test]'

venv: $(PY)

serve: $(PY)
	$(VENV)/bin/engram serve

test: $(PY)
	$(PY) -m pytest

lint: $(PY)
	$(VENV)/bin/ruff check app tests alembic
	$(VENV)/bin/ruff format --check app tests alembic

format: $(PY)
	$(VENV)/bin/ruff format app tests alembic
	$(VENV)/bin/ruff check --fix app tests alembic

check: lint test

# The console's scripts (app/console/web -> app/console/static/dist); pip install runs this too.
.PHONY: console
console:
	cd app/console/web && npm ci --no-audit --no-fund && npm run build

# The console pictures of the docs (docs/pages/guides/console.md), taken by the browser tests.
.PHONY: screenshots
screenshots: $(PY)
	ENGRAM_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/pages/img $(PY) -m pytest -o addopts="" -n 0 tests/console/test_browser.py -k search_edit

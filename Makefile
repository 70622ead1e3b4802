# The two commands a newcomer needs: `make run` and `make test`. Each sets itself up.
VENV := .venv
PY := $(VENV)/bin/python
SPEC := tests/contract/node_modules/@octokit/openapi/package.json

.PHONY: run demo test lint install

$(VENV)/installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

$(SPEC): tests/contract/package.json tests/contract/package-lock.json
	npm ci --prefix tests/contract --no-audit --no-fund --loglevel=error
	touch $@

install: $(VENV)/installed

run: $(VENV)/installed
	$(VENV)/bin/gaffer run

demo: $(VENV)/installed $(SPEC)
	$(VENV)/bin/gaffer demo

lint: $(VENV)/installed
	$(VENV)/bin/ruff check bot tasks tests bench
	$(VENV)/bin/mypy

test: $(VENV)/installed $(SPEC) lint
	$(VENV)/bin/pytest

# The two commands a newcomer needs: `make run` and `make test`. Each sets itself up.
VENV := .venv
PY := $(VENV)/bin/python
SPEC := tests/contract/node_modules/@octokit/openapi/package.json
AGENT_CLIS := tests/agents/node_modules/.installed

.PHONY: run demo test lint install sandbox-tools browser-tools

$(VENV)/installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

$(SPEC): tests/contract/package.json tests/contract/package-lock.json
	npm ci --prefix tests/contract --no-audit --no-fund --loglevel=error
	touch $@

# The real agent CLIs the contract tests run against a local model server, pinned: the
# npm ones (`install`, not `ci`: the registry here lacks OpenCode's builds for other
# platforms, which `ci` wants in the lock), and aider in a virtualenv of its own.
$(AGENT_CLIS): tests/agents/package.json tests/agents/package-lock.json tests/agents/requirements-aider.txt
	npm install --prefix tests/agents --no-audit --no-fund --loglevel=error
	python3 -m venv tests/agents/aider
	tests/agents/aider/bin/python -m pip install --quiet -r tests/agents/requirements-aider.txt
	touch $@

install: $(VENV)/installed

# Agents and checks run inside bubblewrap; socat carries their allowed traffic to gaffer's
# proxy. Installed from Debian's packages where they are missing (as root).
sandbox-tools:
	@command -v bwrap >/dev/null && command -v socat >/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap socat >/dev/null; }

# The dashboard's tests drive Debian's Chromium through its chromedriver (as root).
browser-tools:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }

run: $(VENV)/installed sandbox-tools
	$(VENV)/bin/gaffer run

demo: $(VENV)/installed $(SPEC) sandbox-tools
	$(VENV)/bin/gaffer demo

lint: $(VENV)/installed
	$(VENV)/bin/ruff check bot tasks double tests bench
	$(VENV)/bin/mypy

test: $(VENV)/installed $(SPEC) $(AGENT_CLIS) sandbox-tools browser-tools lint
	$(VENV)/bin/pytest -n 2

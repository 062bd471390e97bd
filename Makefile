# Every target sets itself up: a fresh machine needs nothing but python3.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: test lint demo bench docs clean observer-screenshot

# Two install sets, one stamp each: the demo's (the core and the Anthropic SDK) and the full
# one (every test and dev extra, a superset of the demo's). `make demo` installs the demo's
# set unless the full one is already in place; `make test` installs the full one, adding to
# the demo's. Either order works on a fresh clone and nothing is installed twice.
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
NEW_VENV := test -x $(BIN)/python || $(PY) -m venv $(VENV)
PIP := $(BIN)/python -m pip install --quiet

$(STAMP): pyproject.toml
	@echo "Installing gen-agent and its test and dev extras into $(VENV) (pytest, ruff, mypy," \
		"both SDKs, Ray, mkdocs, ...)"
	$(NEW_VENV)
	$(PIP) --upgrade pip
	$(PIP) -e '.[test,dev]'
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml
	@echo "Installing what the demo needs into $(VENV): gen-agent and the Anthropic SDK" \
		"(make test adds the test and dev extras)"
	$(NEW_VENV)
	$(PIP) --upgrade pip
	$(PIP) -e '.[anthropic]'
	touch $(DEMO_STAMP)

# The full set, when installed and newer than pyproject.toml, already holds the demo's.
DEMO_INSTALL := $(if $(shell test $(STAMP) -nt pyproject.toml && echo full),,$(DEMO_STAMP))

# The real agent CLIs for the `real_cli` tests, from npm into the git-ignored venv. Without
# node and npm this step is skipped and those tests skip, saying what to install.
CLAUDE_CODE_VERSION ?= 2.1.197
NPM_PREFIX := $(VENV)/npm
CLAUDE_STAMP := $(NPM_PREFIX)/.claude-code-$(CLAUDE_CODE_VERSION)

$(CLAUDE_STAMP):
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		npm install --prefix $(NPM_PREFIX) --no-audit --no-fund --loglevel=error \
			@anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) && touch $@ \
			|| echo "WARNING: npm install of claude-code failed: real_cli tests will skip"; \
	else \
		echo "node/npm not found: skipping the Claude Code CLI install (real_cli tests skip)"; \
	fi

CODEX_VERSION ?= 0.171.0
CODEX_STAMP := $(NPM_PREFIX)/.codex-$(CODEX_VERSION)

$(CODEX_STAMP):
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		npm install --prefix $(NPM_PREFIX) --no-audit --no-fund --loglevel=error \
			@openai/codex@$(CODEX_VERSION) && touch $@ \
			|| echo "WARNING: npm install of codex failed: real_cli tests will skip"; \
	else \
		echo "node/npm not found: skipping the Codex CLI install (real_cli tests skip)"; \
	fi

# Debian's chromium and chromium-driver for the observer's browser test (tests/observer), with
# apt as root where there is apt (after the shared `apt-update` below); elsewhere that test skips.
BROWSER_STAMP := $(VENV)/.chromium
HAVE_BROWSER := command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1

$(BROWSER_STAMP): | apt-update
	@if $(HAVE_BROWSER); then \
		touch $@; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends \
			chromium chromium-driver >/dev/null && touch $@ \
			|| echo "WARNING: apt-get install chromium chromium-driver failed: the browser test skips"; \
	else \
		echo "chromium/chromedriver not found and no root apt: the observer's browser test skips"; \
	fi

# Debian's PostgreSQL server for the PostgresStore tests (tests/pgcluster.py starts a
# throwaway cluster from its binaries as nobody), with apt as root where there is apt;
# elsewhere those tests skip, saying what to install.
POSTGRES_STAMP := $(VENV)/.postgresql
HAVE_POSTGRES := ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1

$(POSTGRES_STAMP): | apt-update
	@if $(HAVE_POSTGRES); then \
		touch $@; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends \
			postgresql >/dev/null && touch $@ \
			|| echo "WARNING: apt-get install postgresql failed: the PostgresStore tests skip"; \
	else \
		echo "PostgreSQL not found and no root apt: the PostgresStore tests skip"; \
	fi

# One `apt-get update` for both apt installs above, run only when one of them will install (its
# stamp and its binaries missing, root with apt). Phony and order-only: it runs in every make
# run that considers a stamp, so the package lists are never a stale leftover of an old run.
.PHONY: apt-update
apt-update:
	@need=; \
	if [ ! -e $(BROWSER_STAMP) ] && ! { $(HAVE_BROWSER); }; then need=chromium; fi; \
	if [ ! -e $(POSTGRES_STAMP) ] && ! { $(HAVE_POSTGRES); }; then need="$$need postgresql"; fi; \
	if [ -n "$$need" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq \
			|| echo "WARNING: apt-get update failed: installing $$need from the old package lists"; \
	fi

# The server contract suite runs a second time with every agent hibernating as soon as it is
# idle (GEN_AGENT_HIBERNATE_AFTER_MS=0, issue 20): hibernation must never change behaviour.
test: $(STAMP) $(CLAUDE_STAMP) $(CODEX_STAMP) $(BROWSER_STAMP) $(POSTGRES_STAMP)
	$(BIN)/ruff check gen_agent tests
	$(BIN)/python -m pytest -q
	GEN_AGENT_HIBERNATE_AFTER_MS=0 $(BIN)/python -m pytest -q tests/runtime/server

lint: $(STAMP)
	$(BIN)/ruff check gen_agent tests docs/examples
	$(BIN)/mypy gen_agent

# `make demo` runs the demo on the official Anthropic SDK; `make demo DEMO_BACKEND=claude` on
# the real Claude Code CLI, installed from npm into the venv first (only then). Extra options
# go in DEMO_ARGS, e.g. DEMO_ARGS=--fast.
DEMO_BACKEND ?= anthropic
DEMO_ARGS ?=
DEMO_CLAUDE := $(filter claude,$(DEMO_BACKEND))
DEMO_CLI_ARGS := $(if $(DEMO_CLAUDE),--cli-path $(NPM_PREFIX)/node_modules/.bin/claude)

demo: $(DEMO_INSTALL) $(if $(DEMO_CLAUDE),$(CLAUDE_STAMP))
	$(BIN)/python -m gen_agent demo --backend $(DEMO_BACKEND) $(DEMO_CLI_ARGS) $(DEMO_ARGS)

# Bench-only packages, never runtime deps: claude-agent-sdk (pinned, so figures stay
# comparable: the parser stream decoding is compared with, and the ClaudeSDKClient sessions
# warm_fleet runs against) and pyinstrument for `--profiler pyinstrument`; the real claude CLI
# (warm_cli, warm_fleet) comes from npm as for `make test`. Without them those rows say n/a. Options: `make bench BENCH_ARGS="--only
# NAME"`, `BENCH_ARGS="--profile event_throughput"` (see tests/benchmarks/README.md, which
# also says how to add a benchmark, and tests/benchmarks/run.py --help).
bench: $(STAMP) $(CLAUDE_STAMP)
	@$(BIN)/python -c "import importlib.metadata as m, sys; \
		sys.exit(m.version('claude-agent-sdk') != '0.2.189')" 2>/dev/null \
		|| $(BIN)/python -m pip install --quiet "claude-agent-sdk==0.2.189" "pyinstrument>=5" \
		|| echo "WARNING: claude-agent-sdk not installed: the SDK comparison is skipped"
	$(BIN)/python tests/benchmarks/run.py $(BENCH_ARGS)

# The documentation site, built strictly (any warning fails) into docs/site/ (git-ignored).
# mkdocs-material and mkdocstrings come with the test extra, so CI builds the site too
# (tests/test_docs.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -f docs/mkdocs.yml

# Refresh the observer's screenshot on its docs page from the real-browser test.
observer-screenshot: $(STAMP) $(BROWSER_STAMP)
	GEN_AGENT_OBSERVER_SCREENSHOT=docs/pages/observer.png $(BIN)/python -m pytest -q \
		tests/observer/test_browser.py

clean:
	rm -rf $(VENV) build dist *.egg-info benchmarks.json

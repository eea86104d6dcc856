# drpc developer commands. `make serve` and `make test` create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: serve test lint format bench clean thrift mutation compile clean-compiled docs plots

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip 'setuptools>=77'
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The engine's hot modules compiled to C with mypyc: drpc/compiled.py lists them, setup.py
# builds them in place (about 30 s, needs a C compiler and Python's headers), and they are
# rebuilt whenever one of their sources changes. `make serve` and `make test` use them. An
# edited source without a rebuild makes drpc warn and run all of them as pure Python, as
# does DRPC_PURE_PYTHON=1; `make clean-compiled` removes the build.
ENGINE_SOURCES := $(shell $(PYTHON) drpc/compiled.py)
ENGINE_BUILD := drpc/_compiled_sources.json
$(ENGINE_BUILD): $(STAMP) setup.py drpc/compiled.py $(ENGINE_SOURCES)
	DRPC_COMPILE=1 $(PY) setup.py --quiet build_ext --inplace

compile: $(ENGINE_BUILD)

clean-compiled:
	rm -f $(ENGINE_BUILD)
	find drpc -name '*.so' -delete

# The DRPC server with the reach and exclamation examples (Thrift 3772/3773, HTTP 3774),
# on this machine only: `make serve HOST=0.0.0.0` listens on every interface (with no
# ACL nor TLS: anyone who reaches the ports may call). `make serve EXECUTOR=local` runs
# the examples without Spark.
EXECUTOR ?= spark
HOST ?= 127.0.0.1
serve: $(STAMP) $(ENGINE_BUILD)
	$(PY) -m drpc.server --executor $(EXECUTOR) --host $(HOST) \
		--topology drpc.examples.reach:topology --topology drpc.examples.exclamation:topology

test: $(STAMP) $(ENGINE_BUILD)
	$(PY) -m ruff check .
	$(PY) -m mypy
	@pure=$$(mktemp -d); \
	DRPC_EXPECT_BUILD=pure DRPC_PURE_PYTHON=1 $(PY) -m pytest -q -p no:cacheprovider \
		--basetemp "$$pure/tmp" -m "not spark" $(PURE_TESTS) >"$$pure/log" 2>&1 & pure_pid=$$!; \
	DRPC_EXPECT_BUILD=compiled $(PY) -m pytest $(PYTEST_ARGS); compiled_status=$$?; \
	wait $$pure_pid; pure_status=$$?; \
	echo "--- the engine's own tests on the pure-Python engine (run beside the suite):"; \
	cat "$$pure/log"; rm -rf "$$pure"; \
	test $$compiled_status -eq 0 && test $$pure_status -eq 0

# The engine's own tests run once more on the pure-Python engine, what an install without
# the compiled build runs (about 30 s). They run beside the whole suite, whose waits on
# deadlines, sleeps and starting JVMs leave a core idle about half the time, and print
# once it ends.
PURE_TESTS ?= tests/test_compiled.py::test_the_build_this_run_expects_is_the_one_it_runs \
	tests/semantics tests/topologies tests/test_turns.py tests/test_local_executor.py \
	tests/test_task_core.py tests/test_batch_task.py tests/test_executor_events.py \
	tests/model tests/test_resident_routing.py tests/test_report_gathering.py \
	tests/test_edgeless_tuples.py tests/test_calls.py tests/test_mutex.py

# Mutation testing of the pure cores ([tool.mutmut] in pyproject.toml lists them and the
# tests that run): mutmut mutates them one change at a time, then tests/mutation/score.py
# prints a score per module against the equivalent mutants in tests/mutation/SURVIVORS.md.
# Not part of `make test` (tens of minutes); MUTMUT_ARGS="drpc.requests*" runs one module.
MUTMUT_ARGS ?=
mutation: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,mutation]'
	rm -rf mutants
	DRPC_PURE_PYTHON=1 $(PY) -m mutmut run --max-children $$(nproc) $(MUTMUT_ARGS)
	$(PY) tests/mutation/score.py $(MUTMUT_ARGS)

# The documentation site (mkdocs.yml) into site/: offline, and --strict fails it on any
# warning (a broken link or anchor, a page left out of the nav, an unresolved API
# reference). docs/hooks.py generates the command-line and configuration references.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# The performance page's plots: docs/images/*.png (and their captions, plots.json) from
# bench/results/*.json. Run the benchmarks first, on a quiet machine (docs/performance.md).
plots: $(STAMP)
	$(PY) bench/plots.py

# Style and types: ruff's lint and format checks, and mypy over drpc/ (pyproject.toml).
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# Regenerate the Python Thrift bindings from the IDL (needs the Debian package thrift-compiler).
# THRIFT_OUT lets a test regenerate elsewhere and compare.
THRIFT ?= thrift
THRIFT_OUT ?= drpc/protocol/gen
thrift:
	@generated=$$(mktemp -d) && \
	$(THRIFT) -gen py -out "$$generated" thrift/drpc.thrift && \
	rm -rf $(THRIFT_OUT) && mkdir -p $(THRIFT_OUT) && \
	cp "$$generated"/drpc/protocol/gen/*.py $(THRIFT_OUT)/ && \
	rm -rf "$$generated"

clean: clean-compiled
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .ruff_cache .mypy_cache mutants

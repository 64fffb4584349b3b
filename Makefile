# cachesync - the two quickstart commands are `make demo` and `make test`.
# Both install what is missing (a virtualenv with the package, the devstack's
# MariaDB/Redis Debian packages and Kafka jars; for `make test` also promtool and
# Chromium), start the services on loopback, and on exit stop the ones they started.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STACK  := devstack/stack.sh
# reinstall when the package's definition or the C accelerator's source changes
HASH   := $(shell cat pyproject.toml setup.py cachesync/_speedups.c | cksum | cut -d' ' -f1)
STAMP  := $(VENV)/.installed-$(HASH)
# the demo needs only the sidecar: a bare machine gets there without pyspark or matplotlib
SIDECAR_STAMP := $(VENV)/.installed-sidecar-$(HASH)

.PHONY: demo demo-direct test test-library-reader test-python-path unit bench install install-sidecar test-tools docs diagrams monitoring-picture gomysql-rows dist up down status clean help

help:
	@echo "make demo    run the demo pipeline on the local devstack (stops it on exit)"
	@echo "make demo-direct   the same without Kafka: one \`cachesync run --direct\` process"
	@echo "make test    install, start services, run every test, stop services"
	@echo "make test-library-reader   the integration tests with tailer.reader: library"
	@echo "make test-python-path      every test with the C accelerator switched off (CACHESYNC_NO_SPEEDUPS=1)"
	@echo "make unit    pure unit tests only (no services)"
	@echo "make gomysql-rows   go-mysql's reading of the shared real binlog files, into build/ (the tests make it on first use)"
	@echo "make bench   benchmarks (JSON to bench/results/)"
	@echo "make docs    the documentation site, strictly (docs/_build/html)"
	@echo "make diagrams  the docs' SVG diagrams from their Graphviz sources (docs/diagrams/*.dot)"
	@echo "make dist    sdist, manylinux wheel and pure-Python wheel in dist/, checked by twine"
	@echo "make up / down / status   the devstack services"

install: $(STAMP)
	devstack/spark/fetch-jars.sh $(BIN)/python

$(STAMP): pyproject.toml setup.py cachesync/_speedups.c
	@test -x $(BIN)/python || { echo ">> creating virtualenv $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo ">> installing cachesync and test dependencies into $(VENV)"
	$(BIN)/pip install -q --upgrade pip
	@# a stale accelerator must not outlive its source if the (optional) rebuild fails
	rm -f cachesync/_speedups*.so
	$(BIN)/pip install -q -e '.[sidecar,aws,test,spark,bench,docs,release]'
	@touch $@ $(SIDECAR_STAMP)

install-sidecar: $(SIDECAR_STAMP)

# what the tests run besides the devstack's services: promtool (the alert rules) and Chromium
# (the docs site), Debian packages installed when missing
test-tools:
	devstack/tools/test-tools.sh

$(SIDECAR_STAMP): pyproject.toml setup.py cachesync/_speedups.c
	@test -x $(BIN)/python || { echo ">> creating virtualenv $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo ">> installing cachesync[sidecar] into $(VENV)"
	rm -f cachesync/_speedups*.so
	$(BIN)/pip install -q -e '.[sidecar]'
	@touch $@

demo: install-sidecar
	devstack/with-stack.sh $(BIN)/cachesync demo

demo-direct: install-sidecar
	devstack/with-stack.sh $(BIN)/cachesync demo --direct

docs: install
	$(BIN)/sphinx-build -W --keep-going -n -q -b html docs docs/_build/html
	@echo ">> docs/_build/html/index.html"

# the diagrams are checked in (the README shows them too); tests/docs/test_diagrams.py fails
# when one is older than its source
DIAGRAMS := $(patsubst %.dot,%.svg,$(wildcard docs/diagrams/*.dot))
diagrams: $(DIAGRAMS)

docs/diagrams/%.svg: docs/diagrams/%.dot
	dot -Tsvg $< -o $@

# sdist, the compiled wheel (its platform tag checked and made manylinux by auditwheel) and the
# pure-Python wheel, then twine's check of what PyPI will show; cibuildwheel builds the other
# Pythons and aarch64 in the release workflow (.github/workflows/release.yml)
# (bytecode is compiled where it is installed: distutils would only warn that it skips it)
BUILD := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m build
dist: $(STAMP)
	rm -rf dist build
	$(BUILD) --sdist --wheel --outdir dist .
	$(BIN)/auditwheel show dist/*-linux_*.whl
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/auditwheel repair --wheel-dir dist dist/*-linux_*.whl && rm dist/*-linux_*.whl
	rm -rf build && CACHESYNC_PURE=1 $(BUILD) --wheel --outdir dist .
	$(BIN)/twine check --strict dist/*
	ls dist

# the tests on the services, and beside them the ones without (tests/run-all.sh)
test: install test-tools
	BIN=$(BIN) tests/run-all.sh

# the integration tests again with python-mysql-replication reading every binlog event
# (tailer.reader: library), the fast reader's fallback
test-library-reader: install
	CACHESYNC_TAILER_READER=library devstack/with-stack.sh $(BIN)/pytest -p no:cacheprovider tests/integration

# every test again with the C accelerator switched off: the Python path the tailer falls
# back to where the extension is not built
test-python-path: install test-tools
	CACHESYNC_NO_SPEEDUPS=1 BIN=$(BIN) tests/run-all.sh

# go-mysql's reading of every shared real binlog file, which tests/unit/test_realbinlog.py
# compares the tailer's rows with and makes itself on first use (tests/support/gomysql.py):
# built with the Go on PATH when it is new enough, else the Go devstack/tools/go-toolchain.py
# takes from the Go module proxy; binary and reading cached in build/gomysql-rows/
gomysql-rows: install
	$(BIN)/python -m tests.support.gomysql

unit: install
	$(BIN)/pytest tests/unit

bench: install
	devstack/with-stack.sh $(BIN)/python -m bench

up:
	$(STACK) up

down:
	$(STACK) down

status:
	$(STACK) status

clean:
	-$(STACK) down
	rm -rf $(VENV) .devstack

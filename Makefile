# cachesync - the two quickstart commands are `make demo` and `make test`.
# Both install what is missing (a virtualenv with the package, the devstack's
# MariaDB/Redis Debian packages and Kafka jars), start the services on loopback,
# and on exit stop the ones they started.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STACK  := devstack/stack.sh
# reinstall when the package's definition or the C accelerator's source changes
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml cachesync/_speedups.c | cksum | cut -d' ' -f1)

.PHONY: demo test test-library-reader unit bench install up down status clean help

help:
	@echo "make demo    run the demo pipeline on the local devstack (stops it on exit)"
	@echo "make test    install, start services, run every test, stop services"
	@echo "make test-library-reader   the integration tests with tailer.reader: library"
	@echo "make unit    pure unit tests only (no services)"
	@echo "make bench   benchmarks (JSON to bench/results/)"
	@echo "make up / down / status   the devstack services"

install: $(STAMP)
	devstack/spark/fetch-jars.sh $(BIN)/python

$(STAMP): pyproject.toml cachesync/_speedups.c
	@test -x $(BIN)/python || { echo ">> creating virtualenv $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo ">> installing cachesync and test dependencies into $(VENV)"
	$(BIN)/pip install -q --upgrade pip
	@# a stale accelerator must not outlive its source if the (optional) rebuild fails
	rm -f cachesync/_speedups*.so
	$(BIN)/pip install -q -e '.[sidecar,test,spark,bench]'
	@touch $@

demo: install
	devstack/with-stack.sh $(BIN)/cachesync demo

test: install
	devstack/with-stack.sh $(BIN)/pytest -p no:cacheprovider tests

# the integration tests again with python-mysql-replication reading every binlog event
# (tailer.reader: library), the fast reader's fallback
test-library-reader: install
	CACHESYNC_TAILER_READER=library devstack/with-stack.sh $(BIN)/pytest -p no:cacheprovider tests/integration

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

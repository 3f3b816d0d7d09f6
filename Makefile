# Two commands for a new user: `make demo` and `make test`. Both set up first, idempotently.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEB_PACKAGES := gcc libc6-dev libgoogle-perftools4 libtcmalloc-minimal4 libjemalloc2 libmimalloc2.0 linux-perf
# Real programs the recipes and end-to-end tests drive, and Chromium for the HTML report test.
DEB_TEST_PACKAGES := postgresql postgresql-contrib redis-server redis-tools qemu-utils chromium valgrind ceph-mon ceph-osd ceph-common librbd1 fio qemu-block-extra
DB ?= demo.db

.PHONY: setup setup-deb setup-deb-test venv demo test bench clean

setup: setup-deb venv

# apt-get when root and something is missing; otherwise print the exact line and go on.
setup-deb:
	@./scripts/setup-deb $(DEB_PACKAGES)

setup-deb-test:
	@./scripts/setup-deb $(DEB_TEST_PACKAGES)

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@

demo: setup
	$(BIN)/alloclab suite --db $(DB) --report html --report-file demo-report.html

test: setup setup-deb-test
	$(BIN)/python -m pytest -q -ra

bench: setup
	$(BIN)/python bench/overhead.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache demo.db demo-report.html

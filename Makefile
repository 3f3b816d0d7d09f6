# Two commands for a new user: `make demo` and `make test`. Both set up first, idempotently.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEB_PACKAGES := gcc libc6-dev libgoogle-perftools4 libtcmalloc-minimal4 libjemalloc2 libmimalloc2.0 libtbbmalloc2 linux-perf
# What bench/overhead.py measures alloclab's per-run cost against.
DEB_BENCH_PACKAGES := hyperfine
# Real programs the recipes and end-to-end tests drive, Chromium for the HTML report test,
# heaptrack, whose counts the fingerprint's are checked against, and strace, which counts the
# fingerprint's system calls where perf's syscall tracepoints are unavailable (a VM, a container).
# The corpus of real programs that must keep their fate under alloclab (tests/test_corpus_e2e.py)
# adds Ruby, Node.js, jq, g++ and Ceph's Python bindings; gdb reads a process's memory as it exits
# for the tests' hand measurements. `alloclab inspect`'s tests: glibc's debug symbols (main_arena
# and mp_ by name; their content is tested too) and musl's compiler (a musl process, refused).
# Go and Rust (tests/native_programs.py): a static Go program refused before it runs, and a Rust
# program with the mimalloc crate tuned through its bundled copy's settings (its crates come from
# crates.io on the first build; cargo-web is Debian 12's current Rust, which the crates' versions need).
# The corpus' JVM (java.util.zip's native buffers, compiled by javac) needs a JDK; its Node.js addon
# is built offline by Debian's node-gyp against libnode-dev's headers. Those two need Debian's
# nodejs: a nodesource nodejs (it Provides nodejs-legacy, which libnode108 conflicts with) would
# fail the whole install, so there they are left out and the addon's test names them.
DEB_NODE_ADDON_PACKAGES := $(if $(findstring nodesource,$(shell dpkg-query -W -f='$${Version}' nodejs 2>/dev/null)),,node-gyp libnode-dev)
DEB_TEST_PACKAGES := golang-go cargo-web postgresql postgresql-contrib redis-server redis-tools qemu-utils chromium valgrind \
	sqlite3 xz-utils git perl python3 ceph-mon ceph-osd ceph-common librbd1 fio qemu-block-extra heaptrack \
	strace ruby nodejs jq g++ python3-rados gdb libc6-dbg musl-tools openjdk-17-jdk-headless $(DEB_NODE_ADDON_PACKAGES) \
	$(DEB_BENCH_PACKAGES)
# Where `alloclab report`, `experiments` and `diff` look without --db: after `make demo` the README's
# report commands run as written. An existing store there keeps its experiments; the demo is added.
DB ?= alloclab.db

.PHONY: setup setup-test setup-bench setup-deb setup-deb-test setup-deb-all setup-deb-bench venv demo test bench clean

# apt-get and pip at the same time: neither needs the other (the Python wheels are binary; the
# C compiler is needed only when alloclab first builds its programs). One apt-get for all the
# packages a target needs: one dependency resolution, one package-list refresh on a bare machine.
# On a bare Debian machine python3 makes no venv until python3-venv (ensurepip) is there: that
# small install (and the package-list refresh a fresh machine needs anyway) comes first, so that
# pip then runs beside the large apt-get rather than waiting behind it for the package lock.
VENV_PREREQ := test -x $(BIN)/python || $(PYTHON) -c 'import ensurepip' 2>/dev/null || ./scripts/setup-deb python3-venv
setup:
	@$(VENV_PREREQ)
	@$(MAKE) --no-print-directory -j2 setup-deb venv

# Then the tests' Go, Rust, Node.js and Java programs built into the cache (crates fetched), untimed.
setup-test:
	@$(VENV_PREREQ)
	@$(MAKE) --no-print-directory -j2 setup-deb-all venv
	@$(BIN)/python tests/native_programs.py

setup-bench:
	@$(VENV_PREREQ)
	@$(MAKE) --no-print-directory -j2 setup-deb-bench venv

# apt-get when root and something is missing (a failed install stops make, naming the packages);
# otherwise print the exact line and go on.
setup-deb:
	@./scripts/setup-deb $(DEB_PACKAGES)

setup-deb-test:
	@./scripts/setup-deb $(DEB_TEST_PACKAGES)

setup-deb-all:
	@./scripts/setup-deb $(DEB_PACKAGES) $(DEB_TEST_PACKAGES)

setup-deb-bench:
	@./scripts/setup-deb $(DEB_PACKAGES) $(DEB_BENCH_PACKAGES)

# Where PYTHONDONTWRITEBYTECODE is set (as on our CI machines), Python would compile alloclab's
# modules afresh at every start: compile them once here (compileall skips what is up to date).
venv: $(VENV)/.installed
	@$(BIN)/python -m compileall -q src/alloclab

# pip runs only when pyproject.toml changed since the last install. Python >= 3.11 bundles a pip
# that installs editable pyproject packages, so pip is not upgraded first (a download and an
# install saved on a bare machine).
$(VENV)/.installed: pyproject.toml
	@# Debian's python3 makes no venv without python3-venv (ensurepip); the apt-get beside this
	@# job waits for the package lock rather than failing.
	@test -x $(BIN)/python || { $(PYTHON) -c 'import ensurepip' 2>/dev/null || ./scripts/setup-deb python3-venv; \
		$(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test,fleet]'
	@touch $@

demo: setup
	$(BIN)/alloclab suite --db $(DB) -o demo-report.html

# One worker more than the cores: the end-to-end tests spend part of their time waiting (a server's
# settle, a client's fixed window), and a third worker on 2 cores fills it (352 s -> 307 s for the
# parallel part on the development VM). The tests that time a program therefore time runs long
# enough that a neighbour's time slice does not decide them. Tests are handed out one by one, so
# that no worker waits on another's long file at the end (a file whose tests share a module fixture
# names an xdist_group and stays on one worker). Then, alone, the tests that measure the machine
# itself, which another test beside them would disturb. pytest keeps its rewritten test modules
# only where Python may write bytecode: allowed here (tests/__pycache__ is ignored), which takes 5 s
# of CPU off each later collection.
TEST_WORKERS := $(shell n=$$(nproc); echo $$(( n < 2 ? 1 : n + 1 )))
test: setup-test
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -ra -n $(TEST_WORKERS) --dist loadgroup --durations=25 -m "not serial"
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -ra -m serial

bench: setup-bench
	$(BIN)/python bench/overhead.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache demo.db demo.db-wal demo.db-shm demo-report.html

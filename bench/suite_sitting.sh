#!/bin/bash
# The suite's time, two commits in one sitting: fresh clones of each, their set-up untimed, then
# `make test` in each, one after the other, with nothing else running. Optionally the newer commit
# again with test files left out (pytest --ignore), to separate what added tests cost from what the
# code under them costs.
#
#   bench/suite_sitting.sh OLD NEW [IGNORED_TEST_FILE ...]
#
# Prints one line per run: the commit, the tests left out, the two pytest phases' seconds and the
# whole wall time. Clones go under ${SITTING_DIR:-/tmp/suite-sitting}.
set -euo pipefail
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
old=$1 new=$2
shift 2
dir=${SITTING_DIR:-/tmp/suite-sitting}
rm -rf "$dir" && mkdir -p "$dir"

clone() {
    git clone -q "$repo" "$dir/$1"
    git -C "$dir/$1" checkout -q "$1"
    make -C "$dir/$1" setup-test >"$dir/$1.setup.log" 2>&1
}

timed() {   # name, log, then the command
    local name=$1 log=$2 t0 t1
    shift 2
    t0=$(date +%s.%N)
    "$@" >"$log" 2>&1 || { echo "$name: FAILED (see $log)"; return 0; }
    t1=$(date +%s.%N)
    printf '%s: %s; wall %.1f s\n' "$name" "$(grep -Eo '[0-9]+ passed[^=]* in [0-9.]+s' "$log" | sed 's/.* in //' | paste -sd+)" \
        "$(echo "$t1 - $t0" | bc)"
}

clone "$old"
clone "$new"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $(date -u +%FT%TZ)"
timed "$old" "$dir/$old.test.log" make -C "$dir/$old" test
timed "$new" "$dir/$new.test.log" make -C "$dir/$new" test
if [ $# -gt 0 ]; then
    ignores=()
    for f in "$@"; do ignores+=("--ignore=$f"); done
    n=$(nproc); workers=$(( n < 2 ? 1 : n + 1 ))   # as the Makefile's TEST_WORKERS
    (cd "$dir/$new" && timed "$new without $*" "$dir/$new.part.log" \
        bash -c 'PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest -q -ra -n "$0" --dist loadgroup -m "not serial" "${@}" \
                 && PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest -q -ra -m serial "${@}"' "$workers" "${ignores[@]}")
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"

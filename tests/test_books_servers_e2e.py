"""Where a server's memory goes, by each allocator's own books: redis' recipe, small, under the four
real allocators. The parts add up to the anonymous RSS at every reading of its memory client
(after the fill, the delete, FLUSHALL, MEMORY PURGE, the rest) and after the benchmark. (PostgreSQL's,
forked backends and all: test_fingerprint_postgres_e2e.py.)"""

from __future__ import annotations

import pytest

from alloclab.store.fingerprint_model import Fingerprint
from alloclab.workloads import experiment_file as xf

from conftest import require_allocator
from test_service_e2e import require_programs, scratch  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ALLOCATORS = ("glibc", "jemalloc", "tcmalloc", "mimalloc")


def test_the_split_adds_up_on_redis_under_the_four_allocators(cli, store_of, scratch):
    require_programs(xf.resolve("recipe:redis"))
    for name in ALLOCATORS[1:]:
        require_allocator(name)
    p = cli("run", "recipe:redis", *(x for a in ALLOCATORS for x in ("-a", a)), "--runs", "1", "--warmup", "0",
            "--idle", "0", "--no-verify", "--fingerprint", "--param", "requests=500", "--param", "clients=5",
            "--param", "keys=20000", "--param", "rest=0.1", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    e = store_of(cli.db).load()
    fps = {(e.workloads[wi].name, e.variants[vi].label): Fingerprint.of(f) for (wi, vi), f in e.fingerprints.items()}
    assert len(fps) == 2 * len(ALLOCATORS), list(fps)
    for key, f in fps.items():
        assert f.books is not None and f.books.splits, key
        for sp in f.books.splits:
            assert abs(sp.unexplained) <= max(0.05 * sp.anon, 2 << 20), (key, sp.at, sp.anon, sp.parts)
    # After FLUSHALL, 20,000 values of 1000 B are gone: glibc keeps their chunks free inside its heap,
    # the other allocators in parts of their own; each reading names where.
    flush = {label: f.books.at("after flush") for (w, label), f in fps.items() if w == "redis: memory"}
    assert all(flush.values()), flush
    assert flush["glibc"].parts["free_inside"] > 8 << 20, flush["glibc"].parts
    assert flush["glibc"].parts["live"] < flush["glibc"].anon / 2, flush["glibc"].parts

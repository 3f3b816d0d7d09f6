"""`alloclab run --profile` end to end: perf record in front of a real server (Debian's
redis-server) under real allocators, driven by the real client, through the real CLI."""

from __future__ import annotations

import shutil

import pytest

from alloclab.workloads import experiment_file as xf
from alloclab.measure.profile import attribution, perf, summary
from conftest import missing_prerequisite, require_allocator
from test_service_e2e import require_programs, scratch  # noqa: F401  (scratch is a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_run_profile_samples_the_server_tree_not_the_client(cli, store_of, scratch):  # noqa: F811
    ef = xf.resolve("recipe:redis")
    require_programs(ef)
    require_allocator("jemalloc")
    if not shutil.which("perf"):
        missing_prerequisite(f"perf is not installed ({perf.PERF_INSTALL})")
    p = cli("run", "recipe:redis", "--client", "benchmark", "-a", "glibc", "-a", "jemalloc", "--runs", "1",
            "--warmup", "0", "--idle", "0", "--no-verify", "--param", "requests=20000", "--param", "clients=5", "--param", "keys=2000", "--param", "rest=0.1",
            "--profile", "--profile-runs", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Where the CPU goes: redis" in p.stdout
    store = store_of(cli.db)
    # The benchmark client alone (--client): the recipe's memory client is left out.
    summaries = summary.load_profiles(store, store.load().id)
    assert {s.workload for s in summaries} == {"redis: benchmark"}
    assert [s.variant for s in summaries] == ["glibc", "jemalloc"]
    for s in summaries:
        assert len(s.runs) == 1
        run = s.runs[0]
        assert run.status == "ok" and run.error is None
        assert run.samples > 100
        assert sum(run.shares.values()) == pytest.approx(1.0)
        assert set(run.shares) == set(attribution.CATEGORIES)
        # The server's tree is sampled (redis-server and its own threads), never the load client.
        assert next(iter(run.commands)) == "redis-server"
        assert run.commands["redis-server"] > 0.5
        assert not any(c.startswith("redis-benchmark") for c in run.commands)
        # The client's own metric was read from the profiled run, and plain runs are the baseline.
        assert run.metric and run.metric > 0
        assert s.plain and s.plain[0]["set_rps"] > 0
        assert s.perf_fixed_s is None  # the client's wall time does not include perf's start/stop
    jemalloc = summaries[1]
    # Preloaded jemalloc is the variant's library: its samples in redis-server are allocator time.
    assert jemalloc.allocator[0] > 0
    # (and the PLT stubs of redis-server and its libraries into it, which count as calling the
    # allocator). glibc's malloc code is at most a stray sample: beside a CPU hog one landed once in
    # `malloc [libc.so.6]` (1 of 552 samples, against 5 in jemalloc's, at 5,000 requests: now 20,000, so
    # that a count of about 20 is no Poisson coin; the symbols are pooled over
    # the tree, so which process is not known). Were the variant not in effect, glibc's would be all.
    syms = jemalloc.top_symbols()
    ours = sum(x for sym, x in syms if sym.endswith("[libjemalloc.so.2]"))
    libc = sum(x for sym, x in syms if sym.endswith("[libc.so.6]"))
    assert ours >= 2 * libc, syms
    # jemalloc's own code is sampled; which symbol leads is the sampling's luck (beside a CPU hog a
    # PLT stub led once: `malloc_usable_size@plt [redis-check-rdb]`).
    assert any(sym.endswith("[libjemalloc.so.2]") for sym, _ in jemalloc.top_symbols()), jemalloc.top_symbols()
    # The session was set up again for the profiled runs and removed after them.
    assert list(scratch.iterdir()) == []


def test_a_server_run_as_another_user_is_profiled_with_the_kernel(cli, store_of, scratch):  # noqa: F811
    # PostgreSQL runs as `postgres`. perf run as that user would drop the kernel's samples (with
    # perf_event_paranoid 2), and with them the page faults through which glibc's trimming costs
    # PostgreSQL its throughput; perf runs as alloclab, in front of the run_as chain.
    import os

    ef = xf.resolve("recipe:postgres-partitions")
    require_programs(ef)
    if not shutil.which("perf"):
        missing_prerequisite(f"perf is not installed ({perf.PERF_INSTALL})")
    if os.geteuid() != 0:
        pytest.skip("run_as applies only when alloclab runs as root")
    p = cli("run", "recipe:postgres-partitions", "--client", "1 client", "-a", "glibc", "--runs", "1", "--warmup",
            "0", "--idle", "0", "--no-verify", "--param", "scale=1", "--param", "partitions=20", "--param", "duration=4",
            "--param", "warmup_s=1", "--param", "settle=0.3",
            "--profile", "--profile-runs", "1", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    store = store_of(cli.db)
    summaries = summary.load_profiles(store, store.load().id)
    assert [s.workload for s in summaries] == ["postgres-partitions: 1 client"]
    for s in summaries:
        assert s.kernel_visible and not s.event.endswith(":u"), s.event
        (run,) = s.runs
        assert run.status == "ok" and run.samples > 100
        assert next(iter(run.commands)) == "postgres"
        # The backends' page faults and brk calls are sampled in the kernel.
        assert run.shares["kernel_mm"] > 0, run.shares
    assert "not visible to perf" not in p.stdout
    assert list(scratch.iterdir()) == []

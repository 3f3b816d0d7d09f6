"""The allocation fingerprint of a real forked server run as another user: PostgreSQL's recipe,
small. A file of its own so that the test runner can put it beside the other slow end-to-end
files rather than behind them."""

from __future__ import annotations

import pytest

from alloclab.store.fingerprint_model import Fingerprint
from alloclab.workloads import experiment_file as xf
from test_service_e2e import require_programs, scratch  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_recipe_postgres_fingerprint_of_a_forked_server_run_as_postgres(cli, store_of, scratch):
    # The seed's mechanism, counted: PostgreSQL's backends (forked by the postmaster, run as the
    # postgres user) allocate and free large chunks per query; glibc gives the heap top back and
    # grows it again with brk, MALLOC_TOP_PAD_ does not. The counter (perf stat on the syscall
    # tracepoints, run as alloclab in front of the run_as chain) counts the calls.
    ef = xf.resolve("recipe:postgres-partitions")
    require_programs(ef)
    # One of the recipe's two clients (--client): the same server, set up and forked alike.
    p = cli("run", "recipe:postgres-partitions", "--client", "1 client", "-a", "glibc", "-a",
            "glibc:MALLOC_TOP_PAD_=64M", "--runs", "1", "--warmup", "0", "--no-verify", "--idle", "0", "--fingerprint",
            "--param", "scale=1", "--param", "partitions=100", "--param", "duration=7", "--param", "warmup_s=1", "--param", "settle=0.3",
            "--details", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    e = store_of(cli.db).load()
    assert [w.name for w in e.workloads] == ["postgres-partitions: 1 client"]
    fps = {(wi, e.variants[vi].label): f for (wi, vi), f in e.fingerprints.items()}
    assert len(fps) == 2 and not [f for f in fps.values() if "error" in f], fps
    for (wi, label), f in fps.items():
        assert f["processes"] >= 4 and f["allocs"] > 10_000, (wi, label, f["processes"], f["allocs"])
        assert f["syscalls"] and f["syscalls"].get("brk", 0) >= 1, f.get("syscalls_how")
    # glibc trims and regrows the top of its heap; with a 64 MB pad the brk calls all but vanish
    assert fps[(0, "glibc")]["syscalls"]["brk"] > 5 * fps[(0, "glibc TOP_PAD=64M")]["syscalls"]["brk"]
    # The demand per transaction, the median over the client's steady seconds (5 or 6 of the 7): the
    # program's, whatever the allocator (about two chunks of 8-32 KiB per partition and query:
    # 100 partitions here). (A whole-window mean once read 269 against 213 in CI, beside another
    # test: one slow second with work of another kind in it.)
    per = {k: f["per_work"] for k, f in fps.items()}
    for (wi, label), pw in per.items():
        assert pw["work"] == "transaction" and 100 < pw["calls"] < 1000, (wi, label, pw)
        assert pw["median_of"] >= 3, pw
        assert 8 * 1024 < pw["bytes"] / pw["calls"] < 64 * 1024, pw
    a, b = per[(0, "glibc")]["calls"], per[(0, "glibc TOP_PAD=64M")]["calls"]
    assert abs(a - b) / a < 0.2, per
    assert "Allocation fingerprint" in p.stdout and "alloc calls per transaction" in p.stdout
    # Where the memory goes, by glibc's own books summed over the server's processes: the parts add up
    # to the anonymous RSS at every reading (after the load, after the clients left, the peak, the end).
    for key, f in fps.items():
        splits = Fingerprint.of(f).books.splits
        assert {"after load", "end"} <= {sp.at for sp in splits}, (key, [sp.at for sp in splits])
        for sp in splits:
            assert abs(sp.unexplained) <= max(0.05 * sp.anon, 2 << 20), (key, sp.at, sp.anon, sp.parts)

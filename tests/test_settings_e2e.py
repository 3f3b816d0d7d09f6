"""Settings proven in effect: each one read back from the real, running allocator; bad ones
refused before anything runs; the options that compare, suite and run share."""

from __future__ import annotations

import json
import os

import pytest
import typer

from alloclab.measure import readback
from alloclab.catalog.variants import parse_variant
from conftest import require_allocator

pytestmark = pytest.mark.e2e


def read(spec: str) -> list[readback.Readback]:
    require_allocator(spec.split(":")[0])
    v = parse_variant(spec)
    return readback.check(v, v.apply(dict(os.environ)))


@pytest.mark.parametrize("spec,line", [
    ("glibc:MALLOC_TOP_PAD_=64M", "glibc.malloc.top_pad = 67108864 (asked MALLOC_TOP_PAD_=64M): in effect"),
    ("glibc:glibc.malloc.tcache_count=0", "glibc.malloc.tcache_count = 0 (asked 0): in effect"),
    ("jemalloc:narenas=2", "opt.narenas = 2 (asked narenas=2): in effect"),
    ("jemalloc:MALLOC_CONF=dirty_decay_ms:0,background_thread:true", "opt.background_thread = true (asked background_thread=true): in effect"),
    ("tcmalloc:TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES=64M",
     "tcmalloc.max_total_thread_cache_bytes = 67108864 (asked TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES=64M): in effect"),
    ("tcmalloc-minimal:TCMALLOC_AGGRESSIVE_DECOMMIT=true", "tcmalloc.aggressive_memory_decommit = 1"),
    ("mimalloc:MIMALLOC_EAGER_COMMIT_DELAY=0", "eager_commit_delay = 0 (asked MIMALLOC_EAGER_COMMIT_DELAY=0): in effect"),
])
def test_setting_is_read_back_from_the_running_allocator(spec, line):
    got = read(spec)
    assert all(r.status == readback.IN_EFFECT for r in got), [r.line() for r in got]
    assert any(line in r.line() for r in got), [r.line() for r in got]


def test_the_same_setting_left_out_reads_back_as_the_default():
    """The read-back is the allocator's, not an echo of the request."""
    require_allocator("tcmalloc")
    v = parse_variant("tcmalloc:TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES=64M")
    env = v.apply(dict(os.environ))
    del env["TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES"]
    [r] = readback.check(v, env)
    assert r.status == readback.INEFFECTIVE and "not 67108864" in r.why


@pytest.mark.parametrize("spec,why", [
    # gperftools clamps the total thread cache to 1 GiB.
    ("tcmalloc:TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES=4G", "it runs with tcmalloc.max_total_thread_cache_bytes = 1073741824, not 4294967296"),
    # jemalloc clamps tcache_max to its largest cached size class.
    ("jemalloc:tcache_max=64M", "it runs with opt.tcache_max = "),
    # narenas 0 means "choose for me": the allocator picks its own count.
    ("jemalloc:narenas=0", "not read as asked by jemalloc"),
])
def test_value_the_allocator_clamps_or_ignores_makes_it_ineffective(spec, why):
    got = read(spec)
    assert [r.status for r in got] == [readback.INEFFECTIVE], [r.line() for r in got]
    assert why in got[0].line()


def test_setting_the_installed_version_lacks_is_ineffective():
    got = read("mimalloc:MIMALLOC_PURGE_DELAY=0")
    version = parse_variant("mimalloc").version()
    if got[0].status == readback.IN_EFFECT:
        pytest.skip(f"mimalloc {version} has purge_delay (2.1 or later)")
    assert f"MIMALLOC_PURGE_DELAY=0 not read by mimalloc {version}: it reports no purge_delay" in got[0].line()


def test_setting_without_a_read_back_is_shown_as_unconfirmed():
    [r] = read("tcmalloc:TCMALLOC_RELEASE_RATE=2")
    assert r.status == readback.UNCONFIRMED and "not confirmed" in r.line()


def test_compare_prints_each_setting_read_back_and_ineffective_ones(build, cli, store_of, tmp_path):
    require_allocator("tcmalloc")
    prog = build("churn")
    out = tmp_path / "x.json"
    p = cli("compare", "--details", "--runs", "1", "-a", "glibc:MALLOC_TOP_PAD_=64M,APP_MODE=fast",
            "-a", "tcmalloc:TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES=4G", "--export-json", str(out),
            "--", str(prog), "100", "1")
    assert p.returncode == 0, p.stderr
    assert "glibc.malloc.top_pad = 67108864 (asked MALLOC_TOP_PAD_=64M): in effect" in p.stdout
    assert "APP_MODE=fast: plain environment" in p.stdout
    assert "INEFFECTIVE: TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES=4G not read as asked by tcmalloc" in p.stdout
    e = store_of(cli.db).load()
    got = {e.variants[vi].label: v for (_, vi), v in e.verifications.items()}
    assert got["tcmalloc MAX_TOTAL_THREAD_CACHE_BYTES=4G"].status == "ineffective"
    assert "in effect" in json.dumps(json.loads(out.read_text()))


@pytest.mark.parametrize("args,says", [
    (["-a", "glibc:MALLOC_TOP_PAD=64M"], "Did you mean MALLOC_TOP_PAD_?"),
    (["-a", "glibc:MALLOC_TOP_PAD_=64Q"], "'64Q' is not a size"),
    (["--timeout", "-1"], "--timeout must be a positive number of seconds (got -1)"),
])
def test_bad_input_is_refused_before_anything_runs(args, says, cli, store_of):
    p = cli("compare", *args, "--", "true")
    assert p.returncode == 2, p.stdout + p.stderr
    assert says in " ".join(p.stderr.split())
    assert not cli.db.exists() or store_of(cli.db).experiments() == []


def test_suite_accepts_export_json_and_no_verify(cli, tmp_path):
    out = tmp_path / "suite.json"
    p = cli("suite", "--workload", "simple", "--quick", "--runs", "1", "--warmup", "0", "-a", "glibc",
            "--no-verify", "--export-json", str(out))
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert data and "simple" in json.dumps(data)


SHARED = ("allocator", "runs", "warmup", "timeout", "seed", "no_verify", "db", "export_json", "details",
          "min_effect", "max_runs", "budget", "fail_if_worse", "profile", "profile_runs", "call_graph",
          "ablate", "report", "report_file", "max_rss_increase")


def test_compare_suite_and_run_share_their_options():
    from alloclab.cli import core as cli
    cli._register_commands()
    group = typer.main.get_command(cli.app)
    commands = {name: {p.name: p for p in group.commands[name].params} for name in ("compare", "suite", "run")}
    for name in SHARED:
        flags = {c: tuple(sorted(commands[c][name].opts)) for c in commands}
        # Only a command's own default may differ: "(default: the file's ...)" and the like.
        helps = {c: commands[c][name].help.split(" (")[0].split(";")[0].rstrip(".") for c in commands}
        assert len(set(flags.values())) == 1, (name, flags)
        assert len(set(helps.values())) == 1, (name, helps)

"""Pages given back with MADV_FREE stay in RSS, counted as LazyFree, until the kernel reclaims them
(snmalloc#846: 1,244 of 2,198 MiB RSS was LazyFree). The launcher reads LazyFree from smaps_rollup
at the program's exit stop, beside its anonymous RSS: each run stores both and the anonymous RSS
without it, which agree with what the program read of itself just before it returned."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("lazy_mib", [128, 0])
def test_lazyfree_at_the_end_is_read_beside_the_anonymous_rss(cli, build, store_of, lazy_mib):
    p = cli("compare", "--runs", "2", "--warmup", "0", "--no-verify", "-a", "glibc", "--details",
            "--metric", r"own_anon_kb=anonymous_kb: (\d+):lower", "--metric", r"own_lazy_kb=lazyfree_kb: (\d+):lower",
            "--metric", r"own_dirty_kb=private_dirty_kb: (\d+):lower",
            "--", str(build("lazyfree")), "192", str(lazy_mib))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "end_lazyfree_mb" in p.stdout and "end_anon_nolazy_mb" in p.stdout
    runs = [r for r in store_of(cli.db).load().runs if r.status == "ok" and not r.warmup]
    assert len(runs) == 2
    for r in runs:
        m = r.metrics
        own_lazy, own_anon = m["own_lazy_kb"], m["own_anon_kb"]
        assert abs(m["end_lazyfree_mb"] * 1024 - own_lazy) <= 0.02 * own_lazy + 256, m
        assert abs(m["end_anon_nolazy_mb"] * 1024 - (own_anon - own_lazy)) <= 0.02 * own_anon + 512, m
        assert m["end_anon_nolazy_mb"] == pytest.approx(m["end_anon_mb"] - m["end_lazyfree_mb"], abs=0.01)
        # By hand, Private_Dirty: MADV_FREE cleans the pages, so it already leaves them out (less
        # LazyFree again would count them twice).
        assert abs(m["end_anon_nolazy_mb"] * 1024 - m["own_dirty_kb"]) <= 0.02 * own_anon + 512, m
        if lazy_mib:
            # Still resident: RSS counts the lazily freed pages, the metric without them does not.
            assert m["end_lazyfree_mb"] > 100 and m["end_anon_mb"] > 180 and m["end_anon_nolazy_mb"] < 90, m
        else:
            assert m["end_lazyfree_mb"] < 1, m


def test_an_answer_on_rss_at_the_end_names_the_lazyfree_it_carries(cli, build, store_of):
    """The answer's facts say how much of the default's end reading is LazyFree, in MiB as the program
    read it of itself; with nothing freed lazily, no such line (the control)."""
    from alloclab.report.tune import answer_lines
    from alloclab.stats.analysis import analyze
    from alloclab.stats.tune_answer import answer

    said = {}
    for lazy_mib in (128, 0):
        db = cli.db.with_name(f"lazy{lazy_mib}.db")
        p = cli("compare", "--db", str(db), "--runs", "2", "--warmup", "0", "--no-verify", "-a", "glibc",
                "-a", "glibc:MALLOC_ARENA_MAX=1", "--metric", r"own_lazy_kb=lazyfree_kb: (\d+):lower",
                "--", str(build("lazyfree")), "192", str(lazy_mib))
        assert p.returncode == 0, p.stdout + p.stderr
        exp = store_of(db).load()
        own = [r.metrics["own_lazy_kb"] / 1024 for r in exp.runs if r.status == "ok" and not r.warmup
               and r.variant_idx == 0]
        ans = answer(analyze(exp), [])
        said[lazy_mib] = (ans, own, [text for _, text in answer_lines(ans)])
    ans, own, lines = said[128]
    assert ans.lazyfree and ans.lazyfree[0].label == "glibc" and ans.lazyfree[0].without is None
    assert abs(ans.lazyfree[0].mib - sorted(own)[len(own) // 2]) <= 2, (ans.lazyfree, own)
    assert any("MiB LazyFree" in line and "MADV_FREE" in line for line in lines), lines
    ans, _, lines = said[0]
    assert not ans.lazyfree and not any("LazyFree" in line for line in lines), lines


@pytest.mark.parametrize("lazy_mib", [128, 0])
def test_inspect_names_the_lazyfree_share_of_a_running_process(cli, build, lazy_mib):
    from inspect_helpers import pause_argv
    p = pause_argv([str(build("lazyfree")), "192", str(lazy_mib), "pause"])
    try:
        out = cli("inspect", str(p.pid))
        assert out.returncode == 0, out.stdout + out.stderr
    finally:
        p.go()
    said = " ".join(out.stdout.split())
    if lazy_mib:
        assert "LazyFree 128.0 MiB of the anonymous" in said and "MADV_FREE" in said, said
    else:
        assert "LazyFree" not in said, said

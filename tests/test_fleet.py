"""Fleet runs, the parts that are plain data: addresses, fingerprints, verification across hosts,
one host's view of an experiment, and that a command without --fleet never imports Dask."""

from __future__ import annotations

import subprocess
import sys

import pytest

from alloclab.errors import AlloclabError
from alloclab.fleet import hosts as H
from alloclab.fleet.address import check_mode, parse
from alloclab.fleet.merge import combine_verifications
from alloclab.store.db import Experiment


def test_addresses():
    assert parse("local:2").workers == 2 and parse("local:2").expected_workers == 2
    assert parse("tcp://10.0.0.5:8786").kind == "tcp"
    ssh = parse("ssh://coord,web1,web2")
    assert ssh.hosts == ("coord", "web1", "web2") and ssh.expected_workers == 2
    for bad in ("local:0", "tcp://host", "ssh://onlyone", "ssh://a,b;rm", "http://x:1", "local"):
        with pytest.raises(AlloclabError, match="fleet"):
            parse(bad)
    with pytest.raises(AlloclabError, match="choose per-host"):
        check_mode("spread")


def test_fingerprint_differences_name_the_field_and_hosts():
    a = {"cpu_model": "EPYC", "kernel": "6.1", "thp": "always"}
    b = dict(a, kernel="6.8")
    assert H.fingerprint_differences({"a": a, "b": dict(a)}) == []
    assert H.fingerprint_differences({"a": a, "b": b}) == ["kernel: '6.1' on a; '6.8' on b"]


def test_verification_across_hosts_is_the_worst_and_names_the_host():
    ok = {"status": "verified", "reasons": [], "notes": ["malloc and free bound to libtcmalloc"]}
    bad = {"status": "ineffective", "reasons": ["process x escaped the preload"], "notes": ["malloc and free bound to libtcmalloc", "odd"]}
    out = combine_verifications({"h1": {(0, 1): ok}, "h2": {(0, 1): bad}})[(0, 1)]
    assert out.status == "ineffective"
    assert out.reasons == ["on h2: process x escaped the preload"]
    assert out.notes == ["malloc and free bound to libtcmalloc", "on h2: odd"]


def _experiment() -> Experiment:
    runs = [{"id": i, "workload_idx": 0, "variant_idx": 0, "warmup": 0, "status": "ok", "metrics": {"wall_s": 1.0},
             "extra": {"host": h}} for i, h in enumerate(["h1", "h2", "h1"])]
    return Experiment(id=3, row={}, config={}, machine={"host": "2 hosts", "hosts": {"h1": {"kernel": "6.1"},
                      "h2": {"kernel": "6.8"}}}, workloads=[], variants=[], metric_defs=[], verifications={}, runs=runs)


def test_one_hosts_view_and_references():
    e = _experiment()
    assert H.hosts_of(e) == ["h1", "h2"]
    one = H.for_host(e, "h1")
    assert len(one.runs) == 2 and one.machine.to_dict() == {"kernel": "6.1", "host": "h1"}
    with pytest.raises(AlloclabError, match="Its hosts are: h1, h2"):
        H.for_host(e, "h3")
    assert H.parse_ref("12") == (12, None) and H.parse_ref("12@web1") == (12, "web1")
    with pytest.raises(AlloclabError, match="ID@HOST"):
        H.parse_ref("latest@web1")


def test_the_single_machine_path_does_not_import_dask():
    code = ("import sys, alloclab.cli.core as c; c._register_commands(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_options_that_a_fleet_cannot_take_are_refused_before_anything_runs(cli):
    p = cli("compare", "--fleet", "local:2", "--until-precise", "2%", "--", "true")
    assert p.returncode == 2 and "--until-precise cannot be combined with --fleet" in p.stderr
    p = cli("compare", "--fleet", "udp://x", "--", "true")
    assert p.returncode == 2 and "Cannot read --fleet 'udp://x'" in p.stderr


def _two_host_experiment(shift: float) -> Experiment:
    """Two hosts, two variants; tc is 1.5x faster on h1, and h2 runs everything `shift` times faster."""
    runs, i = [], 0
    for host, scale in (("h1", 1.0), ("h2", shift)):
        for block in range(8):
            for vi, speed in ((0, 100.0), (1, 150.0)):
                runs.append({"id": i, "workload_idx": 0, "variant_idx": vi, "block": block, "position": vi,
                             "warmup": 0, "status": "ok", "wall_s": 1.0, "error": None,
                             "metrics": {"ops": speed * scale * (1 + 0.01 * ((block * 7 + vi) % 5))},
                             "extra": {"host": host}})
                i += 1
    return Experiment(id=1, row={"kind": "compare", "status": "complete", "title": "t", "created": "", "finished": ""},
                      config={"runs": 16, "fleet": {"mode": "split", "runs_per_host": {"h1": 8, "h2": 8}}},
                      machine={"host": "2 hosts", "hosts": {"h1": {}, "h2": {}}},
                      workloads=[{"idx": 0, "name": "w", "argv": ["w"], "info": {}, "params": {}}],
                      variants=[{"label": "glibc", "env": {}, "settings": [], "notes": []},
                                {"label": "tc", "env": {}, "settings": [], "notes": []}],
                      metric_defs=[{"workload_idx": 0, "name": "ops", "unit": "ops/s", "higher_is_better": 1,
                                    "source": "regex", "pattern": "", "primary_metric": 1, "ord": 0}],
                      verifications={}, runs=runs)


def test_host_effects_and_agreement_from_real_statistics():
    from alloclab.stats.analysis import analyze
    same = _two_host_experiment(1.0)
    analyses = {h: analyze(H.for_host(same, h)) for h in ("h1", "h2")}
    assert H.host_effects(analyses) == []
    assert H.agreement(analyses) == ["w, tc (ops): better on 2 of 2 hosts"]
    faster = _two_host_experiment(1.3)
    analyses = {h: analyze(H.for_host(faster, h)) for h in ("h1", "h2")}
    effects = H.host_effects(analyses)
    assert len(effects) == 2 and effects[0].startswith("w, glibc (ops): h2 against h1 (unpaired: two hosts): +30.0%")
    assert H.for_host(faster, "h2").config.runs == 8


def test_a_host_receives_the_variants_as_read_not_as_command_line_text():
    import json

    from alloclab.catalog.variants import VariantSpec, parse_variant
    from alloclab.fleet.spec import SessionSpec
    from alloclab.measure.runner import Settings

    written = VariantSpec.parse("glibc:MALLOC_TOP_PAD_=64M,MALLOC_ARENA_MAX=2@pad")
    inputs = {"command": ["true"], "param": [], "metric": [], "shell": False}
    wire = SessionSpec("compare", inputs, [written], Settings(runs=2)).to_json()
    sent = json.loads(wire)["variants"][0]
    assert sent["name"] == "glibc" and sent["settings"] == [["MALLOC_TOP_PAD_", "64M"], ["MALLOC_ARENA_MAX", "2"]]
    got = SessionSpec.from_json(wire).variants[0]
    assert got == written and parse_variant(got).label == "pad"
    assert parse_variant(got).env == parse_variant(written.text).env


def test_one_label_rule_for_specs_and_sweeps():
    from alloclab.catalog.variants import VariantSpec, parse_variant
    from alloclab.plan.sweep import expand_variant_specs

    assert VariantSpec.parse("glibc:MALLOC_TOP_PAD_=64M").label == parse_variant("glibc:MALLOC_TOP_PAD_=64M").label \
        == "glibc TOP_PAD=64M"
    [point] = [s for s in expand_variant_specs(["glibc:MALLOC_TOP_PAD_={64M}"])[0]]
    assert point.label == "glibc TOP_PAD=64M" and parse_variant(point).label == point.label

"""Variant specs: NAME[:VAR=VALUE,...][@LABEL], size suffixes, shared variables, labels."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from alloclab import catalog as cat
from alloclab.errors import AlloclabError
from alloclab.variants import expand_size, parse_variant, parse_variants
from conftest import installed_allocators, require_allocator


def test_glibc_is_the_system_allocator_with_no_preload():
    v = parse_variant("glibc")
    assert v.is_system and v.library is None and "LD_PRELOAD" not in v.env and v.label == "glibc"


def test_sizes_are_expanded_to_bytes_because_glibc_ignores_suffixes():
    v = parse_variant("glibc:MALLOC_TOP_PAD_=64M,MALLOC_ARENA_MAX=2")
    assert v.env == {"MALLOC_TOP_PAD_": str(64 << 20), "MALLOC_ARENA_MAX": "2"}
    assert v.label == "glibc TOP_PAD=64M,ARENA_MAX=2"


@given(st.integers(min_value=0, max_value=4096), st.sampled_from("KMG"))
def test_expand_size(n, suffix):
    assert expand_size(f"{n}{suffix}") == str(n * 1024 ** ("KMG".index(suffix) + 1))
    assert expand_size(f"{n}") == str(n)


def test_glibc_tunables_join_into_one_variable():
    v = parse_variant("glibc:glibc.malloc.tcache_count=0,glibc.malloc.arena_max=1")
    assert v.env["GLIBC_TUNABLES"] == "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1"


def test_jemalloc_keys_join_into_malloc_conf_and_raw_values_keep_commas():
    require_allocator("jemalloc")
    assert parse_variant("jemalloc:narenas=2,dirty_decay_ms=0").env["MALLOC_CONF"] == "narenas:2,dirty_decay_ms:0"
    raw = parse_variant("jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:0")
    assert raw.env["MALLOC_CONF"] == "narenas:2,dirty_decay_ms:0"
    assert raw.env["LD_PRELOAD"].endswith("libjemalloc.so.2")


def test_labels_and_duplicates():
    v = parse_variant("glibc@base")
    assert v.label == "base"
    with pytest.raises(AlloclabError, match="same label"):
        parse_variants(["glibc", "glibc"])
    assert [v.label for v in parse_variants(["glibc@a", "glibc@b"])] == ["a", "b"]


def test_unknown_key_is_passed_through_with_a_note():
    v = parse_variant("glibc:MALLOC_TOP_PAD=64M")  # missing trailing underscore: a typo
    assert v.env["MALLOC_TOP_PAD"] == str(64 << 20)
    assert "not a known tunable of glibc" in v.notes[0]


def test_bad_settings_text():
    with pytest.raises(AlloclabError, match="each setting is VAR=VALUE"):
        parse_variant("glibc:oops")


def test_custom_library_by_path():
    require_allocator("mimalloc")
    path = cat.locate(cat.load_catalog().get("mimalloc"))
    v = parse_variant(f"{path}:MIMALLOC_PURGE_DELAY=0")
    assert v.allocator is None and v.library == path.resolve()
    assert v.env["MIMALLOC_PURGE_DELAY"] == "0" and v.label.startswith("libmimalloc")


def test_inherited_allocator_settings_are_removed_from_runs():
    v = parse_variant("glibc")
    env = v.apply({"PATH": "/bin", "LD_PRELOAD": "/x/libjemalloc.so.2", "MALLOC_ARENA_MAX": "1", "MALLOC_CONF": "x"})
    assert env == {"PATH": "/bin"}


def test_default_variants_are_the_installed_allocators_baseline_first():
    labels = [v.label for v in parse_variants([])]
    assert labels[0] == "glibc" and set(labels) == set(installed_allocators())


def test_allocators_command_lists_found_and_missing(cli):
    p = cli("allocators", check=True)
    for name in cat.load_catalog().allocators:
        assert name in p.stdout
    assert "MALLOC_TOP_PAD_" in p.stdout and "MallocExtension_ReleaseFreeMemory" in p.stdout

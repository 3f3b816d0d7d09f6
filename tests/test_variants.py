"""Variant specs: NAME[:VAR=VALUE,...][@LABEL], size suffixes, shared variables, labels."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from alloclab.catalog import allocators as cat
from alloclab.errors import AlloclabError
from alloclab.catalog.variants import expand_size, parse_variant, parse_variants
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


@pytest.mark.parametrize("spec,says", [
    ("glibc:MALLOC_TOP_PAD=64M", "Did you mean MALLOC_TOP_PAD_?"),            # missing trailing underscore
    ("tcmalloc:TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTE=1G", "Did you mean TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES?"),
    ("jemalloc:narena=2", "Did you mean narenas?"),                           # lower case: a MALLOC_CONF key
    ("jemalloc:MALLOC_CONF=narenas:2,dirty_decay:0", "'dirty_decay' (inside MALLOC_CONF)"),
    ("glibc:GLIBC_TUNABLES=glibc.malloc.tcache_cnt=0", "Did you mean glibc.malloc.tcache_count?"),
    ("tcmalloc:MALLOC_ARENA_MAX=2", "MALLOC_ARENA_MAX is a setting of glibc, not of tcmalloc"),
])
def test_misspelled_or_foreign_setting_is_refused_with_the_nearest_match(spec, says):
    name = spec.split(":")[0]
    if name != "glibc":
        require_allocator(name)
    with pytest.raises(AlloclabError, match="does not read it") as exc:
        parse_variant(spec)
    assert says in str(exc.value)


@pytest.mark.parametrize("spec,says", [
    ("glibc:MALLOC_TOP_PAD_=64Q", "'64Q' is not a size"),
    ("glibc:MALLOC_ARENA_MAX=2M", "not a whole number"),
    ("glibc:glibc.malloc.tcache_count=99999", "between 0 and 65535 (glibc ignores a count above MAX_TCACHE_COUNT"),
    ("glibc:MALLOC_MMAP_THRESHOLD_=1G", "at most 33554432 (glibc ignores a threshold above HEAP_MAX_SIZE/2"),
])
def test_bad_value_is_refused_before_anything_runs(spec, says):
    with pytest.raises(AlloclabError) as exc:
        parse_variant(spec)
    assert says in str(exc.value)


def test_bad_boolean_is_refused():
    require_allocator("jemalloc")
    with pytest.raises(AlloclabError, match="'1' is not true or false"):
        parse_variant("jemalloc:background_thread=1")


def test_other_variables_pass_through_unchanged_as_plain_environment():
    v = parse_variant("glibc:MALLOC_TOP_PAD_=64M,MY_APP_CACHE=12K")
    assert v.env["MY_APP_CACHE"] == "12K" and v.env["MALLOC_TOP_PAD_"] == str(64 << 20)
    assert v.plain_env == ("MY_APP_CACHE=12K",)
    assert [t.tunable.name for t in v.tunables] == ["MALLOC_TOP_PAD_"]
    assert "plain environment" in v.notes[0]


def test_raw_shared_variable_is_checked_and_its_sizes_expanded():
    require_allocator("jemalloc")
    v = parse_variant("jemalloc:MALLOC_CONF=narenas:2,tcache_max:1M")
    assert v.env["MALLOC_CONF"] == "narenas:2,tcache_max:1048576"
    assert [(t.tunable.name, t.written) for t in v.tunables] == [("narenas", "2"), ("tcache_max", "1M")]
    # Other glibc tunables than malloc's pass through inside GLIBC_TUNABLES.
    g = parse_variant("glibc:GLIBC_TUNABLES=glibc.pthread.rseq=0:glibc.malloc.arena_max=2")
    assert g.env["GLIBC_TUNABLES"] == "glibc.pthread.rseq=0:glibc.malloc.arena_max=2"


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

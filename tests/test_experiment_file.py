"""Experiment files: schema validation with file:line:key errors, placeholders, params, recipes.

Pure logic on the parser; the end-to-end runs of the same files are in test_service_e2e.py."""

from __future__ import annotations

import socket
import textwrap

import pytest

from alloclab.workloads import experiment_file as xf
from alloclab.workloads import toml_check
from alloclab.measure.service import commands, values as service_values
from alloclab.errors import AlloclabError

GOOD = """\
[experiment]
name = "toy"
variants = ["glibc"]

[params]
n = 3
label = "x"

[service]
command = ["server", "--port", "{port}", "--dir", "{data_dir}"]
ready = { tcp = true }
stop = { signal = "SIGINT" }
data_dir = "data"
reset_data = true

[[setup]]
command = ["mkdir", "{data_dir}"]

[[client]]
name = "a"
command = ["client", "{port}", "-n", "{n}", "{recipe_dir}/x", "{{literal}}"]
metrics = [{ name = "ops", regex = "ops: ([\\\\d.]+)", unit = "ops/s" }]

[[client]]
name = "b"
command = ["client", "{port}"]
[[client.metrics]]
name = "lat"
json = "summary.lat"
higher = false
unit = "ms"
"""


def write(tmp_path, text: str, name: str = "exp.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path, text: str) -> str:
    with pytest.raises(AlloclabError) as info:
        xf.load(write(tmp_path, text))
    return str(info.value)


def test_a_good_file_parses(tmp_path):
    ef = xf.load(write(tmp_path, GOOD))
    assert ef.name == "toy" and ef.mode == "service" and ef.variants == ["glibc"]
    assert ef.service.ready == "tcp" and ef.service.stop_signal.name == "SIGINT"
    assert ef.service.lifetime == "run" and ef.service.reset_data and ef.service.data_dir == "data"
    assert [ld.name for ld in ef.loads] == ["a", "b"]
    a, b = ef.loads
    assert a.metrics[0].regex == "ops: ([\\d.]+)" and a.metrics[0].higher
    assert b.metrics[0].json == "summary.lat" and not b.metrics[0].higher
    defs = ef.metric_defs(b)
    assert defs[0].source == "json" and defs[0].pattern == "summary.lat"
    assert ef.recipe_dir == tmp_path.resolve()


def test_unknown_key_names_file_line_and_key(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("reset_data = true", "reset_data = true\nstop_timout = 5"))
    line = GOOD.splitlines().index("reset_data = true") + 2
    assert f"exp.toml:{line}: unknown key 'stop_timout' in [service]" in msg
    assert "stop_timeout" in msg  # the known keys are listed


def test_unknown_key_in_an_array_of_tables_and_an_inline_table(tmp_path):
    text = GOOD.replace('json = "summary.lat"', 'json = "summary.lat"\nhigher_is = true')
    msg = error_of(tmp_path, text)
    line = text.splitlines().index("higher_is = true") + 1
    assert f":{line}: unknown key 'higher_is' in [client[1].metrics[0]]" in msg
    text = GOOD.replace('ready = { tcp = true }', 'ready = { tcp = true, tcpp = 1 }')
    msg = error_of(tmp_path, text)
    line = text.splitlines().index('ready = { tcp = true, tcpp = 1 }') + 1
    assert f":{line}: unknown key 'tcpp'" in msg
    text = GOOD.replace('unit = "ops/s" }', 'unit = "ops/s", better = "higher" }')
    msg = error_of(tmp_path, text)
    assert "unknown key 'better' in [client[0].metrics[0]]" in msg
    assert f":{[i for i, ln in enumerate(text.splitlines(), 1) if 'better' in ln][0]}:" in msg


def test_unknown_placeholder_is_an_error_with_its_line(tmp_path):
    text = GOOD.replace('"{port}", "-n"', '"{prot}", "-n"')
    msg = error_of(tmp_path, text)
    line = [i for i, ln in enumerate(text.splitlines(), 1) if "{prot}" in ln][0]
    assert f"exp.toml:{line}: unknown placeholder '{{prot}}'" in msg
    assert "{port}" in msg and "[params]" in msg


def test_placeholders_that_cannot_apply_are_errors(tmp_path):
    no_service = """
    [[command]]
    command = ["tool", "{port}"]
    """
    assert "no [service] to give it a port" in error_of(tmp_path, no_service)
    files_with_port = GOOD + '\n[files]\n"conf" = "port {port}"\n'
    assert "cannot use '{port}'" in error_of(tmp_path, files_with_port)


def test_type_and_shape_errors(tmp_path):
    assert "must be a number" in error_of(tmp_path, GOOD.replace("reset_data = true", 'reset_data = true\nidle = "long"'))
    assert "non-empty list of strings" in error_of(tmp_path, GOOD.replace('command = ["mkdir", "{data_dir}"]',
                                                                             'command = "mkdir data"'))
    assert "exactly one probe" in error_of(tmp_path, GOOD.replace("ready = { tcp = true }",
                                                                  'ready = { tcp = true, log = "up" }'))
    assert "unknown signal 'SIGFOO'" in error_of(tmp_path, GOOD.replace('"SIGINT"', '"SIGFOO"'))
    assert "needs exactly one of regex, json, ratio or progress" in error_of(
        tmp_path, GOOD.replace('json = "summary.lat"', 'json = "summary.lat"\nregex = "x"'))
    assert "does not compile" in error_of(tmp_path, GOOD.replace('"ops: ([\\\\d.]+)"', '"ops: ("'))
    assert "needs the key 'ready'" in error_of(tmp_path, GOOD.replace("ready = { tcp = true }\n", ""))
    assert "not valid TOML" in error_of(tmp_path, GOOD + "\n[service\n")
    block_with_port = GOOD.replace("reset_data = true", 'reset_data = true\nlifetime = "block"\nport = 7000')
    assert "needs a port of its own" in error_of(tmp_path, block_with_port)
    assert "[[client]] entries need a [service]" in error_of(tmp_path, '[[client]]\ncommand = ["x"]\n')


def test_params_override_with_types(tmp_path):
    ef = xf.load(write(tmp_path, GOOD))
    assert ef.with_params({"n": "7"}) == {"n": 7, "label": "x"}
    with pytest.raises(AlloclabError, match="'n' is a int"):
        ef.with_params({"n": "seven"})
    with pytest.raises(AlloclabError, match="has no parameter 'm'.*n, label|has no parameter 'm'.*label, n"):
        ef.with_params({"m": "1"})


def test_clients_are_selected_by_name_and_keep_their_file_wide_names(tmp_path):
    from alloclab.measure.service import executors

    ef = xf.load(write(tmp_path, GOOD))
    assert ef.selected_loads([]) == [0, 1]
    assert ef.selected_loads(["b"]) == [1]
    assert ef.selected_loads(["b", "a"]) == [0, 1]   # the file's order
    with pytest.raises(AlloclabError, match=r"--client 'c': 'toy' has no client of that name\. Its clients are: 'a', 'b'"):
        ef.selected_loads(["c"])
    workloads, session = executors.workloads(ef, ef.with_params({}), clients=["b"])
    try:
        # The name a run of every client gives it, so that the two compare (alloclab diff).
        assert [w.name for w in workloads] == ["toy: b"]
        assert workloads[0].info["client"] == ["client", "{port}"]
    finally:
        session.cleanup()


def test_substitution_is_per_argv_element_and_never_a_shell(tmp_path):
    values = {"port": 5, "workdir": "/w d", "n": 3}
    argv = xf.substitute_argv(["x", "{workdir}/f", "-p{port}", "{{n}}", "a;{n}"], values)
    assert argv == ["x", "/w d/f", "-p5", "{n}", "a;3"]
    with pytest.raises(AlloclabError, match="'{nope}'"):
        xf.substitute("{nope}", values)


def test_every_shipped_recipe_parses_with_its_requirements(tmp_path):
    names = xf.recipe_names()
    assert {"postgres-partitions", "redis", "qemu-img"} <= set(names)
    pg = xf.resolve("recipe:postgres-partitions")
    assert "glibc:MALLOC_TOP_PAD_=64M" in pg.variants and pg.run_as == "postgres"
    assert pg.params["scale"] == 10 and pg.params["partitions"] == 1000
    assert [ld.name for ld in pg.loads] == ["1 client", "2 clients"]
    assert any("--partitions={partitions}" in s.command for s in pg.setup)
    assert "aid_copy = :aid" in pg.files["join.sql"]
    redis = xf.resolve("recipe:redis")
    assert {m.name for m in redis.loads[0].metrics} >= {"set_rps", "get_rps", "lpush_rps", "lrange_100_rps"}
    qemu = xf.resolve("recipe:qemu-img")
    assert qemu.mode == "command" and [ld.name for ld in qemu.loads] == ["qcow2", "raw"]
    assert all(r.package for ef in (pg, redis, qemu) for r in ef.requires)
    with pytest.raises(AlloclabError, match="No recipe named 'nope'.*postgres-partitions"):
        xf.resolve("recipe:nope")


def test_missing_program_names_the_install_line(tmp_path):
    ef = xf.load(write(tmp_path, """
    [experiment]
    requires = [{ program = "no-such-server-here", package = "no-such-package" }]
    [[command]]
    command = ["no-such-server-here"]
    """))
    with pytest.raises(AlloclabError, match="apt-get install -y no-such-package"):
        ef.check_requirements()


def test_ratio_metrics_are_computed_from_the_output():
    spec = xf.MetricSpec("ops", "ops/s", True, True, ratio=(r"Sending (\d+) read", r"in ([\d.]+) seconds"))
    text = "Sending 20000 read requests, 4096 bytes each\nRun completed in 0.250 seconds.\n"
    assert service_values.derived_values((spec,), text) == {"ops": 80000.0}
    assert service_values.derived_values((spec,), "Sending 20000 read requests") == {}


def test_client_environment_never_gets_the_variant():
    env = {"PATH": "/bin", "LD_PRELOAD": "/lib/libjemalloc.so.2", "MALLOC_CONF": "narenas:1",
           "LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": "/tmp/ld", "FOO": "1", "HOME": "/root"}
    clean = commands.clean_env(env, {"LD_PRELOAD": "/lib/libjemalloc.so.2", "FOO": "1"})
    assert clean == {"PATH": "/bin", "HOME": "/root"}


def test_run_as_wraps_argv_and_hands_the_variant_to_the_program_alone():
    ident = commands.Identity(("setpriv", "--reuid=101", "--regid=104", "--init-groups", "--"), "postgres", 101, 104)
    argv = ident.argv(["/usr/lib/postgresql/15/bin/postgres", "-D", "d"], {"LD_PRELOAD": "/x.so"})
    assert argv[:5] == ["setpriv", "--reuid=101", "--regid=104", "--init-groups", "--"]
    assert argv[5].endswith("env") and argv[6:] == ["LD_PRELOAD=/x.so", "/usr/lib/postgresql/15/bin/postgres", "-D", "d"]
    assert commands.Identity().argv(["a"], {"X": "1"}) == ["a"]


def test_port_checks_use_real_sockets():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert commands.port_in_use(port) and commands.tcp_accepts(port)
    assert not commands.port_in_use(port) and not commands.tcp_accepts(port)
    assert commands.free_port() > 0


def test_key_locator_follows_nested_arrays_of_tables():
    text = textwrap.dedent("""\
    [a]
    x = 1
    [[b]]
    y = 1
    [[b.c]]
    z = 1
    [[b]]
    y = 2
    [[b.c]]
    z = 2
    [[b.c]]
    z = 3
    w = '''
    fake = 1
    '''
    """)
    loc = toml_check.KeyLocator(text)
    assert loc.line_of(("a", "x")) == 2
    assert loc.line_of(("b", 1, "y")) == 8
    assert loc.line_of(("b", 1, "c", 1, "z")) == 12
    assert loc.line_of(("b", 0, "c", 0, "z")) == 6
    assert ("fake",) not in loc.where and ("b", 1, "c", 1, "fake") not in loc.where


def test_a_single_bracket_client_table_gets_a_precise_fix(tmp_path):
    text = GOOD.replace("[[client]]\nname = \"b\"", "[clientx]\nname = \"b\"").replace("[[client.metrics]]", "[clientx.metrics]")
    assert "unknown key 'clientx'" in error_of(tmp_path, text)
    single = '[service]\ncommand = ["s"]\nready = { tcp = true }\n[client]\ncommand = ["c"]\n'
    assert "Write [[client]] (double brackets)" in error_of(tmp_path, single)


# --- warm-up, progress metrics and phases (service_phases) -----------------------------------------

PHASED = r"""[experiment]
name = "toy"

[params]
n = 3

[service]
command = ["server", "--port", "{port}"]
ready = { tcp = true }

[[client]]
name = "a"
command = ["client", "{port}", "-n", "{n}"]
warmup = [["warm", "{port}"], ["checkpoint"]]
metrics = [{ name = "tps", progress = 'progress: [\d.]+ s, ([\d.]+) tps', skip = 3 }]
[[client.phase]]
name = "flush"
command = ["flush", "{port}"]
idle = 2
[[client.phase]]
name = "idle"
idle = "{n}"

[[client]]
name = "b"
warmup = 2.5
command = ["client", "{port}"]
"""


def test_warmup_progress_and_phases_parse(tmp_path):
    from alloclab.workloads.phases import Phase, Warmup
    ef = xf.load(write(tmp_path, PHASED))
    a, b = ef.loads
    assert a.warmup == Warmup(commands=(("warm", "{port}"), ("checkpoint",)))
    assert b.warmup == Warmup(seconds=2.5) and b.phases == ()
    assert a.phases == (Phase("flush", ("flush", "{port}"), 2.0), Phase("idle", (), "{n}"))
    tps = a.metrics[0]
    assert tps.progress and tps.skip == 3 and tps.regex is None
    names = [d.name for d in ef.metric_defs(a)]
    assert names == ["tps"]
    from alloclab.workloads.phases import phase_metric_defs
    defs = {d.name: d for d in phase_metric_defs(a)}
    assert set(defs) == {"rss_after_load_mb", "rss_after_flush_mb", "pss_after_flush_mb", "returned_after_flush",
                         "rss_after_idle_mb", "pss_after_idle_mb", "returned_after_idle"}
    assert defs["returned_after_flush"].higher_is_better and not defs["rss_after_flush_mb"].higher_is_better


@pytest.mark.parametrize("old, new, expected, on_line", [
    ('warmup = 2.5', 'warmup = -1', "'warmup' must be more than 0 seconds", "warmup = -1"),
    ('warmup = 2.5', 'warmup = "pgbench"', "'warmup' must be seconds, a command or a list of commands", "warmup ="),
    ('warmup = 2.5', 'warmup = [["ok"], []]', "client[1].warmup[1]' must be a non-empty list of strings", "warmup ="),
    ('name = "flush"', 'name = "load"', "phase name 'load' cannot be used", 'name = "load"'),
    ('name = "flush"', 'name = "idle"', "two phases are named 'idle'", 'name = "idle"'),
    ('name = "flush"', 'name = "fl ush"', "phase name 'fl ush' cannot be used", 'name = "fl ush"'),
    ('idle = "{n}"', 'idle = "soon"', "idle = 'soon' is neither seconds nor a \"{param}\"", 'idle = "soon"'),
    ('idle = "{n}"', 'idle = "{nope}"', "unknown placeholder '{nope}'", '{nope}'),
    ('command = ["flush", "{port}"]\nidle = 2', 'timeout = 3', "phase 'flush' has neither a command nor an idle time",
     "[[client.phase]]"),
    ('idle = 2', 'idle = 2\nwait = 1', "unknown key 'wait' in [client[0].phase[0]]", "wait = 1"),
    ("skip = 3", "skip = -1", "'skip' must be 0 or more", "skip = -1"),
    ("progress = 'progress: [\\d.]+ s, ([\\d.]+) tps', skip = 3", 'regex = "x", skip = 3',
     "'skip' only applies to a progress metric", "skip = 3"),
])
def test_warmup_and_phase_errors_name_file_line_and_key(tmp_path, old, new, expected, on_line):
    assert old in PHASED, old
    msg = error_of(tmp_path, PHASED.replace(old, new, 1))
    assert expected in msg, msg
    path = tmp_path / "exp.toml"
    assert msg.startswith(f"{path}:"), msg
    line = int(msg[len(str(path)) + 1:].split(":")[0])
    assert on_line in path.read_text().splitlines()[line - 1], (line, msg)


def test_phases_and_warmup_belong_to_clients_only(tmp_path):
    text = '[experiment]\nname = "c"\n\n[[command]]\ncommand = ["true"]\nwarmup = 3\n'
    msg = error_of(tmp_path, text)
    assert "exp.toml:6: unknown key 'warmup' in [command[0]]" in msg


def test_steady_state_drops_the_first_intervals():
    from alloclab.workloads.phases import steady_values
    spec = xf.MetricSpec("tps", "tps", True, True, progress=r"progress: [\d.]+ s, ([\d.]+) tps", skip=2)
    out = "\n".join(f"progress: {i}.0 s, {v} tps, lat 1 ms" for i, v in enumerate([2.0, 6.0, 9.0, 11.0, 10.0], 1))
    values, intervals = steady_values((spec,), out + "\ntps = 7.6 (without initial connection time)")
    assert intervals == {"tps": [2.0, 6.0, 9.0, 11.0, 10.0]} and values == {"tps": 10.0}
    # Too few intervals: no value, so the run fails with the runner's 'matched nothing' message.
    assert steady_values((spec,), "progress: 1.0 s, 5.0 tps\nprogress: 2.0 s, 5.0 tps")[0] == {}


def test_fraction_returned_is_of_the_growth_since_readiness():
    from alloclab.measure.service_phases import Reading, phase_summary
    mb = 1024
    load = Reading("load", 1.0, 5.0, 110 * mb, 100 * mb)
    phases = [Reading("half", 5.0, 6.0, 120 * mb, 110 * mb), Reading("flush", 6.0, 7.0, 30 * mb, 25 * mb),
              Reading("idle", 7.0, 9.0, 10 * mb, None)]
    out = phase_summary(10 * mb, load, phases)
    # The top is the highest reading so far: 110 at load end, then 120 after "half".
    assert out["returned_after_half"] == pytest.approx(-0.1)
    assert out["returned_after_flush"] == pytest.approx(90 / 110)
    assert out["returned_after_idle"] == pytest.approx(1.0)
    assert out["rss_after_flush_mb"] == 30 and out["pss_after_flush_mb"] == 25 and "pss_after_idle_mb" not in out
    assert [p["name"] for p in out["phases"]] == ["load", "half", "flush", "idle"]
    # A server that barely grew: the growth counts as 1 MiB, so the fraction stays near 0.
    tiny = phase_summary(10 * mb, Reading("load", 0, 1, 10 * mb + 10, None), [Reading("x", 1, 2, 10 * mb, None)])
    assert tiny["returned_after_x"] == pytest.approx(10 / 1024)
def test_background_env_and_measured_ratios_are_checked_with_their_line(tmp_path):
    assert "exp.toml:5: `background = true` is for a [[setup]] step" in error_of(tmp_path, """
    [[setup]]
    command = ["sleep", "100"]
    timeout = 3
    background = true
    [[command]]
    command = ["true"]
    """)
    msg = error_of(tmp_path, """
    [experiment]
    env = { LD_PRELOAD = "/x.so" }
    [[command]]
    command = ["true"]
    """)
    assert "exp.toml:3: experiment.env cannot set 'LD_PRELOAD'" in msg
    assert "cannot use '{port}'" in error_of(tmp_path, """
    [experiment]
    env = { X = "{port}" }
    [service]
    command = ["srv"]
    ready = { tcp = true }
    [[client]]
    command = ["true"]
    """)
    assert "@load_cpu_s is a server's CPU" in error_of(tmp_path, """
    [[command]]
    command = ["true"]
    metrics = [{ name = "x", ratio = { numerator = "@load_cpu_s", denominator = "n=(\\\\d+)" } }]
    """)
    assert "unknown measure '@cpu'" in error_of(tmp_path, """
    [[command]]
    command = ["true"]
    metrics = [{ name = "x", ratio = { numerator = "@cpu", denominator = "n=(\\\\d+)" } }]
    """)


def test_a_measured_ratio_divides_the_measure_of_the_process_under_the_variant():
    from alloclab.measure.run import RunResult
    spec = xf.MetricSpec("cpu_us", "us", False, False, ratio=("@cpu_s", r"ops: (\d+)"), scale=1e6)
    load = xf.MetricSpec("load_us", "us", False, False, ratio=("@load_cpu_s", r"ops: (\d+)"), scale=1e6)
    run = RunResult("ok", 1.0, user_s=0.3, sys_s=0.1)
    out = service_values.derived_values((spec, load), "ops: 4000", run, {"load_cpu_s": 0.2})
    assert out == pytest.approx({"cpu_us": 100.0, "load_us": 50.0})
    assert service_values.derived_values((spec,), "ops: 4000") == {}   # no run, no measure: no value

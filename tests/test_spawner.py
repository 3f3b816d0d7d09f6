"""The persistent launcher, on the real static binary: what a run gets, failures, and one server
per thread and per process."""

from __future__ import annotations

import os
import threading

from alloclab.measure.run import run_once
from alloclab.measure import spawner


def test_argv_env_and_directory_reach_the_program(tmp_path):
    (tmp_path / "here").mkdir()
    argv = ["/bin/sh", "-c", 'printf "%s|%s|%s|%s" "$0" "$X" "$(pwd)" "$(cat)"', "a b\tc"]
    r = run_once(argv, {"X": "é=1", "PATH": "/usr/bin:/bin"}, tmp_path / "w", cwd=str(tmp_path / "here"))
    assert r.status == "ok", r
    # stdin is /dev/null (cat reads nothing), the environment is exactly what was given.
    assert r.stdout == f"a b\tc|é=1|{tmp_path / 'here'}|"
    assert r.wall_s > 0 and r.max_rss_kb > 0


def test_program_found_on_the_runs_path_and_exit_codes_and_signals(tmp_path):
    r = run_once(["sh", "-c", "exit 3"], {"PATH": "/usr/bin:/bin"}, tmp_path)
    assert (r.status, r.exit_code) == ("failed", 3)
    r = run_once(["/bin/sh", "-c", "kill -9 $$"], {}, tmp_path)
    assert (r.status, r.signal) == ("failed", 9)


def test_a_program_that_cannot_run_is_a_clear_error_and_the_server_goes_on(tmp_path):
    r = run_once(["/nonexistent/prog"], {}, tmp_path)
    assert r.status == "error" and "cannot execute /nonexistent/prog: No such file or directory" in r.error
    r = run_once(["/bin/true"], {}, tmp_path, cwd="/nonexistent-dir")
    assert r.status == "error" and "cannot change to /nonexistent-dir" in r.error
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "stdout").mkdir()   # the output file cannot be opened
    r = run_once(["/bin/true"], {}, tmp_path / "odd")
    assert r.status == "error" and "cannot open its output files for /bin/true: Is a directory" in r.error
    r = run_once(["true"], {"PATH": "/nonexistent:/usr/bin:/bin"}, tmp_path)   # the program's PATH
    assert r.status == "ok"
    assert run_once(["/bin/true"], {}, tmp_path).status == "ok"


def test_peak_rss_is_the_programs_own_not_pythons(tmp_path):
    big = bytearray(300 * 1024 * 1024)   # this process: 300 MB more; the program must not see it
    big[::4096] = b"x" * len(big[::4096])
    r = run_once(["/bin/true"], {}, tmp_path)
    assert r.max_rss_kb < 50 * 1024, r.max_rss_kb


def test_a_sampled_run_counts_the_program_itself(tmp_path):
    r = run_once(["/usr/bin/python3", "-c", "x = bytearray(80 << 20); x[::4096] = b'y' * len(x[::4096]); "
                          "import time; time.sleep(0.3)"], {}, tmp_path)
    assert r.status == "ok" and r.samples > 3
    assert r.peak_rss_kb > 80 * 1024
    assert [p.name for p in r.processes] == ["python3"]


def test_each_thread_and_each_forked_process_gets_its_own_server(tmp_path):
    main = spawner.current()
    others = []
    t = threading.Thread(target=lambda: others.append(spawner.current()))
    t.start()
    t.join()
    assert others[0] is not main and others[0].proc.pid != main.proc.pid
    others[0].close()
    pid = os.fork()
    if pid == 0:   # a forked child must not talk on its parent's pipes
        try:
            ok = spawner.current() is not main and run_once(["/bin/true"], {}, tmp_path / "c").status == "ok"
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert run_once(["/bin/true"], {}, tmp_path).status == "ok" and spawner.current() is main


def test_a_dead_server_is_replaced(tmp_path):
    s = spawner.current()
    s.kill()
    r = run_once(["/bin/true"], {}, tmp_path)
    assert r.status == "ok" and spawner.current() is not s

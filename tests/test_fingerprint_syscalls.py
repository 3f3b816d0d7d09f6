"""The memory system calls' bytes, from `perf script` lines (measure/fingerprint_syscalls.tally):
pure parsing on lines in perf's own format; tests/test_fingerprint_e2e.py checks it on a real run."""

from __future__ import annotations

from alloclab.measure.fingerprint_syscalls import parse_syscalls, split_by_run, tally

LINES = """\
  2090      syscalls:sys_enter_brk: brk: 0x00000000
  2090       syscalls:sys_exit_brk: 0x55853f982000
  2090      syscalls:sys_enter_brk: brk: 0x55853f9a3000
  2090       syscalls:sys_exit_brk: 0x55853f9a3000
  2090      syscalls:sys_enter_brk: brk: 0x55853f992000
  2090       syscalls:sys_exit_brk: 0x55853f992000
  2091      syscalls:sys_enter_brk: brk: 0x55853f9b3000
  2091       syscalls:sys_exit_brk: 0x55853f9b3000
  2091      syscalls:sys_enter_brk: brk: 0x55853f9a3000
  2091       syscalls:sys_exit_brk: 0x55853f9a3000
  2091/2091      syscalls:sys_enter_brk: brk: 0x00000000
  2091/2091       syscalls:sys_exit_brk: 0x5612aa000000
  2091      syscalls:sys_enter_brk: brk: 0x5612aa021000
  2091       syscalls:sys_exit_brk: 0x5612aa021000
  2090     syscalls:sys_enter_mmap: addr: 0x00000000, len: 0x00002000, prot: 0x00000003, flags: 0x00000022, fd: 0xffffffff, off: 0x00000000
  2090     syscalls:sys_enter_mmap: addr: 0x00000000, len: 0x00009a4f, prot: 0x00000001, flags: 0x00000002, fd: 0x00000003, off: 0x00000000
  2090   syscalls:sys_enter_munmap: addr: 0x7fd24e7e0000, len: 0x00001000
  2090  syscalls:sys_enter_madvise: start: 0x7fd24e7e0000, len_in: 0x00010000, behavior: 0x00000004
  2090  syscalls:sys_enter_madvise: start: 0x7fd24e7e0000, len_in: 0x00004000, behavior: 0x0000000e
  2090 syscalls:sys_enter_mprotect: start: 0x7fd24e989000, len: 0x00004000, prot: 0x00000001
"""


def test_counts_and_bytes():
    counts, moved = tally(LINES.splitlines())
    assert counts == {"brk": 7, "mmap": 2, "munmap": 1, "mremap": 0, "madvise": 2, "mprotect": 1}
    # 2090: brk(0) gives the break, then +0x21000 and -0x11000; 2091 (a forked child): its first
    # call has no break of its own to start from, its second shrinks by 0x10000; then it execs
    # (brk(0) in another address space: no bytes) and grows by 0x21000.
    assert moved["brk_grown"] == 0x21000 + 0x21000
    assert moved["brk_shrunk"] == 0x11000 + 0x10000
    assert moved["mmap_anon"] == 0x2000 and moved["mmap_file"] == 0x9a4f
    assert moved["munmap"] == 0x1000 and moved["mprotect"] == 0x4000
    assert moved["madvise_released"] == 0x10000 and moved["madvise_other"] == 0x4000


# The same calls as raw_syscalls records them on x86_64 (one tracepoint filtered by number, and
# brk's return; perf script prints the arguments in hex, the return in decimal); other calls
# (write, NR 1) are left out.
RAW_LINES = """\
  2090  raw_syscalls:sys_enter: NR 12 (0, 0, 0, 0, 0, 0)
  2090   raw_syscalls:sys_exit: NR 12 = 94030785945600
  2090  raw_syscalls:sys_enter: NR 12 (55853f9a3000, 0, 0, 0, 0, 0)
  2090   raw_syscalls:sys_exit: NR 12 = 94030786080768
  2090  raw_syscalls:sys_enter: NR 12 (55853f992000, 0, 0, 0, 0, 0)
  2090   raw_syscalls:sys_exit: NR 12 = 94030786011136
  2091  raw_syscalls:sys_enter: NR 12 (55853f9b3000, 0, 0, 0, 0, 0)
  2091   raw_syscalls:sys_exit: NR 12 = 94030786146304
  2091  raw_syscalls:sys_enter: NR 12 (55853f9a3000, 0, 0, 0, 0, 0)
  2091   raw_syscalls:sys_exit: NR 12 = 94030786080768
  2091/2091  raw_syscalls:sys_enter: NR 12 (0, 0, 0, 0, 0, 0)
  2091/2091   raw_syscalls:sys_exit: NR 12 = 94638161526784
  2091  raw_syscalls:sys_enter: NR 12 (5612aa021000, 0, 0, 0, 0, 0)
  2091   raw_syscalls:sys_exit: NR 12 = 94638161661952
  2090  raw_syscalls:sys_enter: NR 9 (0, 2000, 3, 22, ffffffff, 0)
  2090  raw_syscalls:sys_enter: NR 9 (0, 9a4f, 1, 2, 3, 0)
  2090  raw_syscalls:sys_enter: NR 11 (7fd24e7e0000, 1000, 0, 0, 0, 0)
  2090  raw_syscalls:sys_enter: NR 28 (7fd24e7e0000, 10000, 4, 0, 0, 0)
  2090  raw_syscalls:sys_enter: NR 28 (7fd24e7e0000, 4000, e, 0, 0, 0)
  2090  raw_syscalls:sys_enter: NR 10 (7fd24e989000, 4000, 1, 0, 0, 0)
  2090  raw_syscalls:sys_enter: NR 1 (1, 7ffc420fe9bc, 10, 0, 0, 0)
"""


def test_raw_syscalls_lines_give_the_same_counts_and_bytes(monkeypatch):
    from alloclab.measure import fingerprint_syscalls
    monkeypatch.setattr(fingerprint_syscalls.platform, "machine", lambda: "x86_64")
    assert tally(RAW_LINES.splitlines()) == tally(LINES.splitlines())


def test_strace_table_gives_counts_without_bytes(tmp_path):
    f = tmp_path / "syscalls.out"
    f.write_text("""% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 60.00    0.000030           1        24           brk
 40.00    0.000020           1        14           mmap
------ ----------- ----------- --------- --------- ----------------
100.00    0.000050           1        38           total
""")
    counts, moved, note = parse_syscalls(f)
    assert counts["brk"] == 24 and counts["mmap"] == 14 and counts["munmap"] == 0
    assert moved is None and note == ""


def test_nothing_readable(tmp_path):
    assert parse_syscalls(tmp_path / "missing") is None
    (tmp_path / "empty").write_text("")
    assert parse_syscalls(tmp_path / "empty") is None


# One shared recording of two runs (a SharedRecorder's): the launcher (100) forks run A's root
# (201), which forks a child (202) with a thread of its own; then run B's root, whose pid is 202
# again, once A's 202 has exited. The launcher's own call is no run's.
SHARED = """\
   100/100   raw_syscalls:sys_enter: NR 12 (0, 0, 0, 0, 0, 0)
   100/100   PERF_RECORD_FORK(201:201):(100:100)
   201/201   raw_syscalls:sys_enter: NR 9 (0, 2000, 3, 22, ffffffff, 0)
   201/201   PERF_RECORD_FORK(202:202):(201:201)
   202/202   PERF_RECORD_FORK(202:203):(202:202)
   202/203   raw_syscalls:sys_enter: NR 11 (7f0000000000, 1000, 0, 0, 0, 0)
   202/202   PERF_RECORD_EXIT(202:202):(201:201)
   201/201   PERF_RECORD_EXIT(201:201):(100:100)
   100/100   PERF_RECORD_FORK(202:202):(100:100)
   202/202   raw_syscalls:sys_enter: NR 28 (7f0000000000, 4000, 4, 0, 0, 0)
   202/202   raw_syscalls:sys_enter: NR 9 (0, 3000, 3, 22, ffffffff, 0)
"""


def test_a_shared_recording_split_by_each_runs_tree():
    runs = split_by_run(SHARED.splitlines(), [(201, "A"), (202, "B")])
    a, b = tally(runs["A"])[0], tally(runs["B"])[0]
    # A: its root's mmap and its child's thread's munmap; B: the madvise and mmap of pid 202 again.
    assert (a["mmap"], a["munmap"], a["madvise"], a["brk"]) == (1, 1, 0, 0), a
    assert (b["mmap"], b["munmap"], b["madvise"], b["brk"]) == (1, 0, 1, 0), b
    # A run that never started (no FORK of its root) gets nothing.
    assert split_by_run(SHARED.splitlines(), [(999, "C")]) == {"C": []}


# The recorder's own probe (pid 201, no run's) and run A, then run B under the probe's pid again;
# perf lost the FORK record of C's root, and D's exec failed (pid 0) before E.
REUSED = """\
   100/100   PERF_RECORD_FORK(201:201):(100:100)
   201/201   raw_syscalls:sys_enter: NR 9 (0, 2000, 3, 22, ffffffff, 0)
   100/100   PERF_RECORD_FORK(300:300):(100:100)
   300/300   raw_syscalls:sys_enter: NR 11 (7f0000000000, 1000, 0, 0, 0, 0)
   100/100   PERF_RECORD_FORK(201:201):(100:100)
   201/201   raw_syscalls:sys_enter: NR 28 (7f0000000000, 4000, 4, 0, 0, 0)
   100/100   PERF_RECORD_FORK(400:400):(100:100)
   100/100   PERF_RECORD_FORK(500:500):(100:100)
   500/500   raw_syscalls:sys_enter: NR 10 (7f0000000000, 1000, 1, 0, 0, 0)
"""


def test_launches_matched_in_order_not_by_pid_alone():
    launches = [(201, None), (300, "A"), (201, "B"), (350, "C"), (0, None), (500, "E")]
    runs = split_by_run(REUSED.splitlines(), launches)
    a, b, c, e = (tally(runs[k])[0] for k in "ABCE")
    # By pid alone, the probe's FORK would have taken B's place, and B's calls would be the probe's.
    assert (a["munmap"], a["mmap"]) == (1, 0), a
    assert (b["madvise"], b["mmap"]) == (1, 0), b
    assert sum(c.values()) == 0 and e["mprotect"] == 1, (c, e)


#!/usr/bin/python3
"""A throwaway single-host Ceph cluster inside one directory, for the ceph-* recipes.

Every command takes the cluster directory (the experiment's {workdir}) as its first argument;
everything the cluster writes (configuration, monitor store, OSD block files, sockets, logs)
stays under it, every address is 127.0.0.1, and every Ceph command is given the configuration
file explicitly, so that neither /etc/ceph nor a system service is ever read or touched.
The daemons themselves are started by alloclab (`[[setup]] background = true` for the fixed
ones, `[service]` for the one under the variant), so that alloclab alone owns and stops them.

Run by /usr/bin/python3 (which the ceph CLI itself needs), standard library only.

  cephlab.py DIR init [--osds N] [--osd-memory-target BYTES] [--block-size BYTES]
  cephlab.py DIR osd-mkfs ID          register osd.ID with the monitor and format its BlueStore file
  cephlab.py DIR wait-osds N [SECS]   until N OSDs are up and a pool's I/O goes through
  cephlab.py DIR osd-ready ID         exit 0 once this osd.ID instance is up (a readiness probe)
  cephlab.py DIR pool POOL IMAGE MiB  a size-1 pool with an RBD image, written once end to end
  cephlab.py DIR fio ARGS...          run fio with JSON output, print one line of summary JSON
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid

MON_ID = "a"


def conf_path(d: str) -> str:
    return os.path.join(d, "ceph.conf")


def ceph(d: str, *args: str, timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ceph", "--conf", conf_path(d), "--connect-timeout", "10", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        sys.exit(f"cephlab: `{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def run(argv: list[str], timeout: float = 600.0) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        sys.exit(f"cephlab: `{' '.join(argv)}` failed ({proc.returncode}): "
                 f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc.stdout


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_range(width: int) -> int:
    """The first port of `width` consecutive free loopback ports, for the OSDs' messengers."""
    for _ in range(200):
        base = free_port()
        if base + width > 65535:
            continue
        ok = True
        for p in range(base, base + width):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    sys.exit("cephlab: found no range of free loopback ports for the OSDs")


def init(d: str, osds: int, memory_target: int, block_size: int) -> None:
    for sub in ("run", "log", "crash", f"mon-{MON_ID}"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    fsid = str(uuid.uuid4())
    mon_port = free_port()
    # Each OSD binds 4 messengers (public, cluster, 2 heartbeats); a restarted OSD may need a
    # fresh set while the old sockets linger, so the range leaves room for that.
    osd_base = free_range(8 * max(osds, 1) + 8)
    with open(conf_path(d), "w") as fh:
        fh.write(conf_text(d, fsid, mon_port, osd_base, osds, memory_target, block_size))
    with open(os.path.join(d, "keyring"), "w") as fh:
        fh.write("")
    monmap = os.path.join(d, "monmap")
    run(["monmaptool", "--create", "--clobber", "--fsid", fsid, "--addv", MON_ID,
         f"[v2:127.0.0.1:{mon_port}]", monmap])
    mon_keyring = os.path.join(d, "mon.keyring")
    run(["ceph-authtool", "--create-keyring", mon_keyring, "--gen-key", "-n", "mon.", "--cap", "mon", "allow *"])
    run(["ceph-mon", "--conf", conf_path(d), "--mkfs", "-i", MON_ID, "--monmap", monmap, "--keyring", mon_keyring])


def conf_text(d: str, fsid: str, mon_port: int, osd_base: int, osds: int, memory_target: int,
              block_size: int) -> str:
    return f"""# Written by alloclab's cephlab.py: a private, throwaway cluster in this directory.
[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
ms bind port min = {osd_base}
ms bind port max = {osd_base + 8 * max(osds, 1) + 7}
# No cephx: nothing but loopback can reach this cluster, and it lives for one experiment.
auth cluster required = none
auth service required = none
auth client required = none
keyring = {d}/keyring
run dir = {d}/run
admin socket = {d}/run/$cluster-$name.asok
pid file = {d}/run/$name.pid
log file = {d}/log/$name.log
mon cluster log file = {d}/log/cluster.log
crash dir = {d}/crash
log to stderr = false
err to stderr = true
mon data = {d}/mon-$id
osd data = {d}/osd-$id
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
# BlueStore on a sparse file: the data path of a real OSD (allocator, cache, RocksDB), and the
# data survives the OSD restarts the ceph-osd recipe makes (MemStore's would not).
osd objectstore = bluestore
bluestore block create = true
bluestore block size = {block_size}
bluestore fsck on mount = false
osd memory target = {memory_target}
# The machine is small: less background work, no scrubs during a measurement.
osd scrub begin hour = 0
osd scrub end hour = 0
osd scrub load threshold = 0.01
osd max scrubs = 0
mon osd down out interval = 0
osd heartbeat grace = 60
debug ms = 0/0
debug osd = 0/0
debug bluestore = 0/0
debug rocksdb = 0/0
debug mon = 0/0
debug paxos = 0/0
"""


def wait_mon(d: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        proc = ceph(d, "mon", "stat", timeout=15, check=False)
        if proc.returncode == 0:
            return
        if time.monotonic() > deadline:
            sys.exit(f"cephlab: the monitor did not answer within {seconds:g} s: {proc.stderr.strip()[-1000:]}")
        time.sleep(0.5)


def osd_mkfs(d: str, osd_id: str) -> None:
    wait_mon(d)
    osd_uuid = str(uuid.uuid4())
    ceph(d, "osd", "new", osd_uuid, osd_id)
    os.makedirs(os.path.join(d, f"osd-{osd_id}"), exist_ok=True)
    run(["ceph-osd", "--conf", conf_path(d), "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid], timeout=300)


def osd_map(d: str) -> dict:
    proc = ceph(d, "osd", "dump", "--format", "json", timeout=10, check=False)
    if proc.returncode != 0:
        return {}
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {}


def osd_pid(d: str, osd_id: str) -> int | None:
    try:
        with open(os.path.join(d, "run", f"osd.{osd_id}.pid")) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def osd_ready(d: str, osd_id: str) -> bool:
    """This instance of osd.ID is up in the map: its address carries the pid's nonce."""
    pid = osd_pid(d, osd_id)
    try:
        # A stopped OSD may leave its pid file behind: only a live pid is this instance's.
        with open(f"/proc/{pid}/comm") as fh:
            if fh.read().strip() != "ceph-osd":
                return False
    except (OSError, TypeError):
        return False
    for osd in osd_map(d).get("osds", []):
        if str(osd.get("osd")) == osd_id and osd.get("up") == 1:
            addrs = osd.get("public_addrs", {}).get("addrvec", [])
            # A restarted OSD keeps its id; only its nonce (the pid) tells the new instance from the old.
            return any(a.get("nonce") == pid for a in addrs)
    return False


def wait_osds(d: str, count: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        up = [o for o in osd_map(d).get("osds", []) if o.get("up") == 1]
        if len(up) >= count:
            return
        if time.monotonic() > deadline:
            sys.exit(f"cephlab: only {len(up)} of {count} OSDs came up within {seconds:g} s; see {d}/log/")
        time.sleep(0.5)


def pool(d: str, name: str, image: str, size_mb: int) -> None:
    if size_mb < 1:
        sys.exit(f"cephlab pool: the image size must be at least 1 MiB (got {size_mb}); set image_mb to a positive size")
    wait_osds(d, 1, 120)
    ceph(d, "osd", "pool", "create", name, "16", "16")
    ceph(d, "osd", "pool", "set", name, "size", "1", "--yes-i-really-mean-it")
    ceph(d, "osd", "pool", "application", "enable", name, "rbd")
    run(["rbd", "--conf", conf_path(d), "create", "--size", f"{size_mb}M", f"{name}/{image}"], timeout=300)
    # Written once end to end, so that reads are served from stored objects, not from holes.
    run(["rbd", "--conf", conf_path(d), "bench", "--io-type", "write", "--io-size", "4M", "--io-threads", "4",
         "--io-total", f"{size_mb}M", "--io-pattern", "seq", f"{name}/{image}"], timeout=600)


def fio(d: str, args: list[str]) -> int:
    """fio with JSON output, summarised on one line (fio's text switches units with magnitude)."""
    proc = subprocess.run(["fio", "--output-format=json", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, cwd=d)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        return proc.returncode
    start = proc.stdout.find("{")
    doc = json.loads(proc.stdout[start:])
    out: dict[str, float] = {}
    for job in doc.get("jobs", []):
        for rw in ("read", "write"):
            part = job.get(rw, {})
            ios = part.get("total_ios")
            if not ios:
                continue
            out[f"{rw}_iops"] = out.get(f"{rw}_iops", 0.0) + part["iops"]
            out[f"{rw}_ios"] = out.get(f"{rw}_ios", 0) + ios
            pct = part.get("clat_ns", {}).get("percentile", {})
            for key, label in (("50.000000", "p50"), ("99.000000", "p99"), ("99.900000", "p99_9")):
                if key in pct:
                    # With group_reporting there is one job; otherwise the worst job's percentile.
                    out[f"{rw}_clat_{label}_us"] = max(out.get(f"{rw}_clat_{label}_us", 0.0), pct[key] / 1000)
            out[f"{rw}_clat_mean_us"] = part.get("clat_ns", {}).get("mean", 0.0) / 1000
    print(json.dumps({"fio": out}))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.exit(__doc__)
    d, cmd, rest = os.path.abspath(argv[0]), argv[1], argv[2:]
    if cmd == "init":
        opts = {"--osds": "1", "--osd-memory-target": str(1 << 30), "--block-size": str(4 << 30)}
        for i in range(0, len(rest), 2):
            if rest[i] not in opts or i + 1 >= len(rest):
                sys.exit(f"cephlab init: unknown or incomplete option {rest[i]!r}; known: {', '.join(opts)}")
            opts[rest[i]] = rest[i + 1]
        init(d, int(opts["--osds"]), int(opts["--osd-memory-target"]), int(opts["--block-size"]))
    elif cmd == "osd-mkfs" and len(rest) == 1:
        osd_mkfs(d, rest[0])
    elif cmd == "wait-osds" and len(rest) in (1, 2):
        wait_osds(d, int(rest[0]), float(rest[1]) if len(rest) == 2 else 120.0)
    elif cmd == "osd-ready" and len(rest) == 1:
        return 0 if osd_ready(d, rest[0]) else 1
    elif cmd == "pool" and len(rest) == 3:
        pool(d, rest[0], rest[1], int(rest[2]))
    elif cmd == "fio":
        return fio(d, rest)
    else:
        sys.exit(f"cephlab: unknown command or wrong arguments: {' '.join(argv[1:])}\n{__doc__}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

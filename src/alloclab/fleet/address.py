"""--fleet ADDRESS: which Dask cluster to use, parsed before anything starts."""

from __future__ import annotations

import re
from dataclasses import dataclass

from alloclab.errors import AlloclabError

FORMS = ("tcp://HOST:PORT (a running Dask scheduler), ssh://COORDINATOR,HOST1,HOST2,... (alloclab starts "
         "a Dask SSHCluster: the scheduler on the first host, one worker on each of the others) or local:N "
         "(N worker processes on this machine, for trying it out)")
MODES = ("per-host", "split")


@dataclass(frozen=True)
class FleetAddress:
    kind: str            # tcp | ssh | local
    text: str
    hosts: tuple[str, ...] = ()   # ssh: coordinator first
    workers: int = 0              # local: how many

    @property
    def expected_workers(self) -> int:
        return {"local": self.workers, "ssh": len(self.hosts) - 1}.get(self.kind, 1)


def parse(text: str) -> FleetAddress:
    t = text.strip()
    if m := re.fullmatch(r"local:(\d+)", t):
        n = int(m.group(1))
        if not 1 <= n <= 64:
            raise AlloclabError(f"--fleet {text}: a local fleet has 1 to 64 workers (got {n}). Write e.g. local:2.")
        return FleetAddress("local", t, workers=n)
    if m := re.fullmatch(r"tcp://([^\s/:]+|\[[0-9a-fA-F:]+\]):(\d+)", t):
        return FleetAddress("tcp", t)
    if t.startswith("ssh://"):
        hosts = tuple(h.strip() for h in t[len("ssh://"):].split(","))
        if len(hosts) < 2 or not all(re.fullmatch(r"[\w.@-]+", h) for h in hosts):
            raise AlloclabError(f"--fleet {text}: write ssh://COORDINATOR,HOST1[,HOST2...]: the first host runs the "
                                f"Dask scheduler (and no benchmark), each of the others one benchmark worker; host "
                                f"names only, separated by commas.")
        return FleetAddress("ssh", t, hosts=hosts)
    raise AlloclabError(f"Cannot read --fleet '{text}'. Give {FORMS}.")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise AlloclabError(f"Unknown --fleet-mode '{mode}'; choose per-host (the whole experiment on every host) "
                            f"or split (its blocks spread over identical hosts).")
    return mode

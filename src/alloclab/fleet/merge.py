"""The client's side of the store: the hosts' verifications combined, the fleet's record kept in
the experiment row. The SQL that merges a session's runs is store.merge's."""

from __future__ import annotations

from alloclab.store.db import Store

VERIFICATION_RANK = {"ineffective": 2, "unknown": 1, "verified": 0}


def combine_verifications(per_host: dict[str, dict]) -> dict:
    """One verdict per cell across hosts: the worst status; reasons and host-specific notes name the host."""
    cells: dict = {}
    for host, found in per_host.items():
        for cell, v in found.items():
            cells.setdefault(cell, {})[host] = v
    out = {}
    for cell, hosts in cells.items():
        status = max((v["status"] for v in hosts.values()), key=lambda s: VERIFICATION_RANK.get(s, 1))
        reasons = [f"on {h}: {r}" for h, v in hosts.items() for r in v["reasons"]]
        notes: list[str] = []
        for h, v in hosts.items():
            for note in v["notes"]:
                shared = all(note in other["notes"] for other in hosts.values())
                text = note if shared else f"on {h}: {note}"
                if text not in notes:
                    notes.append(text)
        out[cell] = {"status": status, "reasons": reasons, "notes": notes}
    return out


def update_experiment(store: Store, exp_id: int, *, config: dict | None = None, machine: dict | None = None) -> None:
    """The client's running record of the fleet (hosts, their snapshots, failures) in the experiment row."""
    if config is not None:
        store.set_config(exp_id, config)
    if machine is not None:
        store.set_machine(exp_id, machine)

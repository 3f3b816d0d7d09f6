"""The client's side of the store: what a session brought back, the hosts' verifications combined,
the fleet's record kept in the experiment row. The SQL that merges a session's runs is store.merge's."""

from __future__ import annotations

from dataclasses import dataclass, field

from alloclab.store.db import Store
from alloclab.store.model import Verification

VERIFICATION_RANK = {"ineffective": 2, "unknown": 1, "verified": 0}


@dataclass
class Merged:
    """What store.merge.merge_session reports of one session besides the runs it copied."""

    runs: int = 0
    measured_blocks: int = 0
    config: dict = field(default_factory=dict)     # the session's own experiment config (JSON)
    machine: dict = field(default_factory=dict)    # its machine record (JSON)
    verifications: dict[tuple[int, int], Verification] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.verifications = {cell: _verification(cell, v) for cell, v in self.verifications.items()}


def _verification(cell: tuple[int, int], v) -> Verification:
    """A cell's verification, from its record or the {status, reasons, notes} the store and the
    machine record keep per host."""
    return v if isinstance(v, Verification) else Verification(*cell, **v)


def verification_json(v: Verification) -> dict:
    """A host's verification of a cell as its machine record keeps it (hosts.for_host reads it back)."""
    return {"status": v.status, "reasons": v.reasons, "notes": v.notes}


def combine_verifications(per_host: dict[str, dict]) -> dict[tuple[int, int], Verification]:
    """One verdict per cell across hosts: the worst status; reasons and host-specific notes name the host."""
    cells: dict = {}
    for host, found in per_host.items():
        for cell, v in found.items():
            cells.setdefault(cell, {})[host] = _verification(cell, v)
    out = {}
    for cell, hosts in cells.items():
        status = max((v.status for v in hosts.values()), key=lambda s: VERIFICATION_RANK.get(s, 1))
        reasons = [f"on {h}: {r}" for h, v in hosts.items() for r in v.reasons]
        notes: list[str] = []
        for h, v in hosts.items():
            for note in v.notes:
                shared = all(note in other.notes for other in hosts.values())
                text = note if shared else f"on {h}: {note}"
                if text not in notes:
                    notes.append(text)
        out[cell] = Verification(*cell, status, reasons, notes)
    return out


def update_experiment(store: Store, exp_id: int, *, config: dict | None = None, machine: dict | None = None) -> None:
    """The client's running record of the fleet (hosts, their snapshots, failures) in the experiment row."""
    if config is not None:
        store.set_config(exp_id, config)
    if machine is not None:
        store.set_machine(exp_id, machine)

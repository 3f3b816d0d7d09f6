"""The schedule: randomized, interleaved blocks, so drift hits every variant alike.

Each block runs every cell (workload x variant) once, in an order shuffled by a seeded RNG;
warm-up blocks come first and are discarded by the statistics. The order is recorded with
every run, so it can be checked afterwards.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Job:
    block: int
    position: int
    cell: int       # index into the experiment's cells
    warmup: bool
    verify: bool    # run under LD_DEBUG=bindings to prove which malloc serves the program


def block(n_cells: int, block_idx: int, warmup: bool, verify: bool, rng: random.Random) -> list[Job]:
    order = list(range(n_cells))
    rng.shuffle(order)
    return [Job(block_idx, pos, cell, warmup, verify) for pos, cell in enumerate(order)]


def schedule(n_cells: int, runs: int, warmup: int, seed: int, verify: bool = True) -> list[Job]:
    """All jobs of an experiment. With verification on, block 0 is always an untimed warm-up."""
    rng = random.Random(seed)
    warm_blocks = max(warmup, 1 if verify else 0)
    jobs: list[Job] = []
    for b in range(warm_blocks + runs):
        jobs += block(n_cells, b, warmup=b < warm_blocks, verify=verify and b == 0, rng=rng)
    return jobs

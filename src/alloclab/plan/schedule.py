"""The schedule: randomized, interleaved blocks, so drift hits every variant alike.

Each block runs every cell (workload x variant) once, in an order shuffled by a seeded RNG;
warm-up blocks come first and are discarded by the statistics. The order is recorded with
every run, so it can be checked afterwards. Adaptive experiments (until decided, the default
without --runs; --until-precise) ask the same planner for more blocks, so the added runs stay
interleaved.
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


class Planner:
    def __init__(self, n_cells: int, seed: int):
        self.n_cells = n_cells
        self.rng = random.Random(seed)
        self.next_block = 0

    def block(self, warmup: bool = False, verify: bool = False, cells: list[int] | None = None) -> list[Job]:
        """One block; `cells` narrows it to the cells still measured (a sequential experiment stops
        running the comparisons it has decided, but keeps each block's order random)."""
        order = list(range(self.n_cells)) if cells is None else list(cells)
        self.rng.shuffle(order)
        b = self.next_block
        self.next_block += 1
        return [Job(b, pos, cell, warmup, verify) for pos, cell in enumerate(order)]

    def initial(self, runs: int, warmup: int, verify: bool = True) -> list[Job]:
        """The first blocks. With verification on, block 0 is always an untimed warm-up."""
        warm_blocks = max(warmup, 1 if verify else 0)
        jobs: list[Job] = []
        for b in range(warm_blocks + runs):
            jobs += self.block(warmup=b < warm_blocks, verify=verify and b == 0)
        return jobs


def schedule(n_cells: int, runs: int, warmup: int, seed: int, verify: bool = True) -> list[Job]:
    return Planner(n_cells, seed).initial(runs, warmup, verify)

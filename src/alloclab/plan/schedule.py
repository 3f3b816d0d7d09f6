"""The schedule: randomized, interleaved blocks, so drift hits every variant alike.

Each block runs every cell (workload x variant) once, in an order shuffled by a seeded RNG;
warm-up blocks come first and are discarded by the statistics. Within a block the runs of one
workload are kept together (the workloads in a shuffled order, the variants of each shuffled
among themselves): the statistics compare variants within a workload and a block, and the
closer in time two paired runs are, the less of the machine's drift lies between them (on the
2-core VM, PostgreSQL's per-block ratios at 2 clients spread 0.061 in log when the two runs were
adjacent against 0.099 when a whole block's worth of other runs lay between them). The order is
recorded with every run, so it can be checked afterwards.

Counterbalanced in pairs of blocks: a measured block shuffles each workload's variants, the next
runs them in the reverse order (where the same variants are still measured). A run's position in a
block moves it (in the demo's stored runs, which of two compared runs went first moved xthread by
+15% and larson by -7%); a shuffle alone makes that unbiased but leaves it as noise whenever one
order happens to come up more often, the reversal cancels it within every pair of blocks. Adaptive experiments (until decided,
the default without --runs; --until-precise) ask the same planner for more blocks, so the added
runs stay interleaved.
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
    def __init__(self, n_cells: int, seed: int, groups: list[int] | None = None):
        """`groups[cell]` is the workload of each cell; cells of one group run next to each other."""
        self.n_cells = n_cells
        self.groups = groups if groups is not None else [0] * n_cells
        self.rng = random.Random(seed)
        self.next_block = 0
        self._reverse_next: dict[int, list[int]] = {}   # group -> the order its next block reverses

    def block(self, warmup: bool = False, verify: bool = False, cells: list[int] | None = None) -> list[Job]:
        """One block; `cells` narrows it to the cells still measured (a sequential experiment stops
        running the comparisons it has decided, but keeps each block's order random)."""
        chosen = list(range(self.n_cells)) if cells is None else list(cells)
        by_group: dict[int, list[int]] = {}
        for c in chosen:
            by_group.setdefault(self.groups[c], []).append(c)
        group_order = list(by_group)
        self.rng.shuffle(group_order)
        order: list[int] = []
        for g in group_order:
            members = by_group[g]
            last = self._reverse_next.pop(g, None)
            if not warmup and last is not None and sorted(last) == sorted(members):
                members = last[::-1]
            else:
                self.rng.shuffle(members)
                if not warmup:
                    self._reverse_next[g] = list(members)
            order += members
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


def schedule(n_cells: int, runs: int, warmup: int, seed: int, verify: bool = True,
             groups: list[int] | None = None) -> list[Job]:
    return Planner(n_cells, seed, groups).initial(runs, warmup, verify)

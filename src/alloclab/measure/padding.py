"""The environment's size, made the same for every variant of a block.

A program's stack starts below its environment, so the environment's size moves every stack
address, and with it alignment effects that have nothing to do with the allocator. A variant's
LD_PRELOAD and settings lengthen the environment: ALLOCLAB_PAD fills each run's up to one size,
the block's largest plus a filler drawn per block (runner.py).
"""

from __future__ import annotations

PAD_VAR = "ALLOCLAB_PAD"


def env_size(env: dict[str, str]) -> int:
    """Bytes the environment takes on the new program's stack ("KEY=VALUE\0" each)."""
    return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())


def pad_env(env: dict[str, str], target: int, size: int | None = None) -> dict[str, str]:
    """The environment with ALLOCLAB_PAD sized so the whole takes `target` bytes (or as near as the
    variable's own name allows); `size` is env_size(env) where the caller knows it."""
    need = target - (env_size(env) if size is None else size) - len(PAD_VAR) - 2
    return env | {PAD_VAR: "x" * max(0, need)}

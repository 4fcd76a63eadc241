"""Task splits of the seeded reference environments (OpenEnv's task routes): disjoint seed ranges."""

from __future__ import annotations

TASK_SPLITS: dict[str, range] = {
    "train": range(1_000_000),
    "validation": range(1_000_000, 1_001_000),
    "test": range(2_000_000, 2_001_000),
}
"""Split name -> seeds; a task is the reset options ``{"seed": s}``. Every seed is its own generated world."""

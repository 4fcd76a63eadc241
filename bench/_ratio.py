"""The closing lines of a ratio benchmark: each median against the baseline's, the target's verdict, the load."""

from __future__ import annotations

import os


def ratio_verdict(med: dict[str, float], new: str, base: str, target: float) -> int:
    """Print each median CPU time with its ratio to ``base``'s, whether ``new`` / ``base`` ≤ ``target``, and the load
    average; the exit status (0: met)."""
    width = max(map(len, med))
    for name, t in med.items():
        print(f"  {name:{width}s} {t:7.3f} s  ({t / med[base]:.2f}x)")
    ratio = med[new] / med[base]
    ok = ratio <= target
    print(f"target: {new} / {base} = {ratio:.2f} (<= {target}) -> {'MET' if ok else 'NOT MET'}")
    print(f"load average at the end {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if ok else 1

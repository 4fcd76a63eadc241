"""Benchmark: pooled resets of the shell env, two versions of the code side by side (a change's effect as a ratio).

One pooled shell server per source tree (``--before`` and ``--after``, e.g. ``git archive <commit> | tar -x -C DIR``
and the working tree), resets alternating between them (the order swapped every round) and between three kinds: a
shipped task (``count-word``), a generated training instance of its family and one of the git family (the same
instance each time, so its writing is not counted); ``--episode-s`` between resets. Prints each kind's median
(and minimum) per tree, the ratio before / after and the load average before and after. Needs a Docker engine.

Run: ``python bench/bench_shell_versions.py --before /tmp/old --after . [--rounds 8]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from openenv_echo.client import EnvClient
from openenv_echo.envs.splits import TASK_SPLITS
from openenv_echo.providers import LocalProcessProvider


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _server(tree: Path) -> LocalProcessProvider:
    """``openenv-echo serve shell`` of ``tree`` (its own packages first on the path), the pool on."""
    env = {"PYTHONPATH": f"{tree}:{tree}/envs", "OPENENV_ECHO_SHELL_POOL": "4"}
    return LocalProcessProvider("shell", env=env, cwd=tree, log_level="error", startup_timeout_s=60)


def _kinds() -> dict[str, dict[str, Any]]:
    from shell_env.server.generate_tasks import GENERATED_FAMILIES, SUITE

    names = [f.name for f in GENERATED_FAMILIES]
    first = TASK_SPLITS["train"].start + sum(e.split == "train" for e in SUITE)
    later = 5 * len(names)  # an instance no test uses
    return {
        "shipped count-word": {"task": "count-word"},
        "instance count-word": {"seed": first + names.index("count-word") + later},
        "instance git": {"seed": first + names.index("revert-bad-commit") + later},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="source tree of the old code")
    ap.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1], help="source tree of the new")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--episode-s", type=float, default=1.0, help="pause between resets")
    a = ap.parse_args()
    trees = {"before": a.before.resolve(), "after": a.after.resolve()}
    kinds = _kinds()
    before = _loadavg()
    servers = {name: _server(tree) for name, tree in trees.items()}
    times: dict[tuple[str, str], list[float]] = {(t, k): [] for t in trees for k in kinds}
    try:
        clients = {name: EnvClient(server.start()) for name, server in servers.items()}
        for kind, options in kinds.items():  # images, instances and the pools made before the first timed reset
            tasks = {name: client.reset(**options).metadata["task"] for name, client in clients.items()}
            if len(set(tasks.values())) != 1:
                raise SystemExit(f"{kind}: the two versions map {options} to different tasks: {tasks}")
            time.sleep(a.episode_s)
        for r in range(a.rounds):
            for kind, options in kinds.items():
                for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    began = time.perf_counter()
                    clients[name].reset(**options)
                    times[(name, kind)].append(time.perf_counter() - began)
                    time.sleep(a.episode_s)
        for client in clients.values():
            client.close()
    finally:
        for server in servers.values():
            server.stop()
    print(f"load average before {before}, after {_loadavg()}; before = {trees['before']}, after = {trees['after']}\n")
    print("| reset, pool on | before: median ms (min) | after: median ms (min) | before / after | n |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        b, f = times[("before", kind)], times[("after", kind)]
        print(
            f"| {kind} | {1e3 * statistics.median(b):.1f} ({1e3 * min(b):.1f}) | {1e3 * statistics.median(f):.1f} "
            f"({1e3 * min(f):.1f}) | {statistics.median(b) / statistics.median(f):.1f}x | {len(f)} |"
        )


if __name__ == "__main__":
    main()

"""Benchmark: cost of the reference environments (terminal, sql) against the echo environment, in-process.

Measured side by side in one run on the same machine (the 2 cores are shared, so only ratios mean something).
For each environment, over the same seeds: reset (world generation), a typical step (the scripted expert's
actions), and the worst step we know how to provoke (commands/queries that use the whole work budget). Medians
over seeds; ratios against the echo step.

Run: ``python bench/bench_envs.py [--seeds 20]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from sql_env.server import SqlAction, SqlEnvironment
from sql_env.server import expert_actions as sql_expert
from terminal_env.server import TerminalAction, TerminalEnvironment
from terminal_env.server import expert_actions as terminal_expert
from tqdm import tqdm

from openenv_echo.envs.echo import EchoAction, EchoEnvironment

WORST_TERMINAL = [
    "grep -r x /var/log | wc -l",
    "yes | sort",
    "cat /var/log/*/*-debug.log | grep -c q",
    "grep -r '' / | wc -l",
]
WORST_SQL = [
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "SELECT count(*) FROM order_items a, order_items b",
]


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _bench_seed(seed: int, rows: dict[str, dict[str, list[float]]]) -> None:
    echo = EchoEnvironment()
    rows["echo"]["reset"].append(_timed(lambda: echo.reset(seed=seed, max_steps=100)))
    msgs = ["hello", "world models", "learn what tools say back"]
    rows["echo"]["step"] += [_timed(lambda m=m: echo.step(EchoAction(message=m))) for m in msgs]
    term = TerminalEnvironment()
    rows["terminal"]["reset"].append(_timed(lambda: term.reset(seed=seed, incident="disk_full", max_steps=100)))
    rows["terminal"]["step"] += [
        _timed(lambda a=a: term.step(TerminalAction(**a))) for a in terminal_expert(seed, "disk_full")[:-1]
    ]
    rows["terminal"]["worst"] += [_timed(lambda c=c: term.step(TerminalAction(command=c))) for c in WORST_TERMINAL]
    sql = SqlEnvironment()
    rows["sql"]["reset"].append(_timed(lambda: sql.reset(seed=seed, max_steps=100)))
    rows["sql"]["step"] += [_timed(lambda a=a: sql.step(SqlAction(**a))) for a in sql_expert(seed)[:-1]]
    rows["sql"]["worst"] += [_timed(lambda q=q: sql.step(SqlAction(query=q))) for q in WORST_SQL]
    sql.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    rows: dict[str, dict[str, list[float]]] = {
        k: {"reset": [], "step": [], "worst": []} for k in ("echo", "terminal", "sql")
    }
    for seed in tqdm(range(args.seeds), desc="seeds"):
        _bench_seed(seed, rows)
    base = statistics.median(rows["echo"]["step"])
    print(f"\n{'env':<9} {'reset ms':>9} {'step ms':>9} {'step/echo':>10} {'worst ms':>9} {'max worst ms':>13}")
    for env, r in rows.items():
        med = {k: statistics.median(v) * 1000 if v else float("nan") for k, v in r.items()}
        worst_max = max(r["worst"]) * 1000 if r["worst"] else float("nan")
        print(
            f"{env:<9} {med['reset']:>9.2f} {med['step']:>9.3f} {med['step'] / (base * 1000):>9.0f}x "
            f"{med['worst']:>9.1f} {worst_max:>13.1f}"
        )


if __name__ == "__main__":
    main()

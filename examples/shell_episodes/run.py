"""Record episodes of the shell env's reference solutions and show their per-token role masks.

    python examples/shell_episodes/run.py                          # every shipped task (needs a Docker engine)
    python examples/shell_episodes/run.py --tasks count-word,broken-service --out out/shell-episodes

What it does:
1. serves the shell env in a child process (``LocalProcessProvider("shell")``: one container per episode);
2. per task: reset, one look around (``ls -la``, and a path that does not exist, for some stderr), the task's
   reference ``solution/solve.sh``, ``submit`` (the task's tests give the reward), recorded by ``EnvClient`` into
   ``trajectories.jsonl`` (a step journal, one episode after the other);
3. tokenizes every episode with a real chat template (the offline ChatML tokenizer, ``build_tokenizer("qwen")``)
   token-in-token-out, writes ``tokenized.jsonl``, prints the first ``--show`` episodes coloured by role and writes
   all of them to ``masks.html``; then a table of tokens per role per task.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table
from shell_env.server import solution_actions, task_suite
from tqdm import tqdm

from openenv_echo.client import EnvClient
from openenv_echo.providers import LocalProcessProvider
from openenv_echo.roles import Role
from openenv_echo.tokenization import build_tokenizer, show, tokenize_trajectory, write_jsonl
from openenv_echo.trajectory import read_trajectories

SYSTEM = "You work in a bash shell in a Linux container. Run one command per turn; answer `submit` when done."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=None, help="comma-separated task names (default: every shipped task)")
    ap.add_argument("--out", default="out/shell-episodes", help="output directory")
    ap.add_argument("--show", type=int, default=1, help="episodes to print coloured by role")
    a = ap.parse_args()

    suite = task_suite()
    tasks = [suite.by_name(n) for n in a.tasks.split(",")] if a.tasks else list(suite.tasks)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    journal = out / "trajectories.jsonl"
    journal.unlink(missing_ok=True)
    rewards: dict[str, float] = {}
    with LocalProcessProvider("shell", log_level="warning") as server, EnvClient(server.base_url, writer=journal) as c:
        for task in tqdm(tasks, desc="episodes", unit="task"):
            c.reset(task=task.name, messages=[{"role": "system", "content": SYSTEM}])
            look = "ls -la; ls /does-not-exist"
            c.step({"command": look}, action_text=look)
            for action in solution_actions(task):
                last = c.step(action, action_text=action["command"])
            rewards[task.name] = float(last.reward or 0.0)

    tokenizer = build_tokenizer("qwen")
    trajectories = read_trajectories(journal)
    tokenized = [tokenize_trajectory(t, tokenizer) for t in trajectories]
    write_jsonl(tokenized, out / "tokenized.jsonl")
    show(
        out / "tokenized.jsonl",
        out / "masks.html",
        tokenizer=tokenizer,
        limit=len(tokenized),
        console=Console(quiet=True),
    )
    show(out / "tokenized.jsonl", tokenizer=tokenizer, limit=a.show)

    table = Table(title="tokens per role (reference episodes)")
    for column in ("task", "reward", *(r.value for r in Role)):
        table.add_column(column, justify="left" if column == "task" else "right")
    for task, tt in zip(tasks, tokenized):
        counts = [str(int((tt.role_ids == r.code).sum())) for r in Role]
        table.add_row(task.name, f"{rewards[task.name]:g}", *counts)
    Console().print(table)
    print(f"wrote {journal}, {out / 'tokenized.jsonl'} and {out / 'masks.html'}")


if __name__ == "__main__":
    main()

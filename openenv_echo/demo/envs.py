"""The envs the demo runs on, as the policy sees them: a system prompt, how the policy's text becomes an action,
and the scripted expert's actions with the text the policy would have written for them.

* ``terminal`` (the default): incident triage on a simulated Linux machine; the policy writes one shell command
  line per turn, and ``submit <kind> <service>`` to answer. The demo's expert is a triage runbook of three turns
  (list the failed unit, read its status, submit), not the env's seven-turn investigation: a from-scratch model of
  the demo's size learns the runbook from SFT well enough that RL has something to improve (the README says how
  this was chosen on validation).
* ``sql``: a data question over a generated SQLite database; the policy writes one JSON object per turn,
  ``{"query": "SELECT ..."}`` or ``{"answer": "..."}``, as the env's own task text asks. The demo's expert is a
  runbook of two turns (the template's reference query with the question's parameter written in, then the value it
  returned), on the templates whose reference query the action budget holds (``SQL_KINDS``).

Each env has its own action budget (``max_action_tokens``): the expert's longest action must fit in it, or SFT
teaches actions that RL sampling cuts off (a cut JSON object is no action at all).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DemoEnv:
    """One env of the demo: everything the demo needs to know about it besides the server."""

    name: str
    system_prompt: str
    to_action: Callable[[str], dict[str, Any]]
    """The policy's decoded text -> the action sent to the server (never raises: bad text is the env's to answer)."""
    expert: Callable[[int, str | None], list[dict[str, Any]]]
    """(seed, task kind or None) -> the scripted expert's actions."""
    action_text: Callable[[dict[str, Any]], str]
    """An expert action -> the text the policy would write for it (what SFT trains on)."""
    max_env_steps: int
    """Default ``max_steps`` reset option (the expert's longest episode fits)."""
    kind_option: str
    """The reset option that forces a world's task kind (``incident`` on terminal, ``template`` on sql)."""
    max_action_tokens: int
    """Sampled tokens per action (the expert's longest action, in the demo's tokenizer, fits with room to spare)."""
    sft_steps: int
    """SFT steps of the start checkpoint (chosen on validation: the start must solve some worlds for RL to learn)."""
    direct_ce_lr: float
    """The direct-CE reference's learning rate (chosen on validation, by a rule fixed before the probes ran: the
    lowest final validation env CE of a grid; the arms' ``rl_lr`` left it far from flat)."""
    task_kinds: tuple[str, ...] = ()
    """The demo's task distribution: these kinds equally often; () for the env's own distribution."""
    n_train: int = 640
    """Training worlds (the start must see enough of them to copy values from outputs rather than learn answers)."""
    seed: int = 0
    """The start checkpoint's seed (sql: of the seeds whose start copies on the reference machine, the one with the
    highest validation success; the start rule)."""

    def reset_options(self, seed: int, kinds: tuple[str, ...]) -> dict[str, Any]:
        """Reset options of a world: with ``kinds``, the task distribution is those kinds, equally often
        (``kinds[seed % len(kinds)]``); without, the env's own distribution."""
        return {self.kind_option: kinds[seed % len(kinds)]} if kinds else {}


TRIAGE_SURVEY = "systemctl list-units --type=service --state=failed"


def triage_actions(seed: int, kind: str | None = None) -> list[dict[str, Any]]:
    """The terminal demo's expert: list the failed unit, read its ``systemctl status`` (whose journal lines name the
    cause for each of the demo's incident kinds), submit. The service and kind come from the world's own
    generator, so the runbook is always right."""
    from terminal_env.server.machine import generate_machine  # on use: the env packages sit above the library

    incident = generate_machine(seed, kind).incident
    svc = incident.service
    return [{"command": c} for c in (TRIAGE_SURVEY, f"systemctl status {svc}", f"submit {incident.kind} {svc}")]


def sql_runbook(seed: int, kind: str | None = None) -> list[dict[str, Any]]:
    """The sql demo's expert: the env's expert without its first turn, a table listing the task text already shows
    (what is left: the template's reference query with the question's parameter written in, then its value)."""
    from sql_env.server.expert import expert_actions  # on use: the env packages sit above the library

    return list(expert_actions(seed, kind))[1:]


SQL_KINDS = ("city_most_customers", "slow_shipments", "cancel_rate", "distinct_products_of_customer", "manager_of")
"""The sql demo's templates: those with one parameter, copied from the question, whose reference query is at most
90 tokens in the demo's tokenizer (the generic-text BPE spends about 2.5 characters a token on SQL). The other
seven take 94 to 199 tokens, two parameters or several joins."""


def sql_action(text: str) -> dict[str, Any]:
    """``{"query": ...}`` or ``{"answer": ...}`` from the policy's JSON; anything else becomes ``{}``, which the env
    answers with its harness format warning (a step, like any malformed agent input)."""
    try:
        obj = json.loads(text.strip())
    except (ValueError, RecursionError):
        return {}
    if not isinstance(obj, dict):
        return {}
    return {k: v for k, v in obj.items() if k in ("query", "answer") and isinstance(v, str)}


TERMINAL = DemoEnv(
    name="terminal",
    system_prompt=(
        "You are an on-call engineer at a Linux root shell. Reply with exactly one shell command line per turn and "
        "nothing else. When you know the root cause, reply: submit <kind> <service>"
    ),
    to_action=lambda text: {"command": text.strip()},
    expert=triage_actions,
    action_text=lambda a: str(a["command"]),
    max_env_steps=4,  # the runbook's three turns and one to spare
    max_action_tokens=32,
    sft_steps=400,
    kind_option="incident",
    # the four incidents whose failing service shows up as the one failed systemd unit, and whose unit status names
    # the cause (no space left, OOM kill, invalid configuration, port in use): finding the service is copying it
    # from the first command's output, finding the kind is reading the second's
    task_kinds=("disk_full", "oom_killed", "bad_config", "port_conflict"),
    # the lowest final validation env CE of sql's grid (3e-3 and 6e-3 on 3 seeds; 1e-3 stopped after one, far
    # behind); at the arms' 3e-4 direct CE had not flattened (example README, "Direct CE's learning rate")
    direct_ce_lr=6e-3,
)

SQL = DemoEnv(
    name="sql",
    system_prompt=(
        "You are a data analyst with read-only SQL access. Reply with exactly one JSON object per turn and nothing "
        'else: {"query": "<one SQLite statement>"}, or, when you know the answer, {"answer": "<the value>"}'
    ),
    to_action=sql_action,
    expert=sql_runbook,
    action_text=lambda a: json.dumps(a, ensure_ascii=False),
    max_env_steps=3,  # the runbook's two turns and one to spare
    max_action_tokens=96,
    # at 400 steps the start wrote the queries but answered from a prior, not from the query's output (2 of 64
    # validation worlds); copying the value appeared from about 900 steps (validation probe, example README)
    sft_steps=1600,
    kind_option="template",
    task_kinds=SQL_KINDS,
    # at 640 worlds no start copied the queried value on this machine's build; at 12,800, SFT seeds 3 and 4 did, and
    # seed 3 is the committed start (the start rule: the higher validation success; example README, "Start probes")
    n_train=12800,
    seed=3,
    # the lowest final validation env CE of {3e-4, 1e-3, 3e-3, 6e-3} (a rule fixed before the probes ran); at the
    # arms' 3e-4 direct CE had not flattened (example README, "the direct-CE reference")
    direct_ce_lr=6e-3,
)

DEMO_ENVS: dict[str, DemoEnv] = {e.name: e for e in (TERMINAL, SQL)}
"""``--env`` choices."""

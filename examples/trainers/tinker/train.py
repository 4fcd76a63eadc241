"""ECHO with Tinker, offline: real ``tinker.types.Datum``s from env rollouts, and the loss the service would run,
evaluated here on a local model (no API key, no network), for N steps.

    python examples/trainers/tinker/train.py --steps 2 --world-model-coeff 0.05

What it does (copy it and change the marked lines for your model and env):
1. starts the terminal env server in a child process (``LocalProcessProvider``);
2. builds a tiny random Qwen2 with the offline ChatML tokenizer: it plays the Tinker service's model (sampling and
   the forward pass that produces per-target log-probs);
3. per step, ``--groups`` worlds each run ``--group-size`` times concurrently (``run_rollouts``): one world per
   GRPO group; group-relative advantages from the env's reward (plus a small brevity term);
4. ``build_custom_datums``: one ``Datum`` per episode (``target_tokens``, ``advantages``, ``sampling_logprobs``,
   ``env_weights``), shifted to Tinker's next-token alignment;
5. ``echo_custom_loss(datums, logprobs)`` — the callable you pass to ``training_client.forward_backward_custom``
   — is evaluated on the local model's log-probs, backpropagated, one Adam step.

With a service: replace step 5 by ``training_client.forward_backward_custom(datums, echo_custom_loss)`` and
``training_client.optim_step(types.AdamParams(...))``; sample with a ``SamplingClient`` instead of the local model.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch

from openenv_echo.adapters.recipes import (
    SYSTEM_PROMPT,
    RoleGradients,
    command_action,
    format_metrics,
    load_model,
    terminal_worlds,
)
from openenv_echo.adapters.rollouts import HFSampler, group_reset_options, run_rollouts
from openenv_echo.adapters.tinker import build_custom_datums, echo_custom_loss
from openenv_echo.objective import EchoConfig, group_advantages
from openenv_echo.providers import LocalProcessProvider
from openenv_echo.roles import Role

METRICS = ("loss", "custom/policy_loss:sum", "custom/world_loss:sum", "reward", "datums")


def target_logprobs(model: Any, datum: Any) -> torch.Tensor:
    """What the service's forward computes: log p(target_tokens[i] | model_input[:i+1]) for every position."""
    ids = torch.tensor([datum.model_input.to_ints()])
    targets = datum.loss_fn_inputs["target_tokens"].to_torch().long()
    logits = model(input_ids=ids).logits[0].float()
    return torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--world-model-coeff", type=float, default=0.05)
    ap.add_argument("--model", default=None, help="from_pretrained path (default: a tiny random Qwen2, offline)")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=12)
    ap.add_argument("--max-completion-length", type=int, default=384)
    ap.add_argument("--learning-rate", type=float, default=1e-3)
    ap.add_argument("--probe", action="store_true", help="print the gradient reaching each role's predictions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    model, tokenizer = load_model(a.model, seed=a.seed)  # <- your model (the service's, here local)
    optim = torch.optim.Adam(model.parameters(), lr=a.learning_rate)
    sampler = HFSampler(model, tokenizer, temperature=1.0)
    cfg = EchoConfig(world_model_coeff=a.world_model_coeff)
    probe = RoleGradients()
    rows = []
    with LocalProcessProvider("terminal", max_sessions=64, idle_timeout_s=None, log_level="warning") as env:  # <- env
        for step in range(1, a.steps + 1):
            worlds = terminal_worlds(a.groups, max_steps=a.max_turns, first_seed=a.seed + (step - 1) * a.groups)
            rollouts = run_rollouts(
                env.base_url,
                tokenizer,
                sampler,
                group_reset_options(worlds, a.group_size),
                [[{"role": "system", "content": SYSTEM_PROMPT}]] * (a.groups * a.group_size),
                to_action=command_action,
                max_turns=a.max_turns,
                max_completion_length=a.max_completion_length,
                max_new_tokens=a.max_new_tokens,
            )
            rewards = torch.tensor([r.reward - len(r.completion_ids) / 1000 for r in rollouts], dtype=torch.float64)
            adv = group_advantages(rewards, a.group_size).tolist()
            ids = [r.prompt_ids + r.completion_ids for r in rollouts]
            roles = [[Role.CONTEXT.code] * len(r.prompt_ids) + r.role_ids for r in rollouts]
            sampled = [[0.0] * len(r.prompt_ids) + r.logprobs for r in rollouts]
            datums = build_custom_datums(ids, roles, adv, sampled, cfg, step=step - 1)
            logprobs = [target_logprobs(model, d) for d in datums]
            for lp, role_row in zip(logprobs, roles):
                probe.watch(lp, torch.tensor(role_row[1:]))  # targets are ids[1:]
            loss, metrics = echo_custom_loss(datums, logprobs)
            optim.zero_grad()
            loss.backward()
            optim.step()
            row: dict[str, Any] = {"loss": float(loss.detach()), **metrics, "reward": float(rewards.mean())}
            row["datums"] = len(datums)
            line = format_metrics(step, row, METRICS)
            if a.probe:
                row["grad"] = probe.take()
                line += " | grad→ " + " ".join(f"{k}={v:.3g}" for k, v in sorted(row["grad"].items()))
            probe.take()
            print(line, flush=True)
            rows.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"world_model_coeff": a.world_model_coeff, "steps": rows}, f, indent=1)


if __name__ == "__main__":
    main()

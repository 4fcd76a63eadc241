"""ECHO with Tinker, offline: real ``tinker.types.Datum``s from env rollouts, and the loss the service would run,
evaluated here on a local model (no API key, no network), for N steps.

    python examples/trainers/tinker/train.py --steps 2 --world-model-coeff 0.05

What it does (copy it and change the marked lines for your model and env):
1. starts the terminal env server in a child process (``LocalProcessProvider``);
2. builds a tiny random Qwen2 with the offline ChatML tokenizer: it plays the Tinker service's model (sampling and
   the forward pass that produces per-target log-probs);
3. per step, ``--groups`` worlds each run ``--group-size`` times concurrently (``step_rollouts``, over
   ``run_rollouts``): one world per GRPO group; group-relative advantages from the env's reward (plus a small
   brevity term);
4. ``build_custom_datums``: one ``Datum`` per episode (``target_tokens``, ``advantages``, ``sampling_logprobs``,
   ``env_weights``), shifted to Tinker's next-token alignment;
5. ``echo_custom_loss(datums, logprobs)`` — the callable you pass to ``training_client.forward_backward_custom``
   — is evaluated on the local model's log-probs, backpropagated, one Adam step.

With a service: replace step 5 by ``training_client.forward_backward_custom(datums, echo_custom_loss)`` and
``training_client.optim_step(types.AdamParams(...))``; sample with a ``SamplingClient`` instead of the local model.
"""

from __future__ import annotations

from typing import Any

import torch

from openenv_echo.adapters.recipes import (
    RoleGradients,
    format_metrics,
    load_model,
    recipe_parser,
    shaped_rewards,
    step_rollouts,
    write_metrics,
)
from openenv_echo.adapters.rollouts import HFSampler
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
    a = recipe_parser(__doc__).parse_args()

    model, tokenizer = load_model(a.model, seed=a.seed)  # <- your model (the service's, here local)
    optim = torch.optim.Adam(model.parameters(), lr=a.learning_rate)
    sampler = HFSampler(model, tokenizer, temperature=1.0)
    cfg = EchoConfig(world_model_coeff=a.world_model_coeff)
    probe = RoleGradients()
    rows = []
    with LocalProcessProvider("terminal", max_sessions=64, idle_timeout_s=None, log_level="warning") as env:  # <- env
        for step in range(1, a.steps + 1):
            rollouts = step_rollouts(env.base_url, tokenizer, sampler, a, step)
            rewards = shaped_rewards([r.reward for r in rollouts], [len(r.completion_ids) for r in rollouts])
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
    write_metrics(a.json, a.world_model_coeff, rows)


if __name__ == "__main__":
    main()

"""ECHO with torchrl's ``GRPOLoss``, end to end on CPU: an env server, a model, multi-turn rollouts, N steps.

    python examples/trainers/torchrl/train.py --steps 2 --world-model-coeff 0.05
    python examples/trainers/torchrl/train.py --env shell --steps 1   # real bash in containers (needs Docker)

What it does (copy it and change the marked lines for your model and env):
1. starts the env server (``--env``: the terminal env, or the shell env on Harbor tasks) in a child process
   (``LocalProcessProvider``);
2. builds a tiny random Qwen2 with the offline ChatML tokenizer (``--model`` takes a ``from_pretrained`` path);
3. per step, ``--groups`` worlds (reset options: seed, step cap), each run ``--group-size`` times concurrently
   (``step_rollouts``, over ``run_rollouts``: one session per episode, sampling batched): a GRPO group shares
   one world;
4. group-relative advantages from the env's reward (plus a small brevity shaping term);
5. ``rollout_batch`` turns the episodes into torchrl ``ChatHistory`` data with role ids refined to the env's
   segments; the sampling policy's log-probs are filled in so the PPO ratio starts at 1;
6. ``EchoGRPOLoss`` (``GRPOLoss`` + ``world_model_coeff * CE(env_output tokens)``, masking strategy ``rlhf``);
   the ``loss_*`` fields are summed, backpropagated, one Adam step; per-step metrics are printed.
"""

from __future__ import annotations

from typing import Any

import tensordict
import torch
from torchrl.modules.llm import TransformersWrapper

from openenv_echo.adapters.rollouts import HFSampler
from openenv_echo.adapters.torchrl import ROLE_IDS_KEY, EchoGRPOLoss, rollout_batch
from openenv_echo.objective import EchoConfig, group_advantages
from openenv_echo.providers import LocalProcessProvider
from openenv_echo.testing.recipes import (
    RECIPE_ENVS,
    RoleGradients,
    format_metrics,
    load_model,
    recipe_parser,
    shaped_rewards,
    step_rollouts,
    write_metrics,
)

METRICS = ("loss", "loss_objective", "loss_world_model", "world_model_ce", "world_model_tokens", "reward")


class ProbedLoss(EchoGRPOLoss):
    """``EchoGRPOLoss`` that records where the loss's gradient goes (per role of the scored token)."""

    probe = RoleGradients()
    probe_roles: torch.Tensor | None = None

    def _get_cur_log_prob(self, td: Any) -> Any:
        log_prob, dist, composite = super()._get_cur_log_prob(td)
        if self.probe_roles is not None:
            logits = dist.logits
            # |dL/dlogits| summed over the vocabulary = the gradient reaching each position's prediction
            self.probe.watch(logits, self.probe_roles.unsqueeze(-1).expand_as(logits))
        return log_prob, dist, composite


def set_sampling_log_probs(loss_fn: EchoGRPOLoss, batch: Any) -> None:
    """Store the current policy's per-token log-probs (no grad) under ``("log_probs", "full")``: the "old"
    log-probs of an on-policy step, so the ratio starts at 1."""
    with torch.no_grad():
        dist = loss_fn.actor_network._get_rlhf_dist(batch.copy())
        tokens = batch.get(("tokens", "full"), as_padded_tensor=True, padding_side="left", padding_value=0)
        lp = torch.log_softmax(dist.logits.float(), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    for i, row in enumerate(batch.tensordicts):
        n = row.get(("tokens", "full")).shape[-1]
        row.set(("log_probs", "full"), lp[i, lp.shape[1] - n :].clone())


def main() -> None:
    ap = recipe_parser(__doc__)
    ap.add_argument("--env", choices=sorted(RECIPE_ENVS), default="terminal", help="env server to train on")
    a = ap.parse_args()

    tensordict.set_list_to_stack(True).set()
    model, tokenizer = load_model(a.model, seed=a.seed)  # <- your model
    wrapper = TransformersWrapper(model, tokenizer=tokenizer, generate=False, pad_output=True, input_mode="history")
    loss_cls = ProbedLoss if a.probe else EchoGRPOLoss
    loss_fn = loss_cls(wrapper, masking_strategy="rlhf", echo_config=EchoConfig(world_model_coeff=a.world_model_coeff))
    optim = torch.optim.Adam(model.parameters(), lr=a.learning_rate)
    sampler = HFSampler(model, tokenizer, temperature=1.0)
    rows = []
    sessions = a.groups * a.group_size
    with LocalProcessProvider(a.env, max_sessions=max(sessions, 8), idle_timeout_s=None, log_level="warning") as env:
        for step in range(1, a.steps + 1):
            rollouts = step_rollouts(env.base_url, tokenizer, sampler, a, step, env=a.env)
            rewards = shaped_rewards([r.reward for r in rollouts], [len(r.completion_ids) for r in rollouts])
            adv = group_advantages(rewards, a.group_size).float().tolist()
            batch = rollout_batch(rollouts, tokenizer, adv)
            set_sampling_log_probs(loss_fn, batch)
            if isinstance(loss_fn, ProbedLoss):
                loss_fn.probe_roles = batch.get(
                    ROLE_IDS_KEY, as_padded_tensor=True, padding_side="left", padding_value=-1
                )
            loss_fn.echo_step = step - 1
            out = loss_fn(batch)
            loss = sum(v for k, v in out.items() if isinstance(k, str) and k.startswith("loss_") and v is not None)
            optim.zero_grad()
            loss.backward()
            optim.step()
            row: dict[str, Any] = {"loss": float(loss), "reward": float(rewards.mean())}
            for k in METRICS[1:-1]:
                v = getattr(out, k, None)
                row[k] = float(v) if v is not None else None
            if isinstance(loss_fn, ProbedLoss):
                row["grad"] = loss_fn.probe.take()
            print(format_metrics(step, row, METRICS), flush=True)
            rows.append(row)
    write_metrics(a.json, a.world_model_coeff, rows)


if __name__ == "__main__":
    main()

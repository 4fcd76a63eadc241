"""ECHO with SkyRL 0.4 on a CPU: SkyRL's registry, config, batch preparation and policy-worker step, for N steps.

    python examples/trainers/skyrl/train.py --steps 2 --world-model-coeff 0.05     # in .venv-trainers (Python 3.12)

What runs, and whose it is:
1. the terminal env server in a child process, exposed as a skyrl-gym text env (``openenv_echo.adapters.skyrl.gym``:
   observation messages keep their role segments);
2. ``register_echo_policy_loss("regular")``: ``echo_regular`` in SkyRL's ``PolicyLossRegistry``, selected by SkyRL's
   ``TrainerConfig().algorithm.policy_loss_type`` like any built-in loss;
3. episodes: SkyRL's agent loop (``skyrl_gym.make`` → ``init`` → ``step``), played by ``run_episodes`` because
   SkyRL's generator needs vLLM inference engines; a tiny local model samples, the project's TITO builder keeps
   the sampled ids and the per-token roles;
4. the ``TrainingInputBatch``: SkyRL's ``convert_prompts_responses_to_batch_tensors``, its GRPO advantage
   estimator, its loss-reduction folding, old log-probs from SkyRL's worker ``forward``; plus the ECHO world weights;
5. one step of SkyRL's ``PolicyWorkerBase`` (``forward_backward`` over micro-batches, the registered loss,
   ``optim_step``) with three CPU stand-ins: model wrapper, strategy, device (``openenv_echo.testing.skyrl_cpu``).
"""

from __future__ import annotations

from typing import Any

import torch
from skyrl.train.config import TrainerConfig

from openenv_echo.adapters.rollouts import HFSampler
from openenv_echo.adapters.skyrl.gym import register_env, run_episodes
from openenv_echo.adapters.skyrl.loss import register_echo_policy_loss, world_weights
from openenv_echo.objective import EchoConfig
from openenv_echo.providers import LocalProcessProvider
from openenv_echo.roles import PAD_ROLE_CODE, Role
from openenv_echo.testing.recipes import (
    SYSTEM_PROMPT,
    RoleGradients,
    format_metrics,
    load_model,
    recipe_parser,
    shaped_rewards,
    terminal_worlds,
    write_metrics,
)
from openenv_echo.testing.skyrl_cpu import CPUPolicyWorker, training_batch

METRICS = ("final_loss", "rl_loss", "world_loss", "grad_norm", "reward", "policy_entropy")


def trainer_config(a: Any, loss_type: str) -> TrainerConfig:
    """SkyRL's own config objects: GRPO advantages, token-mean reduction, no KL (no reference model here)."""
    cfg = TrainerConfig()
    cfg.algorithm.policy_loss_type = loss_type
    cfg.algorithm.temperature = 1.0
    cfg.algorithm.use_kl_loss = False
    cfg.algorithm.loss_reduction = "token_mean"
    cfg.micro_train_batch_size_per_gpu = a.micro_batch_size
    cfg.policy.optimizer_config.lr = a.learning_rate
    cfg.policy.optimizer_config.weight_decay = 0.0
    return cfg


def main() -> None:
    ap = recipe_parser(__doc__)
    ap.add_argument("--base-loss", default="regular", help="SkyRL policy loss that ECHO extends")
    ap.add_argument("--micro-batch-size", type=int, default=4, help="SkyRL's micro_train_batch_size_per_gpu")
    a = ap.parse_args()

    model, tokenizer = load_model(a.model, seed=a.seed)  # <- your model
    loss_type = register_echo_policy_loss(a.base_loss)  # the one line a SkyRL user adds
    worker = CPUPolicyWorker(trainer_config(a, loss_type), model, num_training_steps=a.steps)
    sampler = HFSampler(model, tokenizer, temperature=1.0)
    cfg = EchoConfig(world_model_coeff=a.world_model_coeff)
    env_id = register_env()
    probe = RoleGradients()
    rows = []
    with LocalProcessProvider("terminal", max_sessions=64, idle_timeout_s=None, log_level="warning") as env:  # <- env
        env_config = {"base_url": env.base_url, "action_field": "command"}
        for step in range(1, a.steps + 1):
            worlds = terminal_worlds(a.groups, max_steps=a.max_turns, first_seed=a.seed + (step - 1) * a.groups)
            extras = [{"reset_options": w, "max_turns": a.max_turns} for w in worlds for _ in range(a.group_size)]
            rollouts = run_episodes(
                env_config,
                extras,
                [{"role": "system", "content": SYSTEM_PROMPT}],
                tokenizer,
                sampler,
                max_new_tokens=a.max_new_tokens,
                max_completion_length=a.max_completion_length,
                env_id=env_id,
            )
            responses = [r.completion_ids for r in rollouts]
            rewards = shaped_rewards([r.reward for r in rollouts], [len(x) for x in responses])
            width = max(len(x) for x in responses)
            batch = training_batch(
                worker,
                [r.prompt_ids for r in rollouts],
                responses,
                rewards.tolist(),
                [[1 if x == Role.ACTION.code else 0 for x in r.role_ids] for r in rollouts],
                [r.logprobs for r in rollouts],
                [f"{step}-{i // a.group_size}" for i in range(len(rollouts))],
                pad_token_id=int(tokenizer.pad_token_id),
                world_weight=world_weights(
                    [r.role_ids for r in rollouts],
                    cfg,
                    width=width,
                    step=step - 1,
                    obs_count=[r.obs_count for r in rollouts],
                ),
            )
            roles = torch.full((len(rollouts), width), PAD_ROLE_CODE, dtype=torch.long)  # right-aligned, like SkyRL
            for i, r in enumerate(rollouts):
                roles[i, width - len(r.role_ids) :] = torch.tensor(r.role_ids)
            cursor = [0]

            def watch(lp: torch.Tensor, roles: torch.Tensor = roles, cursor: list[int] = cursor) -> None:
                probe.watch(lp, roles[cursor[0] : cursor[0] + lp.shape[0]])  # micro-batches come in row order
                cursor[0] += lp.shape[0]

            worker.model.on_action_log_probs = watch
            metrics = worker.train_step(batch)
            worker.model.on_action_log_probs = None
            row: dict[str, Any] = {
                "final_loss": metrics["final_loss"],
                "policy_loss": metrics["policy_loss"],  # SkyRL's name for what the registered loss returned
                "world_loss": metrics.get("loss_metrics/echo/world_loss", 0.0),
                "rl_loss": metrics["policy_loss"] - metrics.get("loss_metrics/echo/world_loss", 0.0),
                "grad_norm": metrics["grad_norm"],
                "reward": float(rewards.mean()),
                "policy_entropy": metrics["policy_entropy"],
                "loss_type": loss_type,
            }
            grad = probe.take()
            if a.probe:
                row["grad"] = grad
            print(format_metrics(step, row, METRICS), flush=True)
            rows.append(row)
    write_metrics(a.json, a.world_model_coeff, rows)


if __name__ == "__main__":
    main()

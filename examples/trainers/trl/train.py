"""ECHO with TRL's ``GRPOTrainer``, end to end on CPU: an env server, a model, multi-turn rollouts, N steps.

    python examples/trainers/trl/train.py --steps 2 --world-model-coeff 0.05

What it does (copy it and change the marked lines for your model and env):
1. starts the terminal env server in a child process (``LocalProcessProvider``);
2. builds a tiny random Qwen2 with the offline ChatML tokenizer (``--model`` takes a ``from_pretrained`` path);
3. one dataset row per world: a prompt plus the env's reset options (``env_reset``: seed, step cap). TRL repeats
   each row ``num_generations`` times, so every completion of a GRPO group runs the same world;
4. ``env_rollout_func`` runs the group's episodes concurrently against the server (batched sampling with the model
   being trained), splits each at the first action, keeps per-token roles and respects ``max_completion_length``;
5. ``EchoGRPOTrainer`` adds ``world_model_coeff * CE(env_output tokens)`` to TRL's GRPO loss;
6. prints per-step metrics, and (``--probe``) the gradient that reaches each role's predictions.
"""

from __future__ import annotations

import json
import os
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig

from openenv_echo.adapters.trl import RESET_KEY, ROLE_KEY, EchoGRPOTrainer, env_rollout_func
from openenv_echo.objective import EchoConfig
from openenv_echo.providers import LocalProcessProvider
from openenv_echo.testing.recipes import (
    BREVITY_PER_TOKEN,
    SYSTEM_PROMPT,
    RoleGradients,
    command_action,
    format_metrics,
    load_model,
    recipe_parser,
    terminal_worlds,
    write_metrics,
)

METRICS = (
    "loss",
    "reward",
    "echo/policy_loss",
    "echo/world_loss",
    "echo/env_ce_per_token",
    "echo/tokens/selected",
    "completions/clipped_ratio",
)


def env_reward(completions: list[Any], env_reward: list[float], **_: Any) -> list[float]:
    """The environment's own reward (summed over the episode), passed through by the rollout function."""
    return list(env_reward)


def brevity(completion_ids: list[list[int]], **_: Any) -> list[float]:
    """A small shaping reward so a random model's groups have non-zero advantages: shorter episodes score higher."""
    return [-BREVITY_PER_TOKEN * len(c) for c in completion_ids]


class ProbedTrainer(EchoGRPOTrainer):
    """``EchoGRPOTrainer`` that records where the loss's gradient goes (per role of the predicted token)."""

    probe = RoleGradients()

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        self._probe_roles = inputs[ROLE_KEY]
        return super()._compute_loss(model, inputs)

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if out[0].requires_grad:
            self.probe.watch(out[0], self._probe_roles)
        return out


class PrintMetrics(TrainerCallback):
    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.rows: list[dict[str, Any]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
        if not logs or "loss" not in logs:
            return
        row = {k: logs[k] for k in METRICS if k in logs}
        if isinstance(self.trainer, ProbedTrainer):
            row["grad"] = self.trainer.probe.take()
        self.rows.append(row)
        print(format_metrics(state.global_step, row, METRICS), flush=True)


def main() -> None:
    ap = recipe_parser(__doc__)
    ap.add_argument("--mask-truncated-completions", action="store_true")
    ap.add_argument("--output-dir", default=None)
    a = ap.parse_args()

    model, tokenizer = load_model(a.model, seed=a.seed)  # <- your model
    worlds = terminal_worlds(a.steps * a.groups, max_steps=a.max_turns, first_seed=a.seed)  # <- your env's worlds
    rows = [{"prompt": [{"role": "system", "content": SYSTEM_PROMPT}], RESET_KEY: json.dumps(w)} for w in worlds]
    args = GRPOConfig(
        output_dir=a.output_dir or os.path.join(os.getcwd(), ".cache", "trl_recipe"),
        per_device_train_batch_size=a.groups * a.group_size,
        num_generations=a.group_size,
        max_completion_length=a.max_completion_length,
        mask_truncated_completions=a.mask_truncated_completions,
        max_steps=a.steps,
        learning_rate=a.learning_rate,
        temperature=1.0,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=a.seed,
    )
    with LocalProcessProvider("terminal", max_sessions=64, idle_timeout_s=None, log_level="warning") as env:  # <- env
        trainer_cls = ProbedTrainer if a.probe else EchoGRPOTrainer
        trainer = trainer_cls(
            model=model,
            reward_funcs=[env_reward, brevity],
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            rollout_func=env_rollout_func(
                env.base_url, to_action=command_action, max_turns=a.max_turns, max_new_tokens=a.max_new_tokens
            ),
            echo_config=EchoConfig(world_model_coeff=a.world_model_coeff),
        )
        printer = PrintMetrics(trainer)
        trainer.add_callback(printer)
        trainer.train()
    write_metrics(a.json, a.world_model_coeff, printer.rows)


if __name__ == "__main__":
    main()

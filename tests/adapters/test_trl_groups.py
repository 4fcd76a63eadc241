"""One world per GRPO group inside TRL's own loop: dataset rows carry the env's reset options (``env_reset``), TRL
repeats each row ``num_generations`` times, and ``env_rollout_func`` runs every completion of a group in that world."""

from __future__ import annotations

import json
from typing import Any

import pytest
from datasets import Dataset
from trl import GRPOConfig

from openenv_echo.adapters.trl import RESET_KEY, EchoGRPOTrainer, env_rollout_func
from openenv_echo.objective import EchoConfig
from openenv_echo.testing.recipes import SYSTEM_PROMPT, command_action, terminal_worlds, tiny_causal_lm


@pytest.mark.trainer
def test_trl_group_members_share_a_world(tmp_path: Any, qwen_tokenizer: Any) -> None:
    from openenv_echo.providers import LocalProcessProvider

    seen: list[list[str]] = []

    def world_reward(completions: list[Any], env_world: list[str], env_reward: list[float], **_: Any) -> list[float]:
        seen.append(list(env_world))
        return [float(r) - i / 100 for i, r in enumerate(env_reward)]

    rows = [
        {"prompt": [{"role": "system", "content": SYSTEM_PROMPT}], RESET_KEY: json.dumps(w)}
        for w in terminal_worlds(4, 1)
    ]
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=64,
        max_steps=2,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        seed=0,
    )
    with LocalProcessProvider("terminal", max_sessions=16, idle_timeout_s=None, log_level="warning") as env:
        trainer = EchoGRPOTrainer(
            model=tiny_causal_lm(qwen_tokenizer),
            reward_funcs=[world_reward],
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=qwen_tokenizer,
            rollout_func=env_rollout_func(env.base_url, to_action=command_action, max_turns=1, max_new_tokens=6),
            echo_config=EchoConfig(world_model_coeff=0.05),
        )
        trainer.train()
    assert len(seen) == 2
    worlds = [w for batch in seen for w in batch]
    groups = [worlds[i : i + 2] for i in range(0, len(worlds), 2)]
    assert all(g[0] == g[1] for g in groups)  # both completions of a group ran the same machine
    assert len({g[0] for g in groups}) == 4  # four dataset rows, four different worlds

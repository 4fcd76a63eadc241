"""End to end, OpenEnv style: TRL's ``rollout_func`` drives the echo environment over a real loopback server,
samples actions from the model being trained, tokenizes token-in-token-out, and ``EchoGRPOTrainer`` trains on
the observation bodies the server tagged (``self.tools`` is empty on this path)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig

from openenv_echo.adapters.trl import EchoGRPOTrainer, rollout_output, split_at_first_action
from openenv_echo.objective import EchoConfig
from openenv_echo.testing.recipes import tiny_causal_lm
from openenv_echo.tokenization import TitoBuilder


class ServerRollouts:
    """rollout_func: one HTTP/WebSocket episode per completion, actions sampled from ``trainer.model``."""

    def __init__(self, base_url: str, tokenizer: Any, turns: int = 2) -> None:
        from openenv_echo.client import EnvClient

        self.client = EnvClient(base_url)
        self.tokenizer = tokenizer
        self.turns = turns
        self.seen_segments: list[Any] = []

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        pids, cids, roles, rewards = [], [], [], []
        model = trainer.model
        for prompt in prompts:
            reset = self.client.reset(messages=prompt)
            builder = TitoBuilder(self.tokenizer, observation_role="tool")
            builder.start(prompt, reset)
            reward = 0.0
            for _ in range(self.turns):
                prompt_ids = torch.tensor([builder.ids])
                with torch.no_grad():
                    out = model.generate(prompt_ids, max_new_tokens=6, do_sample=True, pad_token_id=0)
                sampled = out[0, prompt_ids.shape[1] :].tolist()
                text = self.tokenizer.decode(sampled, skip_special_tokens=True) or "hi"
                builder.add_action(ids=sampled)
                result = self.client.step({"message": text}, action_text=text, action_token_ids=sampled)
                self.seen_segments.extend(result.segments)
                reward += float(result.reward or 0.0)
                builder.add_observation(result)
                if result.done:
                    break
            builder.add_action(text="bye")
            tt = builder.finish()
            p, c, r = split_at_first_action(tt.input_ids.tolist(), tt.role_ids.tolist())
            pids.append(p)
            cids.append(c)
            roles.append(r)
            rewards.append(reward)
        return rollout_output(pids, cids, roles, env_reward=rewards)


@pytest.mark.trainer
def test_openenv_rollout_func_over_http_trains_env_bodies(
    tmp_path: Any, running_server: Any, qwen_tokenizer: Any
) -> None:
    rollouts = ServerRollouts(running_server("echo"), qwen_tokenizer)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=128,
        max_steps=2,
        learning_rate=1e-3,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        bf16=False,
        seed=0,
    )
    trainer = EchoGRPOTrainer(
        model=tiny_causal_lm(qwen_tokenizer),
        reward_funcs=[lambda completions, env_reward, **_: list(env_reward)],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": "Talk to the echo server."}]}] * 8),
        processing_class=qwen_tokenizer,
        rollout_func=rollouts,
        echo_config=EchoConfig(world_model_coeff=0.1),
    )
    assert not trainer.tools  # the OpenEnv path: no TRL tools, ECHO must still be on
    trainer.train()
    rollouts.client.close()
    logs = [h for h in trainer.state.log_history if "echo/tokens/env_output" in h]
    assert len(logs) == 2
    assert all(h["echo/tokens/env_output"] > 0 and h["echo/tokens/warning"] > 0 for h in logs)  # server-tagged roles
    assert all(h["echo/tokens/selected"] == h["echo/tokens/env_output"] for h in logs)  # env_only: no warnings
    assert all(h["echo/world_loss"] > 0 for h in logs)
    assert {s.role.value for s in rollouts.seen_segments} >= {"warning", "env_output"}

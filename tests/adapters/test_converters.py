"""Converters from env rollouts to what trainers consume, each fed to the real library object where it imports
on CPU: TRL's ``GRPOTrainer`` (through ``EchoGRPOTrainer``), Tinker ``Datum``s, SkyRL's generator-output
conventions, prime-rl-style loss weights and a Hugging Face ``datasets.Dataset``."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import torch

from openenv_echo.adapters.converters import (
    HF_SCHEMA,
    rollout_from_tokenized,
    to_hf_dataset,
    to_loss_weights,
    to_skyrl,
    to_tinker_datums,
    to_trl,
)
from openenv_echo.adapters.rollouts import Rollout
from openenv_echo.envs.echo.environment import EchoEnvironment
from openenv_echo.envs.echo.models import EchoAction
from openenv_echo.objective import EchoConfig
from openenv_echo.roles import Role
from openenv_echo.tokenization import TitoBuilder

A, C, E, W = Role.ACTION.code, Role.CONTEXT.code, Role.ENV_OUTPUT.code, Role.WARNING.code
CFG = EchoConfig(world_model_coeff=0.05)


def _rollouts(tok: Any, n: int = 4, seed: int = 0) -> list[Rollout]:
    """Real echo-env episodes, tokenized token-in-token-out, as Rollouts (end rule applied)."""
    rng = random.Random(seed)
    eos = [tok.convert_tokens_to_ids("<|im_end|>")]
    out = []
    for i in range(n):
        env = EchoEnvironment()
        b = TitoBuilder(tok, observation_role="tool")
        b.start([{"role": "user", "content": "Talk to the echo server."}], env.reset(seed=0))
        reward = 0.0
        for _ in range(rng.randint(1, 3)):
            msg = rng.choice(["ls", "hello world", "cat notes.txt"])
            b.add_action(text=msg)
            obs = env.step(EchoAction(message=msg))
            reward += float(obs.reward or 0.0)
            b.add_observation(obs)
        tt = b.finish()
        lps = [-0.5 if r == A else 0.0 for r in tt.role_ids.tolist()]
        out.append(rollout_from_tokenized(tt, eos_ids=eos, reward=reward + i, logprobs=lps, reset_options={"seed": 0}))
    return out


@pytest.fixture
def rollouts(qwen_tokenizer: Any) -> list[Rollout]:
    return _rollouts(qwen_tokenizer)


def test_rollout_from_tokenized_applies_the_end_rule(rollouts: list[Rollout], qwen_tokenizer: Any) -> None:
    eos = qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")
    for r in rollouts:
        assert r.role_ids[0] == A and r.completion_ids[-1] == eos and not r.truncated  # ended on an observation
        assert r.role_ids[-1] == C and E in r.role_ids
        assert all((lp == -0.5) == (x == A) for lp, x in zip(r.logprobs, r.role_ids, strict=True))


def test_to_loss_weights_align_with_the_roles(rollouts: list[Rollout]) -> None:
    for r, w in zip(rollouts, to_loss_weights(rollouts, CFG), strict=True):
        roles = [C] * len(r.prompt_ids) + r.role_ids
        assert len(w["rl"]) == len(w["ce"]) == len(roles)
        assert all((x == 1.0) == (role == A) for x, role in zip(w["rl"], roles, strict=True))
        assert all(
            (x == 0.05) == (role == E) for x, role in zip(w["ce"], roles, strict=True)
        )  # env_only target, λ = 0.05
    assert all(v == 0.0 for w in to_loss_weights(rollouts, EchoConfig(world_model_coeff=0.0)) for v in w["ce"])


def test_to_tinker_datums_are_real_datums_on_shifted_targets(rollouts: list[Rollout]) -> None:
    from tinker import types

    from openenv_echo.adapters.tinker import echo_custom_loss

    datums = to_tinker_datums(rollouts, [1.0, -1.0, 0.5, -0.5], CFG)
    assert len(datums) == len(rollouts) and all(isinstance(d, types.Datum) for d in datums)
    logprobs = []
    for r, d in zip(rollouts, datums, strict=True):
        ids = r.prompt_ids + r.completion_ids
        roles = [C] * len(r.prompt_ids) + r.role_ids
        assert d.model_input.to_ints() == ids[:-1]
        assert d.loss_fn_inputs["target_tokens"].to_torch().tolist() == ids[1:]
        env_w = d.loss_fn_inputs["env_weights"].to_torch()
        assert ((env_w > 0).tolist()) == [x == E for x in roles[1:]]
        adv = d.loss_fn_inputs["advantages"].to_torch()
        assert ((adv != 0).tolist()) == [x == A for x in roles[1:]]
        logprobs.append(torch.full((len(ids) - 1,), -1.0, requires_grad=True))
    loss, _ = echo_custom_loss(datums, logprobs)
    loss.backward()
    for r, lp in zip(rollouts, logprobs, strict=True):  # the world term's gradient is -λ/N on every env_output target
        roles = [C] * len(r.prompt_ids) + r.role_ids
        g = lp.grad.tolist()
        assert all(gi == 0.0 for gi, x in zip(g, roles[1:], strict=True) if x in (C, W))


def test_to_skyrl_generator_output(rollouts: list[Rollout]) -> None:
    # the world weights SkyRL's trainer makes from this output: tests/trainers312/test_skyrl_world_weights.py
    from openenv_echo.adapters.skyrl import ROLE_KEY

    out = to_skyrl(rollouts)
    assert out["response_ids"] == [r.completion_ids for r in rollouts]
    assert out[ROLE_KEY] == [r.role_ids for r in rollouts] and E in out[ROLE_KEY][0]
    for r, lm in zip(rollouts, out["loss_masks"], strict=True):  # SkyRL's policy term: action tokens only
        assert lm == [int(x == A) for x in r.role_ids]
    assert out["rollout_logprobs"] == [r.logprobs for r in rollouts]


def test_to_hf_dataset_schema_and_round_trip(rollouts: list[Rollout], tmp_path: Any) -> None:
    import datasets

    ds = to_hf_dataset(rollouts)
    assert isinstance(ds, datasets.Dataset) and list(ds.features) == list(HF_SCHEMA)
    assert ds.features["role_ids"].feature.dtype == "int8"
    row = ds[1]
    assert row["completion_ids"] == rollouts[1].completion_ids and row["role_ids"] == rollouts[1].role_ids
    assert json.loads(row["reset_options"]) == {"seed": 0}
    ds.to_parquet(str(tmp_path / "r.parquet"))
    back = datasets.Dataset.from_parquet(str(tmp_path / "r.parquet"))
    assert back.to_list() == ds.to_list()


def test_to_trl_keys_and_masks(rollouts: list[Rollout]) -> None:
    out = to_trl(rollouts)
    assert out["env_mask"] == [[int(x == A) for x in r.role_ids] for r in rollouts]
    assert out["echo_role_ids"] == [r.role_ids for r in rollouts]
    assert out["logprobs"] == [r.logprobs for r in rollouts]


@pytest.mark.trainer
def test_to_trl_output_trains_in_the_real_grpo_trainer(
    rollouts: list[Rollout], tmp_path: Any, qwen_tokenizer: Any
) -> None:
    from datasets import Dataset
    from trl import GRPOConfig

    from openenv_echo.adapters.trl import EchoGRPOTrainer
    from openenv_echo.testing.recipes import tiny_causal_lm

    trainer = EchoGRPOTrainer(
        model=tiny_causal_lm(qwen_tokenizer),
        reward_funcs=[lambda completions, env_reward, **_: list(env_reward)],
        args=GRPOConfig(
            output_dir=str(tmp_path),
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=256,
            max_steps=1,
            use_cpu=True,
            bf16=False,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            mask_truncated_completions=True,
        ),
        train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}]}] * 4),
        processing_class=qwen_tokenizer,
        rollout_func=lambda prompts, trainer: to_trl(rollouts),
        echo_config=CFG,
    )
    trainer.train()
    logged = trainer.state.log_history[0]
    # every completion ends on an EOS: truncation masking keeps them all, and the env term sees every env token
    assert logged["completions/clipped_ratio"] == 0
    assert logged["echo/tokens/selected"] == sum(x == E for r in rollouts for x in r.role_ids)

"""SkyRL's own generator (``SkyRLGymGenerator.generate`` and its agent loop) playing the terminal env through
skyrl-gym, with the per-token roles carried out in its ``GeneratorOutput`` (``EchoGymGenerator``). The inference
engine is a CPU stand-in (a tiny model behind the client's ``generate`` call): SkyRL's engines are vLLM, CUDA only."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from openenv_echo.adapters.rollouts import HFSampler
from openenv_echo.objective import EchoConfig
from openenv_echo.providers import LocalProcessProvider
from openenv_echo.roles import Role
from openenv_echo.testing.recipes import SYSTEM_PROMPT, tiny_causal_lm

skyrl_generator = pytest.importorskip("openenv_echo.adapters.skyrl.generator")
from skyrl.train.config import SkyRLTrainConfig  # noqa: E402

from openenv_echo.adapters.skyrl.gym import ENV_ID, register_env  # noqa: E402
from openenv_echo.adapters.skyrl.loss import world_weights  # noqa: E402
from openenv_echo.testing.skyrl_cpu import CPUInferenceClient  # noqa: E402

EchoGymGenerator, ROLE_KEY = skyrl_generator.EchoGymGenerator, skyrl_generator.ROLE_KEY


@pytest.fixture(scope="module")
def terminal() -> Iterator[str]:
    with LocalProcessProvider("terminal", max_sessions=16, idle_timeout_s=None, log_level="warning") as env:
        yield env.base_url


@pytest.mark.trainer
@pytest.mark.timeout(900)
def test_skyrls_generator_carries_per_token_roles(terminal: str, qwen_tokenizer: Any) -> None:
    register_env()
    cfg = SkyRLTrainConfig.from_cli_overrides(
        ["generator.max_turns=3", "generator.sampling_params.max_generate_length=10", "generator.max_input_length=4096"]
    )
    cfg.environment.skyrl_gym.openenv_echo = {"base_url": terminal, "action_field": "command"}  # env_config by class
    torch.manual_seed(0)
    model = tiny_causal_lm(qwen_tokenizer)
    eos = [qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")]
    engine = CPUInferenceClient(HFSampler(model, qwen_tokenizer, eos_ids=eos), qwen_tokenizer, 10)
    gen = EchoGymGenerator(
        generator_cfg=cfg.generator, skyrl_gym_cfg=cfg.environment.skyrl_gym, inference_engine_client=engine,
        tokenizer=qwen_tokenizer,
    )  # fmt: skip
    n = 3
    batch = {
        "prompts": [[{"role": "system", "content": SYSTEM_PROMPT}] for _ in range(n)],
        "env_classes": [ENV_ID] * n,
        "env_extras": [{"reset_options": {"seed": i, "max_steps": 3}} for i in range(n)],
    }
    out = asyncio.run(gen.generate(batch, disable_tqdm=True))
    roles, responses, masks = out[ROLE_KEY], out["response_ids"], out["loss_masks"]
    assert len(roles) == len(responses) == n
    env_code, warn_code, act = Role.ENV_OUTPUT.code, Role.WARNING.code, Role.ACTION.code
    env_tokens = 0
    for row, ids, mask in zip(roles, responses, masks, strict=True):
        assert len(row) == len(ids) == len(mask)
        assert all((r == act) == bool(m) for r, m in zip(row, mask))  # SkyRL's trained tokens, and only those
        for r, t in zip(row, ids):  # an env/warning token's text is env/warning text, never the template's
            if r in (env_code, warn_code):
                assert "<|im_" not in qwen_tokenizer.decode([t])
        env_tokens += row.count(env_code)
    assert env_tokens > 0 and any(warn_code in row for row in roles)  # the terminal env's bodies and its banners
    # the roles drive the registered loss's weights, right-aligned on SkyRL's response layout
    w = world_weights(roles, EchoConfig(world_model_coeff=0.05), width=max(len(r) for r in responses))
    for i, row in enumerate(roles):
        pad = w.shape[1] - len(row)
        on = (w[i, pad:] > 0).tolist()
        assert on == [r == env_code for r in row]
    assert float(w.sum()) == pytest.approx(0.05, rel=1e-5)  # token_mean: λ over the selected tokens


class _Dispatch:
    """The one call ``convert_to_training_input`` makes on the worker dispatch: the data-parallel size to pad to."""

    def get_lcm_dp_size(self) -> int:
        return 3  # 4 rows -> 2 padding rows (SkyRL copies row 0 into them)


def test_skyrls_trainer_computes_world_weights_per_policy_mini_batch(qwen_tokenizer: Any) -> None:
    from openenv_echo.adapters.skyrl.config import EchoSkyRLTrainConfig
    from openenv_echo.adapters.skyrl.loss import WORLD_WEIGHT_KEY
    from openenv_echo.adapters.skyrl.trainer import EchoPPOTrainer

    cfg = EchoSkyRLTrainConfig.from_cli_overrides(
        [
            "trainer.algorithm.policy_loss_type=echo_regular",
            "trainer.algorithm.world_model_coeff=0.05",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=1",
            "generator.n_samples_per_prompt=2",
        ]
    )
    trainer = EchoPPOTrainer.__new__(EchoPPOTrainer)  # SkyRL's conversion needs only these of the trainer's state
    trainer.cfg, trainer.tokenizer, trainer.global_step, trainer.all_metrics = cfg, qwen_tokenizer, 0, {}
    trainer.dispatch = _Dispatch()
    a, e, w = Role.ACTION.code, Role.ENV_OUTPUT.code, Role.WARNING.code
    roles = [[a, a, e, e, e, a], [a, w, e, a], [a, e, a], [a, a, e, e, a]]
    out = {
        "prompt_token_ids": [[1, 2, 3], [1, 2, 3], [4, 5], [4, 5]],
        "response_ids": [[10 + j for j in range(len(r))] for r in roles],
        "rewards": [[0.0] * (len(r) - 1) + [1.0] for r in roles],
        "loss_masks": [[int(x == a) for x in r] for r in roles],
        "rollout_logprobs": None,
        ROLE_KEY: roles,
    }
    batch = trainer.convert_to_training_input(out, ["p0", "p0", "p1", "p1"])
    weights = batch[WORLD_WEIGHT_KEY]
    assert batch.metadata["policy_mini_batch_boundaries"] == [(0, 2), (2, 4)]
    assert weights.shape == batch["loss_mask"].shape and weights.shape[0] == 6  # 2 padding rows
    assert weights[4:].eq(0).all()  # SkyRL copied row 0 into them; their world term is 0
    for start, end in [(0, 2), (2, 4)]:  # token_mean per mini-batch: λ over that mini-batch's env tokens
        n_env = sum(r.count(e) for r in roles[start:end])
        part = weights[start:end]
        assert float(part.sum()) == pytest.approx(0.05, rel=1e-6)
        assert torch.allclose(part[part > 0], torch.full((n_env,), 0.05 / n_env))
    for i, r in enumerate(roles):  # right-aligned on SkyRL's own response tensors
        row = weights[i, weights.shape[1] - len(r) :]
        assert [bool(x > 0) for x in row] == [c == e for c in r]
        assert batch["response_mask"][i, weights.shape[1] - len(r) :].eq(1).all()


@pytest.mark.trainer
@pytest.mark.timeout(900)
@pytest.mark.parametrize("coeff", [0.05, 0.0])
def test_skyrls_trainer_step_runs_echo_from_generation_to_optimizer(
    terminal: str, qwen_tokenizer: Any, coeff: float
) -> None:
    """SkyRL's own step, generation to optimizer: ``SkyRLGymGenerator.generate`` → ``convert_to_training_input`` →
    ``fwd_logprobs_values_reward`` → ``compute_advantages_and_returns`` → ``train_critic_and_policy`` (its mini-batch
    loop, advantage normalization, the worker's micro-batches and the registered echo loss), the workers' Ray
    dispatch answered in-process by SkyRL's ``PolicyWorkerBase`` on a CPU."""
    from openenv_echo.adapters.skyrl.config import EchoSkyRLTrainConfig
    from openenv_echo.adapters.skyrl.loss import register_echo_policy_loss
    from openenv_echo.adapters.skyrl.trainer import EchoPPOTrainer
    from openenv_echo.testing.skyrl_cpu import CPUDispatch, CPUPolicyWorker

    register_env()
    register_echo_policy_loss("regular")
    cfg = EchoSkyRLTrainConfig.from_cli_overrides(
        [
            "trainer.algorithm.policy_loss_type=echo_regular",
            f"trainer.algorithm.world_model_coeff={coeff}",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=1",
            "trainer.micro_train_batch_size_per_gpu=1",
            "trainer.policy.optimizer_config.lr=0.001",
            "generator.n_samples_per_prompt=2",
            "generator.max_turns=2",
            "generator.sampling_params.max_generate_length=10",
            "generator.max_input_length=4096",
        ]
    )
    cfg.environment.skyrl_gym.openenv_echo = {"base_url": terminal, "action_field": "command"}
    torch.manual_seed(0)
    model = tiny_causal_lm(qwen_tokenizer)
    eos = [qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")]
    engine = CPUInferenceClient(HFSampler(model, qwen_tokenizer, eos_ids=eos), qwen_tokenizer, 10)
    gen = EchoGymGenerator(
        generator_cfg=cfg.generator, skyrl_gym_cfg=cfg.environment.skyrl_gym, inference_engine_client=engine,
        tokenizer=qwen_tokenizer,
    )  # fmt: skip
    worlds = [{"reset_options": {"seed": s, "max_steps": 2}} for s in (0, 0, 1, 1)]  # one world per GRPO group
    batch = {
        "prompts": [[{"role": "system", "content": SYSTEM_PROMPT}] for _ in worlds],
        "env_classes": [ENV_ID] * len(worlds),
        "env_extras": worlds,
    }
    generated = asyncio.run(gen.generate(batch, disable_tqdm=True))
    generated["rewards"] = [  # a random model's groups tie on the env's reward: shorter episodes score higher
        [*r[:-1], r[-1] - 1e-3 * len(r)] for r in generated["rewards"]
    ]

    trainer = EchoPPOTrainer.__new__(EchoPPOTrainer)  # the state its step reads; no Ray actors, no vLLM
    trainer.cfg, trainer.tokenizer, trainer.global_step = cfg, qwen_tokenizer, 1
    trainer.all_metrics, trainer.all_timings, trainer.ref_model = {}, {}, None  # no critic path configured
    trainer.dispatch = CPUDispatch(CPUPolicyWorker(cfg.trainer, model))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    data = trainer.convert_to_training_input(generated, ["w0", "w0", "w1", "w1"])
    data = trainer.fwd_logprobs_values_reward(data)
    data = trainer.compute_advantages_and_returns(data)
    status = trainer.train_critic_and_policy(data)
    assert status["grad_norm"] > 0
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())  # the optimizer stepped
    world = status["loss_metrics/echo/world_loss"]
    assert world > 0 if coeff > 0 else world == 0.0
    assert trainer.all_metrics["policy/loss_metrics/echo/world_loss"] == world  # in SkyRL's own metrics

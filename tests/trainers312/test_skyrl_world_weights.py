"""SkyRL's one ECHO seam from rollouts to gradients, with SkyRL 0.4's own objects: real echo-env episodes ->
``to_skyrl`` -> SkyRL's ``convert_prompts_responses_to_batch_tensors`` (right-aligned responses) -> the trainer's
per-mini-batch ``mini_batch_world_weights`` -> the registered ``echo_regular`` loss beside SkyRL's ``regular``.

The world term's gradient on each selected log-prob is the analytic ``-λ·c_role/N`` of every normalization, zero
elsewhere (padding, scaffold, action tokens), and SkyRL's policy gradient is untouched. The worker step around
this loss: test_skyrl_loss.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
from skyrl.train.config import AlgorithmConfig
from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors

from openenv_echo.adapters.converters import to_skyrl
from openenv_echo.adapters.skyrl import ROLE_KEY
from openenv_echo.adapters.skyrl.config import config_from_skyrl
from openenv_echo.adapters.skyrl.loss import WORLD_LOSS_METRIC, register_echo_policy_loss, world_weight_context
from openenv_echo.adapters.skyrl.trainer import mini_batch_world_weights
from openenv_echo.objective import EchoConfig
from openenv_echo.roles import Role
from tests.adapters.test_converters import _rollouts

ACT, ENV, WARN = Role.ACTION.code, Role.ENV_OUTPUT.code, Role.WARNING.code
LAM = 0.05


def _skyrl_batch(tok: Any) -> dict[str, Any]:
    """SkyRL's training tensors of four real echo-env episodes, plus each row's roles right-aligned (-1 before)."""
    rollouts = _rollouts(tok)
    gen = to_skyrl(rollouts)
    _, _, response_mask, _, loss_mask, _, _, _ = convert_prompts_responses_to_batch_tensors(
        0,
        gen["prompt_token_ids"],
        gen["response_ids"],
        [[0.0] * len(r) for r in gen["response_ids"]],
        gen["loss_masks"],
        gen["rollout_logprobs"],
    )
    rows, width = response_mask.shape
    roles = torch.full((rows, width), -1, dtype=torch.long)
    for i, r in enumerate(gen[ROLE_KEY]):
        roles[i, width - len(r) :] = torch.tensor(r)
    g = torch.Generator().manual_seed(0)
    old = -torch.rand((rows, width), generator=g, dtype=torch.float64) * 3
    return {
        "roles": gen[ROLE_KEY],
        "role_grid": roles,
        "obs_count": [r.obs_count for r in rollouts],
        "response_mask": response_mask,
        "loss_mask": loss_mask.to(torch.float64),
        "old_log_probs": old,
        "log_probs": old + 0.05 * torch.randn((rows, width), generator=g, dtype=torch.float64),
        "advantages": torch.randn(rows, 1, generator=g, dtype=torch.float64).expand(-1, width).clone(),
    }


def _log_prob_grad(t: dict[str, Any], loss: str, weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
    """∂(SkyRL's policy loss ``loss``)/∂log_probs on the batch ``t``, inside ``world_weight_context(weights)``."""
    algo = AlgorithmConfig(policy_loss_type=loss, loss_reduction="token_mean", eps_clip_low=0.2, eps_clip_high=0.2)
    lp = t["log_probs"].clone().requires_grad_()
    fn = PolicyLossRegistry.get(loss)
    args = (lp, t["old_log_probs"], t["advantages"], algo)
    if weights is None:
        value, metrics = fn(*args, loss_mask=t["loss_mask"])
    else:
        with world_weight_context(weights):
            value, metrics = fn(*args, loss_mask=t["loss_mask"])
    value.backward()
    assert lp.grad is not None
    return lp.grad, metrics


@pytest.mark.parametrize(
    "norm, seq_den",
    [
        ("token_mean", "selected"),
        ("sequence_mean", "selected"),
        ("sequence_mean", "full_observation"),
        ("constant", "selected"),
    ],
)
def test_the_world_gradient_is_the_analytic_constant(qwen_tokenizer: Any, norm: str, seq_den: str) -> None:
    cfg = EchoConfig(world_model_coeff=LAM, normalization=norm, sequence_denominator=seq_den, constant_denominator=64)
    t = _skyrl_batch(qwen_tokenizer)
    rows = len(t["roles"])
    weights = mini_batch_world_weights(t["roles"], t["response_mask"], [(0, rows)], cfg)
    g_policy, _ = _log_prob_grad(t, "regular")
    g_echo, metrics = _log_prob_grad(t, register_echo_policy_loss("regular"), weights)

    env, action = t["role_grid"] == ENV, t["loss_mask"].bool()
    assert torch.equal(g_echo[action], g_policy[action])  # SkyRL's policy gradient is untouched
    assert g_echo[~env & ~action].eq(0).all()  # nothing on padding, scaffold or warnings (env_only)
    n_sel = int(env.sum())
    for i in range(rows):
        n_i = int(env[i].sum()) if seq_den == "selected" else t["obs_count"][i]
        expected = {"token_mean": LAM / n_sel, "sequence_mean": LAM / (n_i * rows), "constant": LAM / (rows * 64)}[norm]
        got = -g_echo[i][env[i]]
        assert got.numel() > 0
        torch.testing.assert_close(got, torch.full_like(got, expected), rtol=1e-6, atol=0)
    assert metrics[WORLD_LOSS_METRIC] > 0


def test_warning_targets_take_their_role_coefficient(qwen_tokenizer: Any) -> None:
    t = _skyrl_batch(qwen_tokenizer)
    warn, env = t["role_grid"] == WARN, t["role_grid"] == ENV
    assert warn.any(), "the echo episodes carry warning tokens"
    rows = len(t["roles"])
    only_env = mini_batch_world_weights(t["roles"], t["response_mask"], [(0, rows)], EchoConfig(world_model_coeff=LAM))
    both = mini_batch_world_weights(
        t["roles"],
        t["response_mask"],
        [(0, rows)],
        EchoConfig(world_model_coeff=LAM, world_loss_target="warning_plus_env", role_coeffs={"warning": 0.5}),
    )
    n = int((warn | env).sum())  # token_mean over every selected token
    torch.testing.assert_close(both[env], torch.full_like(both[env], LAM / n))
    torch.testing.assert_close(both[warn], torch.full_like(both[warn], 0.5 * LAM / n))
    assert only_env[warn].eq(0).all() and only_env[env].gt(0).all()


def test_each_mini_batch_is_normalized_on_its_own_and_micro_batches_add_up(qwen_tokenizer: Any) -> None:
    t = _skyrl_batch(qwen_tokenizer)
    cfg = EchoConfig(world_model_coeff=LAM)
    weights = mini_batch_world_weights(t["roles"], t["response_mask"], [(0, 2), (2, 4)], cfg)
    env = t["role_grid"] == ENV
    for sl in (slice(0, 2), slice(2, 4)):  # SkyRL folds its loss reduction per mini-batch: so does the world term
        n = int(env[sl].sum())
        torch.testing.assert_close(weights[sl][env[sl]], torch.full((n,), LAM / n))
    # the worker hands each micro-batch its rows of the mini-batch's weights: the world gradients add up
    name = register_echo_policy_loss("regular")
    whole = _log_prob_grad(t, name, weights)[0] - _log_prob_grad(t, "regular")[0]
    parts = []
    for sl in (slice(0, 1), slice(1, 4)):
        part = {k: (v[sl] if isinstance(v, torch.Tensor) else v) for k, v in t.items()}
        parts.append(_log_prob_grad(part, name, weights[sl])[0] - _log_prob_grad(part, "regular")[0])
    assert whole.count_nonzero() > 0
    torch.testing.assert_close(torch.cat(parts), whole, rtol=1e-12, atol=0)


def test_skyrls_padding_rows_get_no_world_weight(qwen_tokenizer: Any) -> None:
    t = _skyrl_batch(qwen_tokenizer)
    rows = len(t["roles"])
    mask = torch.cat([t["response_mask"], t["response_mask"][:2]])  # SkyRL's dp padding copies rows
    weights = mini_batch_world_weights(t["roles"] + [[], []], mask, [(0, rows)], EchoConfig(world_model_coeff=LAM))
    assert weights.shape == mask.shape and weights[rows:].eq(0).all() and weights[:rows].gt(0).any()
    assert not (weights[:rows].gt(0) & ~t["response_mask"].bool()).any()  # never on SkyRL's left padding


def test_config_from_the_published_skyrl_setting() -> None:
    cfg = config_from_skyrl(
        {
            "world_model_coeff": 0.05,
            "loss_reduction": "sequence_mean",
            "world_loss_normalization": "full_observation_tokens",
        }
    )
    assert (cfg.world_model_coeff, cfg.normalization, cfg.sequence_denominator) == (
        0.05,
        "sequence_mean",
        "full_observation",
    )
    assert cfg.env_temperature == "rollout"  # SkyRL scores at the sampling temperature
    dr = config_from_skyrl(
        {
            "world_model_coeff": 0.1,
            "loss_reduction": "seq_mean_token_sum_norm",
            "max_seq_len": 4096,
            "world_model_coeff_schedule": "step_decay",
            "world_model_coeff_steps": [10],
            "world_model_coeff_values": [0.0],
            "wm_filter_min_correct_pct": 0.0,
        }
    )
    assert dr.constant_denominator == 4096 and dr.coeff_at(10) == 0.0 and dr.filters.min_correct_share == 0.0
    with pytest.raises(ValueError, match="loss_reduction"):
        config_from_skyrl({"loss_reduction": "sum"})

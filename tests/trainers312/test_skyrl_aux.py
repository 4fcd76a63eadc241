"""The auxiliary-loss path (``openenv_echo.adapters.skyrl``: generator-side world masks, ``compute_world_loss`` beside
the policy loss) with SkyRL 0.4's own objects: its ``regular`` policy loss from ``PolicyLossRegistry``, its
``AlgorithmConfig`` and its ``TrainingInputBatch``."""

from __future__ import annotations

from typing import Any

import torch
from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
from skyrl.train.config import AlgorithmConfig

from openenv_echo.adapters.skyrl import compute_world_loss, get_aux_policy_loss_context
from openenv_echo.objective import EchoConfig
from tests.adapters.test_skyrl import LAM, _batch, _generator_output


def test_the_world_term_beside_skyrls_regular_policy_loss(qwen_tokenizer: Any) -> None:
    cfg = EchoConfig(world_model_coeff=LAM)
    t = TrainingInputBatch(_batch(_generator_output(qwen_tokenizer), cfg))  # SkyRL's own batch container
    algo = AlgorithmConfig(policy_loss_type="regular", loss_reduction="token_mean", eps_clip_low=0.2, eps_clip_high=0.2)
    regular = PolicyLossRegistry.get("regular")
    base = t["old_log_probs"] + 0.05 * torch.randn(t["old_log_probs"].shape, dtype=torch.float64)

    def grads(with_world: bool) -> torch.Tensor:
        lp = base.clone().requires_grad_()
        loss, _ = regular(lp, t["old_log_probs"], t["advantages"], algo, loss_mask=t["loss_mask"])
        if with_world:
            ctx = get_aux_policy_loss_context(t, cfg)
            aux, _ = compute_world_loss(lp, t["world_role_id"], cfg, token_denominator=ctx["world_tokens"])
            loss = loss + aux
        loss.backward()
        assert lp.grad is not None
        return lp.grad

    g_policy, g_echo = grads(False), grads(True)
    env, action = t["world_loss_mask"].bool(), t["loss_mask"].bool()
    assert torch.equal(g_echo[action], g_policy[action])  # SkyRL's policy gradient is untouched
    n = int(env.sum())
    torch.testing.assert_close(-g_echo[env], torch.full((n,), LAM / n, dtype=torch.float64), rtol=1e-12, atol=0)
    assert g_policy[env].eq(0).all()  # SkyRL's loss_mask keeps the RL term off env tokens
    sub = t[0:2]  # a micro-batch slice of SkyRL's TrainingInputBatch keeps the world masks aligned
    assert torch.equal(sub["world_loss_mask"], t["world_loss_mask"][:2])

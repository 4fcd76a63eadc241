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


def test_both_skyrl_seams_align_with_skyrls_own_batch_tensors() -> None:
    # responses of 6 and 3 tokens: the shape where a left-aligned seam put a world target on SkyRL's padding
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors

    from openenv_echo.adapters.skyrl import add_world_masks, world_training_tensors
    from openenv_echo.adapters.skyrl.loss import world_weights
    from openenv_echo.roles import Role

    a, e, w = Role.ACTION.code, Role.ENV_OUTPUT.code, Role.WARNING.code
    roles = [[a, a, w, e, e, a], [a, e, a]]
    responses = [[11, 12, 13, 14, 15, 16], [21, 22, 23]]
    masks = [[1 if r == a else 0 for r in row] for row in roles]
    _, _, response_mask, _, loss_mask, _, _, _ = convert_prompts_responses_to_batch_tensors(
        0, [[1, 2], [3, 4, 5]], responses, [[0.0] * len(r) for r in responses], masks, None
    )
    cfg = EchoConfig(world_model_coeff=LAM)
    gen = add_world_masks({"response_ids": responses, "loss_masks": masks}, roles, cfg)
    t = world_training_tensors(gen, response_length=int(response_mask.shape[1]))
    assert torch.equal(t["world_role_id"] != -1, response_mask.bool())  # every role on a real response column
    env = t["world_env_mask"].bool()
    assert not (env & ~response_mask.bool()).any()  # no world target on SkyRL's padding
    assert int(env.sum()) == sum(r.count(e) for r in roles)  # every env token has one
    assert not (env & loss_mask.bool()).any()  # and none is a policy token
    weights = world_weights(roles, cfg, width=int(response_mask.shape[1]))
    assert torch.equal(weights > 0, t["world_loss_mask"].bool())  # the registered loss's seam agrees, column for column

"""ECHO in SkyRL's own loss path: registered in SkyRL's ``PolicyLossRegistry``, called by SkyRL's policy worker step
(``forward_backward`` over micro-batches, ``optim_step``) with SkyRL's config objects on a tiny local model.

At λ = 0 the ECHO loss is SkyRL's built-in loss bit for bit (loss and every parameter gradient); above 0 the only
extra gradient on the log-probs is ``-w`` on the selected env-output positions."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
from skyrl.train.config import TrainerConfig

from openenv_echo.adapters.skyrl.loss import (
    WORLD_WEIGHT_KEY,
    echo_policy_loss,
    register_echo_policy_loss,
    world_weight_context,
    world_weights,
)
from openenv_echo.objective import EchoConfig
from openenv_echo.roles import Role
from openenv_echo.testing.recipes import tiny_causal_lm
from openenv_echo.testing.skyrl_cpu import CPUPolicyWorker, training_batch

ACT, ENV, WARN, CTX = Role.ACTION.code, Role.ENV_OUTPUT.code, Role.WARNING.code, Role.CONTEXT.code
PROMPTS = [[5, 6, 7], [5, 6, 7, 8], [9, 10], [9, 10, 11]]
RESPONSES = [[20, 21, 22, 23, 24, 25], [30, 31, 32], [40, 41, 42, 43, 44], [50, 51]]
ROLES = [[ACT, ACT, CTX, ENV, ENV, ACT], [ACT, ENV, ACT], [ACT, CTX, WARN, ENV, ACT], [ACT, ACT]]
REWARDS = [1.0, 0.0, 0.5, 0.2]
UIDS = ["a", "a", "b", "b"]


def _worker(tok: Any, loss_type: str, **algorithm: Any) -> CPUPolicyWorker:
    cfg = TrainerConfig()
    cfg.algorithm.policy_loss_type = loss_type
    cfg.algorithm.temperature = 1.0
    cfg.algorithm.use_kl_loss = False
    for k, v in algorithm.items():
        setattr(cfg.algorithm, k, v)
    cfg.micro_train_batch_size_per_gpu = 2  # two micro-batches: the mixin must hand each its own rows
    cfg.policy.optimizer_config.lr = 1e-3
    return CPUPolicyWorker(cfg, tiny_causal_lm(tok, seed=0))


def _batch(worker: CPUPolicyWorker, weights: torch.Tensor | None) -> Any:
    masks = [[1 if r == ACT else 0 for r in row] for row in ROLES]
    lps = [[0.0] * len(r) for r in RESPONSES]
    return training_batch(worker, PROMPTS, RESPONSES, REWARDS, masks, lps, UIDS, pad_token_id=0, world_weight=weights)


def _step(
    tok: Any, loss_type: str, coeff: float | None, **algorithm: Any
) -> tuple[dict[str, float], list[torch.Tensor], torch.Tensor]:
    """One SkyRL forward_backward; returns its metrics, the parameter gradients and ∂loss/∂action_log_probs."""
    worker = _worker(tok, loss_type, **algorithm)
    weights = None if coeff is None else world_weights(ROLES, EchoConfig(world_model_coeff=coeff))
    batch = _batch(worker, weights)
    grads: list[torch.Tensor] = []
    worker.model.on_action_log_probs = lambda lp: lp.register_hook(lambda g: grads.append(g.detach().clone()))
    metrics = worker.forward_backward(batch).metrics
    params = [p.grad.detach().clone() for p in worker.model.parameters()]
    return metrics, params, torch.cat(grads)


def test_registered_in_skyrls_registry_idempotently() -> None:
    name = register_echo_policy_loss("regular")
    assert name == "echo_regular" and name in PolicyLossRegistry.list_available()
    assert register_echo_policy_loss("regular") == name  # a second call is a no-op
    with pytest.raises(ValueError, match="no policy loss"):
        register_echo_policy_loss("no_such_loss")


@pytest.mark.parametrize("base", ["regular", "dual_clip", "cispo", "gspo", "sapo"])
def test_coefficient_zero_is_skyrls_loss_bit_for_bit(qwen_tokenizer: Any, base: str) -> None:
    name = register_echo_policy_loss(base)
    plain, plain_grads, plain_lp_grad = _step(qwen_tokenizer, base, None)
    echo, echo_grads, echo_lp_grad = _step(qwen_tokenizer, name, 0.0)
    assert echo["policy_loss"] == plain["policy_loss"] and echo["final_loss"] == plain["final_loss"]
    assert echo["loss_metrics/echo/world_loss"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(plain_grads, echo_grads))
    assert torch.equal(plain_lp_grad, echo_lp_grad)


def test_env_output_gets_gradient_only_above_zero(qwen_tokenizer: Any) -> None:
    name = register_echo_policy_loss("regular")
    weights = world_weights(ROLES, EchoConfig(world_model_coeff=0.05))
    _, plain_grads, plain_lp_grad = _step(qwen_tokenizer, "regular", None)
    echo, echo_grads, echo_lp_grad = _step(qwen_tokenizer, name, 0.05)
    # the only extra gradient on the log-probs is -w, and w is non-zero exactly on the env-output positions
    torch.testing.assert_close(echo_lp_grad - plain_lp_grad, -weights, rtol=0, atol=1e-7)
    width = weights.shape[1]
    env = torch.zeros_like(weights, dtype=torch.bool)
    for i, row in enumerate(ROLES):
        env[i, width - len(row) :] = torch.tensor(row) == ENV
    assert torch.equal(weights > 0, env)
    assert echo["loss_metrics/echo/world_loss"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(plain_grads, echo_grads))


def test_world_weights_are_right_aligned_and_token_mean_normalised() -> None:
    w = world_weights(ROLES, EchoConfig(world_model_coeff=0.05))
    assert w.shape == (4, 6) and w.dtype == torch.float32
    assert float(w.sum()) == pytest.approx(0.05)  # λ times the mean over the 4 selected env-output tokens
    assert w[3].sum() == 0 and w[1, 4] == pytest.approx(0.0125)  # row 1 = [pad, pad, pad, act, env, act]
    assert float(world_weights(ROLES, EchoConfig(world_model_coeff=0.0)).abs().sum()) == 0.0
    with pytest.raises(ValueError, match="more than width"):
        world_weights(ROLES, EchoConfig(world_model_coeff=0.05), width=3)


def test_the_echo_loss_refuses_to_run_without_weights_or_with_misshaped_ones() -> None:
    from skyrl.train.config import AlgorithmConfig

    fn = echo_policy_loss("regular")
    lp = torch.zeros(2, 3, requires_grad=True)
    args = (lp, lp.detach(), torch.zeros(2, 3), AlgorithmConfig(policy_loss_type="echo_regular"))
    with pytest.raises(RuntimeError, match="without world weights"):
        fn(*args, loss_mask=torch.ones(2, 3))
    with world_weight_context(torch.zeros(2, 4)), pytest.raises(ValueError, match="do not match"):
        fn(*args, loss_mask=torch.ones(2, 3))
    with world_weight_context(torch.tensor([[0.0, 0.5, 0.0], [0.0, 0.0, 0.0]])):
        loss, metrics = fn(*args, loss_mask=torch.ones(2, 3))
    assert (
        metrics["echo/world_loss"] == 0.0 and float(loss.detach()) == 0.0
    )  # log p = 0: no world loss, but the graph is there
    loss.backward()
    assert lp.grad is not None and float(lp.grad[0, 1]) == -0.5


def test_the_worker_mixin_refuses_what_it_cannot_align(qwen_tokenizer: Any) -> None:
    name = register_echo_policy_loss("regular")
    worker = _worker(qwen_tokenizer, name)
    batch = _batch(worker, world_weights(ROLES, EchoConfig(world_model_coeff=0.05)))
    batch[WORLD_WEIGHT_KEY] = batch[WORLD_WEIGHT_KEY][:, :-1].contiguous()
    with pytest.raises(ValueError, match=WORLD_WEIGHT_KEY):
        worker.forward_backward(batch)
    worker.cfg.max_tokens_per_microbatch = 64
    with pytest.raises(NotImplementedError, match="sample-based"):
        worker.forward_backward(_batch(worker, world_weights(ROLES, EchoConfig(world_model_coeff=0.05))))


def test_a_full_step_through_optim_step_changes_the_model(qwen_tokenizer: Any) -> None:
    name = register_echo_policy_loss("regular")
    worker = _worker(qwen_tokenizer, name)
    before = [p.detach().clone() for p in worker.model.parameters()]
    metrics = worker.train_step(_batch(worker, world_weights(ROLES, EchoConfig(world_model_coeff=0.05))))
    assert metrics["grad_norm"] > 0 and metrics["loss_metrics/echo/world_loss"] > 0
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, worker.model.parameters()))

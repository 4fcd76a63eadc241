"""SkyRL adapter at the function level: the pure world loss with SkyRL's batch conventions and the generator-side
masks. With SkyRL's own ``regular`` policy loss and batch container: tests/trainers312/test_skyrl_aux.py."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from openenv_echo.adapters.skyrl import (
    BATCH_KEYS,
    add_world_masks,
    compute_aux_policy_loss,
    compute_world_loss,
    config_from_skyrl,
    get_aux_policy_loss_context,
    world_training_tensors,
)
from openenv_echo.envs.echo.environment import EchoEnvironment
from openenv_echo.envs.echo.models import EchoAction
from openenv_echo.objective import EchoConfig
from openenv_echo.roles import Role
from openenv_echo.tokenization import TitoBuilder

ENV, WARN, ACT = Role.ENV_OUTPUT.code, Role.WARNING.code, Role.ACTION.code
LAM = 0.05


def _generator_output(tok: Any, n: int = 4, seed: int = 0) -> tuple[dict[str, Any], list[list[int]]]:
    """A SkyRL-shaped GeneratorOutput from real echo-env episodes (prompt / response split at the first action)."""
    rng = random.Random(seed)
    prompts, responses, roles, masks = [], [], [], []
    for _ in range(n):
        env = EchoEnvironment()
        b = TitoBuilder(tok, observation_role="tool")
        b.start([{"role": "user", "content": "Talk to the echo server."}], env.reset(seed=0))
        for _ in range(rng.randint(1, 3)):
            msg = rng.choice(["ls", "hello world", "cat notes.txt"])
            b.add_action(text=msg)
            b.add_observation(env.step(EchoAction(message=msg)))
        b.add_action(text="bye")
        tt = b.finish()
        ids, rid = tt.input_ids.tolist(), tt.role_ids.tolist()
        k = rid.index(ACT)
        prompts.append(ids[:k])
        responses.append(ids[k:])
        roles.append(rid[k:])
        masks.append([1 if r == ACT else 0 for r in rid[k:]])
    out = {
        "prompt_token_ids": prompts,
        "response_ids": responses,
        "rewards": [float(i) for i in range(n)],
        "loss_masks": masks,
        "stop_reasons": ["stop"] * n,
        "rollout_metrics": None,
        "rollout_logprobs": None,
    }
    return out, roles


@pytest.fixture
def gen(qwen_tokenizer: Any) -> tuple[dict[str, Any], list[list[int]]]:
    return _generator_output(qwen_tokenizer)


def test_add_world_masks_aligns_with_response_ids(gen: tuple[dict[str, Any], list[list[int]]]) -> None:
    out, roles = gen
    cfg = EchoConfig(world_model_coeff=LAM)
    got = add_world_masks(out, roles, cfg)
    assert got["response_ids"] is out["response_ids"] and "world_loss_masks" not in out  # a copy, original intact
    for ids, r, wl, ww, we, c in zip(
        got["response_ids"],
        roles,
        got["world_loss_masks"],
        got["world_warning_masks"],
        got["world_env_masks"],
        got["world_full_observation_counts"],
        strict=True,
    ):
        assert len(wl) == len(ww) == len(we) == len(ids)
        assert wl == [1 if x == ENV else 0 for x in r]  # env_only: env bodies, never warnings or scaffold
        assert ww == [1 if x == WARN else 0 for x in r]
        assert c == sum(1 for x in r if x in (ENV, WARN))
    both = add_world_masks(
        out,
        roles,
        EchoConfig(world_model_coeff=LAM, world_loss_target="warning_plus_env", role_coeffs={"warning": 0.5}),
    )
    for r, w in zip(roles, both["world_loss_weights"], strict=True):
        assert w == [1.0 if x == ENV else 0.5 if x == WARN else 0.0 for x in r]


def test_add_world_masks_refuses_bad_inputs(gen: tuple[dict[str, Any], list[list[int]]]) -> None:
    out, roles = gen
    cfg = EchoConfig(world_model_coeff=LAM)
    leaky = dict(out, loss_masks=[[1] * len(r) for r in out["response_ids"]])
    with pytest.raises(ValueError, match="non-action tokens"):
        add_world_masks(leaky, roles, cfg)
    with pytest.raises(ValueError, match="roles"):
        add_world_masks(out, [r[:-1] for r in roles], cfg)
    with pytest.raises(ValueError, match="role rows"):
        add_world_masks(out, roles[:1], cfg)
    with pytest.raises(ValueError, match=r"0\.\.3"):
        add_world_masks(out, [[9] * len(r) for r in roles], cfg)


def test_training_tensors_are_right_aligned_and_pad_rows_are_zero(gen: tuple[dict[str, Any], list[list[int]]]) -> None:
    out, roles = gen
    got = add_world_masks(out, roles, EchoConfig(world_model_coeff=LAM))
    width = max(len(r) for r in out["response_ids"])
    t = world_training_tensors(got, response_length=width, num_rows=6)
    assert set(t) == set(BATCH_KEYS.values())
    m = t["world_loss_mask"]
    assert m.shape == (6, width) and m[4:].eq(0).all()
    for i, r in enumerate(roles):  # SkyRL 0.4 right-aligns responses: a row's tokens are its last len(r) columns
        assert m[i, width - len(r) :].tolist() == [1.0 if x == ENV else 0.0 for x in r]
        assert m[i, : width - len(r)].eq(0).all()
    assert t["world_full_observation_count"][4:].eq(0).all()
    r0 = t["world_role_id"][0]
    assert t["world_role_id"][4:].eq(-1).all() and r0[width - len(roles[0]) :].tolist() == roles[0]
    with pytest.raises(ValueError, match="num_rows"):
        world_training_tensors(got, num_rows=2)
    with pytest.raises(ValueError, match="response_length"):
        world_training_tensors(got, response_length=3)


def _batch(gen: tuple[dict[str, Any], list[list[int]]], cfg: EchoConfig) -> dict[str, torch.Tensor]:
    out, roles = gen
    t = world_training_tensors(add_world_masks(out, roles, cfg))
    width = t["world_loss_mask"].shape[1]
    resp = torch.zeros((len(roles), width))
    loss_mask = torch.zeros((len(roles), width))
    for i, r in enumerate(roles):  # right-aligned, as SkyRL 0.4 lays responses out
        resp[i, width - len(r) :] = 1
        loss_mask[i, width - len(r) :] = torch.tensor([1.0 if x == ACT else 0.0 for x in r])
    g = torch.Generator().manual_seed(0)
    t.update(
        response_mask=resp,
        loss_mask=loss_mask,
        old_log_probs=-torch.rand(resp.shape, generator=g, dtype=torch.float64) * 3,
        advantages=torch.randn(len(roles), 1, generator=g, dtype=torch.float64).expand(-1, width).clone(),
    )
    return t


@pytest.mark.parametrize(
    "norm, seq_den",
    [
        ("token_mean", "selected"),
        ("sequence_mean", "selected"),
        ("sequence_mean", "full_observation"),
        ("constant", "selected"),
    ],
)
def test_world_loss_gradient_is_the_analytic_constant(
    gen: tuple[dict[str, Any], list[list[int]]], norm: str, seq_den: str
) -> None:
    cfg = EchoConfig(world_model_coeff=LAM, normalization=norm, sequence_denominator=seq_den, constant_denominator=64)
    t = _batch(gen, cfg)
    lp = (-torch.rand(t["world_loss_mask"].shape, dtype=torch.float64) * 4).requires_grad_()
    ctx = get_aux_policy_loss_context(t, cfg)
    loss, metrics = compute_world_loss(
        lp,
        t["world_role_id"],
        cfg,
        full_observation_count=t["world_full_observation_count"],
        token_denominator=ctx["world_tokens"],
        sequence_denominator=ctx["world_sequences"],
    )
    loss.backward()
    mask = t["world_loss_mask"].bool()
    n_sel, n_rows = int(mask.sum()), mask.shape[0]
    for i in range(n_rows):
        n_i = int(mask[i].sum()) if seq_den == "selected" else int(t["world_full_observation_count"][i])
        expected = {
            "token_mean": LAM / n_sel,
            "sequence_mean": LAM / (n_i * n_rows) if n_i else 0.0,
            "constant": LAM / (n_rows * 64),
        }[norm]
        torch.testing.assert_close(
            -lp.grad[i][mask[i]], torch.full((int(mask[i].sum()),), expected, dtype=torch.float64), rtol=1e-12, atol=0
        )
        assert lp.grad[i][~mask[i]].eq(0).all()
    assert metrics["echo/tokens/selected"].item() == n_sel
    assert metrics["echo/ce_per_token/env_output"].item() > 0 and "echo/ce_per_token/warning" not in metrics
    assert not any(k.startswith("policy/") for k in metrics)  # SkyRL logs its own policy metrics


def test_micro_batches_with_the_context_equal_the_mini_batch(gen: tuple[dict[str, Any], list[list[int]]]) -> None:
    for norm in ("token_mean", "sequence_mean"):
        cfg = EchoConfig(world_model_coeff=LAM, normalization=norm)
        t = _batch(gen, cfg)
        ctx = get_aux_policy_loss_context(t, cfg)
        base = -torch.rand(t["world_loss_mask"].shape, dtype=torch.float64) * 4
        full = base.clone().requires_grad_()
        compute_world_loss(
            full,
            t["world_role_id"],
            cfg,
            token_denominator=ctx["world_tokens"],
            sequence_denominator=ctx["world_sequences"],
        )[0].backward()
        parts = base.clone().requires_grad_()
        for sl in (slice(0, 1), slice(1, 4)):
            compute_world_loss(
                parts[sl],
                t["world_role_id"][sl],
                cfg,
                token_denominator=ctx["world_tokens"],
                sequence_denominator=ctx["world_sequences"],
            )[0].backward()
        assert full.grad is not None and full.grad.count_nonzero() > 0  # a world gradient to compare, not zeros
        torch.testing.assert_close(full.grad, parts.grad, rtol=1e-12, atol=0)


def test_aux_hook_reads_experience_extras(gen: tuple[dict[str, Any], list[list[int]]]) -> None:
    cfg = EchoConfig(world_model_coeff=LAM)
    t = _batch(gen, cfg)
    extras = {k: t[k] for k in BATCH_KEYS.values()}
    experience = SimpleNamespace(extras=extras, metadata={})  # PR #1716 carries the extra batch keys here
    lp = (-torch.rand(t["world_loss_mask"].shape) * 4).requires_grad_()
    ctx = get_aux_policy_loss_context(t, cfg)
    aux, metrics = compute_aux_policy_loss(
        action_log_probs=lp,
        policy_loss=torch.tensor(0.3),
        experience=experience,
        loss_config=None,
        microbatch_weight=0.25,
        grad_sum_correction_factor=1.0,
        aux_policy_loss_context=ctx,
        echo_config=cfg,
    )
    assert aux is not None and aux.requires_grad
    assert metrics["echo/policy_loss"].item() == pytest.approx(0.3)  # SkyRL's policy loss, logged on its own
    assert metrics["echo/world_loss"].item() == pytest.approx(aux.item())
    # a rollout whose reference world_loss_mask was zeroed (the reference's filter) has no world term
    filtered = dict(extras, world_loss_mask=extras["world_loss_mask"].clone())
    filtered["world_loss_mask"][0] = 0
    _, fm = compute_aux_policy_loss(
        action_log_probs=lp,
        policy_loss=torch.tensor(0.3),
        experience=SimpleNamespace(extras=filtered),
        aux_policy_loss_context=ctx,
        echo_config=cfg,
    )
    assert fm["echo/rollouts/env_kept"].item() == metrics["echo/rollouts/env_kept"].item() - 1
    none, _ = compute_aux_policy_loss(
        action_log_probs=lp,
        policy_loss=torch.tensor(0.3),
        experience=experience,
        aux_policy_loss_context=ctx,
        echo_config=EchoConfig(),
    )
    assert none is None  # λ = 0: nothing is added to SkyRL's loss
    with pytest.raises(KeyError, match="world_role_id"):
        compute_aux_policy_loss(
            action_log_probs=lp, policy_loss=torch.tensor(0.3), experience=SimpleNamespace(extras={}), echo_config=cfg
        )


def test_temperature_and_shape_errors() -> None:
    cfg = EchoConfig(world_model_coeff=LAM)
    lp, m = torch.zeros(2, 3), torch.tensor([[1, 2, 2], [1, 3, 2]])
    with pytest.raises(ValueError, match="temperature"):
        compute_world_loss(lp, m, cfg, logprobs_temperature=0.8)
    assert (
        compute_world_loss(
            lp, m, EchoConfig(world_model_coeff=LAM, env_temperature="rollout"), logprobs_temperature=0.8
        )[0]
        is not None
    )
    with pytest.raises(ValueError, match="response_len"):
        compute_world_loss(lp, torch.ones(2, 4, dtype=torch.long), cfg)
    with pytest.raises(ValueError, match="role_ids has codes"):
        compute_world_loss(lp, m + 5, cfg)
    with pytest.raises(KeyError):
        get_aux_policy_loss_context({}, cfg)


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

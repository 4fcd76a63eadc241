"""Analytic properties of the ECHO loss (pitfalls P1-P8, P14, P16-P18 of echo-anchors.md)."""

from __future__ import annotations

import itertools

import pytest
import torch

from openenv_echo.objective import (
    EchoBatch,
    EchoConfig,
    PolicyLossConfig,
    echo_loss,
    group_advantages,
    local_denominators,
    token_logps,
)

from .helpers import A, C, E, P, W, roles, sample_role_ids

LAM = 0.3
METRIC_KEYS = {  # env_only, the core's own policy term
    "echo/loss",
    "echo/policy_loss",
    "echo/world_loss",
    "echo/world_loss_unscaled",
    "echo/world_model_coeff",
    "echo/env_ce_per_token",
    "echo/ce_per_token/env_output",
    "echo/tokens/context",
    "echo/tokens/action",
    "echo/tokens/env_output",
    "echo/tokens/warning",
    "echo/tokens/selected",
    "echo/tokens/policy",
    "echo/rollouts/total",
    "echo/rollouts/env_kept",
    "echo/rollouts/verifier_free",
    "echo/length/policy_tokens",
    "echo/length/world_tokens",
    "echo/length/turns",
    "policy/clip_fraction",
    "policy/ratio_mean",
    "policy/kl",
}


def world_loss(lp: torch.Tensor, batch: EchoBatch, cfg: EchoConfig) -> torch.Tensor:
    """λ·L_world alone: the seam with a trainer-owned (zero) policy loss."""
    return echo_loss(lp, batch, cfg, policy_loss=torch.zeros((), dtype=lp.dtype)).world_loss


def policy_loss(lp: torch.Tensor, batch: EchoBatch, cfg: EchoConfig) -> torch.Tensor:
    """The core policy term alone (the seam at λ = 0)."""
    return echo_loss(lp, batch, cfg.model_copy(update={"world_model_coeff": 0.0})).policy_loss


def _assert_const(values: torch.Tensor, expected: float | torch.Tensor) -> None:
    """Every value equals the analytic constant (to float64 rounding: λ·(c/D) vs λ·c/D differ in the last ulp)."""
    expected = float(expected)
    assert values.numel() > 0
    assert values.ne(0).all()
    torch.testing.assert_close(values, torch.full_like(values, expected), rtol=1e-12, atol=0)


def _logps(shape: tuple[int, int], seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (-torch.rand(shape, generator=g, dtype=torch.float64) * 4 - 0.1).requires_grad_(True)


def _expected_selection(rid: torch.Tensor, target_roles: set[int]) -> list[list[bool]]:
    """Independent re-derivation: targets of the given roles, after the first action, never a row's first token."""
    out = []
    for row in rid.tolist():
        first_real = next(i for i, r in enumerate(row) if r != P)
        seen_action, sel = False, []
        for i, r in enumerate(row):
            sel.append(r in target_roles and seen_action and i != first_real)
            if r == A:
                seen_action = True
        out.append(sel)
    return out


NORMALIZATIONS = [
    ("token_mean", "selected", None),
    ("sequence_mean", "selected", None),
    ("sequence_mean", "full_observation", None),
    ("constant", "selected", 16),
]


@pytest.mark.parametrize("norm, seq_den, const", NORMALIZATIONS)
@pytest.mark.parametrize("target, coeffs", [("env_only", {}), ("warning_plus_env", {"warning": 0.5})])
def test_env_gradient_is_the_analytic_constant(
    norm: str, seq_den: str, const: int | None, target: str, coeffs: dict
) -> None:
    rid = sample_role_ids()
    cfg = EchoConfig(
        world_model_coeff=LAM,
        world_loss_target=target,
        role_coeffs=coeffs,
        normalization=norm,
        sequence_denominator=seq_den,
        constant_denominator=const,
    )
    target_roles = {E} if target == "env_only" else {E, W}
    sel = _expected_selection(rid, target_roles)
    c_of = {E: 1.0, W: coeffs.get("warning", 1.0)}
    n_rows = 4
    n_sel = sum(map(sum, sel))
    # |O_i|: env+warning bodies after the first action (never the first token)
    obs = [sum(s) for s in _expected_selection(rid, {E, W})]

    lp = _logps(rid.shape)
    adv = torch.tensor([1.0, -0.5, 0.25, 2.0], dtype=torch.float64)
    out = echo_loss(lp, EchoBatch(rid, advantages=adv), cfg)
    out.loss.backward()
    assert lp.grad is not None
    for i, j in itertools.product(range(rid.shape[0]), range(rid.shape[1])):
        r = int(rid[i, j])
        if sel[i][j]:
            c = c_of[r]
            if norm == "token_mean":
                w = c / n_sel
            elif norm == "sequence_mean":
                w = c / ((sum(sel[i]) if seq_den == "selected" else obs[i]) * n_rows)
            else:
                w = c / (n_rows * const)
            assert lp.grad[i, j].item() == pytest.approx(-LAM * w, rel=1e-12, abs=0), (i, j)
        elif r != A:
            assert lp.grad[i, j].item() == 0.0, (i, j)


def test_world_loss_value_token_mean_is_lambda_times_mean_ce() -> None:
    rid = sample_role_ids()
    lp = _logps(rid.shape)
    cfg = EchoConfig(world_model_coeff=LAM)
    sel = torch.tensor(_expected_selection(rid, {E}))
    expected = LAM * (-lp.detach()[sel]).mean()
    assert world_loss(lp, EchoBatch(rid), cfg).item() == pytest.approx(expected.item(), rel=1e-12)
    out = echo_loss(lp, EchoBatch(rid, advantages=torch.zeros(4, dtype=torch.float64)), cfg)
    assert out.metrics["echo/env_ce_per_token"].item() == pytest.approx((-lp.detach()[sel]).mean().item(), rel=1e-6)
    assert out.metrics["echo/world_loss"].item() == pytest.approx(expected.item(), rel=1e-6)


def test_paper_normalization_hand_value() -> None:
    # SLIME's hand-derived value: CE 0.5 on 2 selected of |O| = 4 tokens at λ = 0.05 gives 0.0125
    rid = roles([C, A, W, W, E, E])
    lp = torch.full(rid.shape, -0.5, dtype=torch.float64, requires_grad=True)
    cfg = EchoConfig(world_model_coeff=0.05, normalization="sequence_mean", sequence_denominator="full_observation")
    assert world_loss(lp, EchoBatch(rid), cfg).item() == pytest.approx(0.0125, rel=1e-12)


def _relabel_env_as_context(rid: torch.Tensor) -> torch.Tensor:
    return torch.where((rid == E) | (rid == W), torch.full_like(rid, C), rid)


@pytest.mark.parametrize("pnorm", ["token_mean", "sequence_mean", "constant"])
@pytest.mark.parametrize("kl", [0.0, 0.1])
def test_coeff_zero_is_bit_identical_to_vanilla(pnorm: str, kl: float) -> None:
    rid = sample_role_ids()
    pcfg = PolicyLossConfig(normalization=pnorm, constant_denominator=16, kl_coeff=kl, clip_eps_high=0.28)
    g = torch.Generator().manual_seed(3)
    adv = torch.randn(4, generator=g, dtype=torch.float64)
    old = torch.randn(rid.shape, generator=g, dtype=torch.float64) * 0.1 - 2
    ref = torch.randn(rid.shape, generator=g, dtype=torch.float64) * 0.1 - 2

    def run(role_ids: torch.Tensor, echo: bool) -> tuple[torch.Tensor, torch.Tensor]:
        lp = _logps(rid.shape, seed=5)
        batch = EchoBatch(role_ids, advantages=adv, old_logps=old, ref_logps=ref)
        if echo:
            out = echo_loss(lp, batch, EchoConfig(world_model_coeff=0.0, policy=pcfg))
            assert out.loss is out.policy_loss  # λ = 0 adds nothing to the graph
            loss = out.loss
        else:
            loss = policy_loss(lp, batch, EchoConfig(policy=pcfg))
        loss.backward()
        return loss.detach(), lp.grad

    with_env = run(rid, echo=True)
    vanilla_same_batch = run(rid, echo=False)
    vanilla_no_env = run(_relabel_env_as_context(rid), echo=False)
    for other in (vanilla_same_batch, vanilla_no_env):
        assert torch.equal(with_env[0], other[0])
        assert torch.equal(with_env[1], other[1])


def test_verifier_free_batch_is_pure_env_ce() -> None:
    rid = sample_role_ids()
    sel = torch.tensor(_expected_selection(rid, {E}))
    lp = _logps(rid.shape)
    out = echo_loss(lp, EchoBatch(rid), EchoConfig(world_model_coeff=1.0, verifier_free=True))
    ce = (-lp.detach()[sel]).mean()
    assert out.loss.item() == pytest.approx(ce.item(), rel=1e-12)
    assert out.policy_loss.item() == 0.0
    out.loss.backward()
    assert (lp.grad[rid == A] == 0).all()
    _assert_const(lp.grad[sel], -1.0 / int(sel.sum()))
    # λ scales the pure CE
    lp2 = _logps(rid.shape)
    out2 = echo_loss(lp2, EchoBatch(rid), EchoConfig(world_model_coeff=0.5, verifier_free=True))
    assert out2.loss.item() == pytest.approx(0.5 * ce.item(), rel=1e-12)


def test_per_rollout_verifier_free_rows_get_only_the_env_term() -> None:
    rid = sample_role_ids()
    vf = torch.tensor([False, True, False, False])
    lp = _logps(rid.shape)
    batch = EchoBatch(rid, advantages=torch.ones(4, dtype=torch.float64), verifier_free=vf)
    cfg = EchoConfig(world_model_coeff=LAM)
    echo_loss(lp, batch, cfg).loss.backward()
    assert (lp.grad[1][rid[1] == A] == 0).all()
    assert (lp.grad[0][rid[0] == A] != 0).all()
    assert (lp.grad[1][rid[1] == E] != 0).all()
    dens = local_denominators(batch, cfg)
    n_action_other_rows = int(((rid == A) & ~vf.unsqueeze(1)).sum())
    assert dens.policy_tokens == n_action_other_rows  # verifier-free rows leave the policy denominator
    assert dens.policy_sequences == 3
    # verifier-free rows may have no advantages at all when every row is verifier-free
    out = echo_loss(lp.detach().requires_grad_(), EchoBatch(rid, verifier_free=torch.ones(4, dtype=torch.bool)), cfg)
    assert out.policy_loss.item() == 0.0


def test_advantages_missing_is_a_clear_error() -> None:
    rid = sample_role_ids()
    with pytest.raises(ValueError, match="advantages"):
        echo_loss(_logps(rid.shape), EchoBatch(rid), EchoConfig(world_model_coeff=LAM))


@pytest.mark.parametrize("garbage", [0.0, float("-inf"), float("nan"), 50.0])
def test_placeholders_on_env_positions_never_touch_the_env_gradient(garbage: float) -> None:
    # P3/P22: sampler log-probs of non-sampled tokens are placeholders; ratio/clip/KL must never see them
    rid = sample_role_ids()
    env = rid != A
    old = torch.where(
        env, torch.full(rid.shape, garbage, dtype=torch.float64), torch.full(rid.shape, -1.0, dtype=torch.float64)
    )
    ref = old.clone()
    cfg = EchoConfig(world_model_coeff=LAM, policy=PolicyLossConfig(kl_coeff=0.2))
    lp = _logps(rid.shape)
    lp.data[:, 0] = float("nan")  # token-0 placeholder (P4)
    out = echo_loss(
        lp, EchoBatch(rid, advantages=torch.ones(4, dtype=torch.float64), old_logps=old, ref_logps=ref), cfg
    )
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert torch.isfinite(lp.grad).all()
    sel = torch.tensor(_expected_selection(rid, {E}))
    _assert_const(lp.grad[sel], -LAM / int(sel.sum()))  # P2: non-zero and exactly -λ/N


def test_clipping_never_masks_env_tokens() -> None:
    # old log-probs far from the current ones: every action token is clipped, env tokens still train at λ/N
    rid = sample_role_ids()
    lp = _logps(rid.shape)
    old = lp.detach() - 5.0
    out = echo_loss(
        lp,
        EchoBatch(rid, advantages=torch.ones(4, dtype=torch.float64), old_logps=old),
        EchoConfig(world_model_coeff=LAM),
    )
    out.loss.backward()
    assert lp.grad[rid == A].abs().max() == 0  # clipped: no policy gradient
    assert out.metrics["policy/clip_fraction"].item() == 1.0
    sel = torch.tensor(_expected_selection(rid, {E}))
    _assert_const(lp.grad[sel], -LAM / int(sel.sum()))


def test_advantage_scaling_never_touches_the_env_weight() -> None:
    rid = sample_role_ids()
    grads = []
    for scale in (1.0, 100.0, 0.0):
        lp = _logps(rid.shape)
        adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64) * scale
        echo_loss(lp, EchoBatch(rid, advantages=adv), EchoConfig(world_model_coeff=LAM)).loss.backward()
        grads.append(lp.grad[rid == E])
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[0], grads[2])


def test_zero_variance_group_still_contributes_env_ce() -> None:
    rid = sample_role_ids()
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0], dtype=torch.float64)  # one group, identical rewards
    adv = group_advantages(rewards, 4)
    assert adv.eq(0).all()
    lp = _logps(rid.shape)
    out = echo_loss(lp, EchoBatch(rid, advantages=adv), EchoConfig(world_model_coeff=LAM))
    out.loss.backward()
    sel = torch.tensor(_expected_selection(rid, {E}))
    _assert_const(lp.grad[sel], -LAM / int(sel.sum()))
    assert lp.grad[rid == A].eq(0).all()
    assert out.world_loss.item() > 0


def test_empty_selection_is_a_connected_zero_with_the_same_metric_keys() -> None:
    rid = roles([C, C, A, A, A], [C, A, A, C, A])  # no observation tokens at all
    lp = _logps(rid.shape)
    out = echo_loss(
        lp, EchoBatch(rid, advantages=torch.tensor([1.0, -1.0], dtype=torch.float64)), EchoConfig(world_model_coeff=LAM)
    )
    assert out.world_loss.item() == 0.0 and out.world_loss.requires_grad
    out.loss.backward()
    assert set(out.metrics) == METRIC_KEYS
    assert out.metrics["echo/tokens/selected"].item() == 0.0
    assert out.metrics["echo/env_ce_per_token"].isnan()  # no target: no data, not a perfect score
    assert out.metrics["echo/ce_per_token/env_output"].isnan()
    # a verifier-free batch with no env tokens: the whole loss is a connected zero and backward still runs
    lp2 = _logps(rid.shape)
    out2 = echo_loss(lp2, EchoBatch(rid), EchoConfig(world_model_coeff=LAM, verifier_free=True))
    assert out2.loss.item() == 0.0 and out2.loss.requires_grad
    out2.loss.backward()
    assert lp2.grad.eq(0).all()


def test_metric_keys_identical_with_and_without_env_tokens_and_coeff() -> None:
    batches = [sample_role_ids(), roles([C, A, A])]
    for rid, lam in itertools.product(batches, (0.0, LAM)):
        out = echo_loss(
            _logps(rid.shape),
            EchoBatch(rid, advantages=torch.ones(rid.shape[0], dtype=torch.float64)),
            EchoConfig(world_model_coeff=lam),
        )
        assert set(out.metrics) == METRIC_KEYS
        assert all(v.dim() == 0 and not v.requires_grad for v in out.metrics.values())


def test_metric_keys_do_not_depend_on_advantages_of_verifier_free_rows() -> None:
    # RFC 0004 §6: the key set depends on the configuration and on who owns the policy loss, never on the batch
    rid = sample_role_ids()
    vf = torch.ones(rid.shape[0], dtype=torch.bool)
    adv = torch.ones(rid.shape[0], dtype=torch.float64)
    cfg = EchoConfig(world_model_coeff=LAM)
    without = echo_loss(_logps(rid.shape), EchoBatch(rid, verifier_free=vf), cfg).metrics
    with_adv = echo_loss(_logps(rid.shape), EchoBatch(rid, verifier_free=vf, advantages=adv), cfg).metrics
    assert set(without) == set(with_adv) == METRIC_KEYS
    for m in (without, with_adv):  # no action target: a mean over zero tokens is NaN, not 0
        assert all(m[k].isnan() for k in ("policy/clip_fraction", "policy/ratio_mean", "policy/kl"))


def test_metrics_count_roles_and_ce_per_role() -> None:
    rid = roles([C, A, W, E, E, A])
    lp = torch.tensor([[0.0, -1.0, -2.0, -3.0, -5.0, -1.0]], dtype=torch.float64, requires_grad=True)
    cfg = EchoConfig(world_model_coeff=0.5, world_loss_target="warning_plus_env")
    out = echo_loss(lp, EchoBatch(rid, advantages=torch.ones(1, dtype=torch.float64)), cfg)
    m = out.metrics_as_floats()
    assert m["echo/tokens/action"] == 2 and m["echo/tokens/env_output"] == 2 and m["echo/tokens/warning"] == 1
    assert m["echo/tokens/context"] == 0  # the first token is never a target
    assert m["echo/ce_per_token/env_output"] == pytest.approx(4.0)
    assert m["echo/ce_per_token/warning"] == pytest.approx(2.0)
    assert m["echo/env_ce_per_token"] == pytest.approx(10.0 / 3)
    assert m["echo/world_loss"] == pytest.approx(0.5 * 10.0 / 3)
    assert "echo/ce_per_token/context" not in m and "echo/world_policy_loss_ratio" not in m  # not selected: absent
    assert m["echo/length/policy_tokens"] == 2 and m["echo/length/turns"] == 2 and m["echo/length/world_tokens"] == 3


def test_coeff_zero_still_reports_env_ce() -> None:
    rid = sample_role_ids()
    out = echo_loss(_logps(rid.shape), EchoBatch(rid, advantages=torch.ones(4, dtype=torch.float64)), EchoConfig())
    assert out.metrics["echo/env_ce_per_token"].item() > 0
    assert out.metrics["echo/world_loss"].item() == 0.0


def test_schedule_step_changes_lambda() -> None:
    from openenv_echo.objective import CoeffSchedule

    rid = sample_role_ids()
    cfg = EchoConfig(world_model_coeff=0.2, schedule=CoeffSchedule(kind="step", boundaries=[3], values=[0.0]))
    batch = EchoBatch(rid, advantages=torch.ones(4, dtype=torch.float64))
    lp = _logps(rid.shape)
    assert echo_loss(lp, batch, cfg, step=0).metrics["echo/world_model_coeff"].item() == pytest.approx(0.2)
    late = echo_loss(lp, batch, cfg, step=3)
    assert late.metrics["echo/world_model_coeff"].item() == 0.0
    assert torch.equal(late.loss, policy_loss(lp, batch, cfg))


def test_env_logps_drive_only_the_world_term() -> None:
    # P18: a T=1 world CE next to a rollout-temperature policy term, from the same logits
    torch.manual_seed(0)
    rid = sample_role_ids()
    ids = torch.randint(1, 20, rid.shape)
    logits = torch.randn(*rid.shape, 20, dtype=torch.float64, requires_grad=True)
    lp_policy = token_logps(logits, ids, temperature=0.7)
    lp_env = token_logps(logits, ids, temperature=1.0)
    cfg = EchoConfig(world_model_coeff=1.0, verifier_free=True)
    out = echo_loss(lp_policy, EchoBatch(rid), cfg, env_logps=lp_env)
    sel = torch.tensor(_expected_selection(rid, {E}))
    assert out.loss.item() == pytest.approx((-lp_env.detach()[sel]).mean().item(), rel=1e-12)
    with pytest.raises(ValueError, match="env_logps"):
        echo_loss(lp_policy, EchoBatch(rid), cfg, env_logps=lp_env[:, :3])


def test_token_logps_alignment_and_temperature() -> None:
    torch.manual_seed(0)
    ids = torch.randint(0, 11, (2, 5))
    logits = torch.randn(2, 5, 11, dtype=torch.float64)
    lp = token_logps(logits, ids, temperature=2.0)
    ref = torch.log_softmax(logits / 2.0, dim=-1)
    assert lp[:, 0].eq(0).all()
    for b, t in itertools.product(range(2), range(1, 5)):
        assert lp[b, t].item() == pytest.approx(ref[b, t - 1, ids[b, t]].item(), rel=1e-12)
    with pytest.raises(ValueError):
        token_logps(logits, ids[:, :3])
    with pytest.raises(ValueError):
        token_logps(logits, ids, temperature=0.0)


def test_logps_shape_mismatch_is_a_clear_error() -> None:
    rid = sample_role_ids()
    with pytest.raises(ValueError, match="logps shape"):
        echo_loss(_logps((4, 3)), EchoBatch(rid, advantages=torch.ones(4)), EchoConfig())


def test_kl_needs_ref_logps() -> None:
    rid = sample_role_ids()
    cfg = EchoConfig(policy=PolicyLossConfig(kl_coeff=0.1))
    with pytest.raises(ValueError, match="ref_logps"):
        echo_loss(_logps(rid.shape), EchoBatch(rid, advantages=torch.ones(4)), cfg)


def test_kl_is_zero_at_the_reference_and_positive_elsewhere() -> None:
    rid = sample_role_ids()
    lp = _logps(rid.shape)
    cfg = EchoConfig(policy=PolicyLossConfig(kl_coeff=0.1))
    at_ref = echo_loss(lp, EchoBatch(rid, advantages=torch.zeros(4), ref_logps=lp.detach()), cfg)
    assert at_ref.metrics["policy/kl"].item() == 0.0
    away = echo_loss(lp, EchoBatch(rid, advantages=torch.zeros(4), ref_logps=lp.detach() - 0.5), cfg)
    assert away.metrics["policy/kl"].item() > 0

"""Tinker adapter, offline up to the network call: real ``Datum`` objects, the SDK's own custom-loss tracing and
client-side linearisation, checked token by token."""

from __future__ import annotations

import inspect
import math
import random
from typing import Any

import numpy as np
import pytest
import tinker
import torch
from tinker import types
from tinker.lib.public_interfaces.custom_loss import check_loss_inputs, run_loss_handle, trace_loss

from openenv_echo.adapters.tinker import (
    CUSTOM_INPUT_RANKS,
    build_custom_datums,
    build_datums,
    datums_from_tokenized,
    echo_custom_loss,
    echo_datum_loss,
    echo_step,
    for_mean_per_datum,
)
from openenv_echo.envs.echo.environment import EchoEnvironment
from openenv_echo.envs.echo.models import EchoAction
from openenv_echo.objective import Denominators, EchoBatch, EchoConfig, local_denominators
from openenv_echo.roles import Role
from openenv_echo.tokenization import TitoBuilder, TokenizedTrajectory

LAM = 0.05
ENV = Role.ENV_OUTPUT.code
ACT = Role.ACTION.code


def _episodes(tok: Any, n: int = 4, seed: int = 0) -> list[TokenizedTrajectory]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        env = EchoEnvironment()
        b = TitoBuilder(tok, observation_role="tool")
        b.start([{"role": "user", "content": "Talk to the echo server."}], env.reset(seed=0))
        for _ in range(rng.randint(1, 3)):
            msg = rng.choice(["ls", "hello world", "cat notes.txt", ""])
            b.add_action(text=msg)
            b.add_observation(env.step(EchoAction(message=msg)))
        b.add_action(text="bye")
        out.append(b.finish())
    return out


def _sampler_logprobs(items: list[TokenizedTrajectory], seed: int = 1) -> list[np.ndarray]:
    g = np.random.default_rng(seed)
    return [np.where(it.role_ids == ACT, -g.uniform(0.1, 3.0, len(it.role_ids)), 0.0) for it in items]


@pytest.fixture
def episodes(qwen_tokenizer: Any) -> list[TokenizedTrajectory]:
    return _episodes(qwen_tokenizer)


def _n_env_targets(items: list[TokenizedTrajectory]) -> int:
    return sum(int((it.role_ids[1:] == ENV).sum()) for it in items)


def test_env_datums_carry_lambda_over_n_on_env_targets_only(episodes: list[TokenizedTrajectory]) -> None:
    ids, roles, obs = datums_from_tokenized(episodes)
    adv = [1.0, -1.0, 0.5, -0.5]
    out = build_datums(ids, roles, adv, _sampler_logprobs(episodes), EchoConfig(world_model_coeff=LAM), obs_count=obs)
    n_env = _n_env_targets(episodes)
    with_env = [i for i, it in enumerate(episodes) if (it.role_ids[1:] == ENV).any()]
    assert n_env > 0 and out.env_rows == with_env and len(out.rl) == len(episodes)
    assert len(with_env) < len(episodes)  # an episode with only warnings gets no env datum
    for d, it in zip(out.env, [episodes[i] for i in out.env_rows], strict=True):
        assert isinstance(d, types.Datum)
        assert d.model_input.length == len(it.input_ids) - 1
        tt = d.loss_fn_inputs["target_tokens"]
        assert tt.dtype == "int64" and tt.to_numpy().tolist() == it.input_ids[1:].tolist()
        w = d.loss_fn_inputs["weights"]
        assert w.dtype == "float32" and w.shape == [len(it.input_ids) - 1]
        target_roles = it.role_ids[1:]
        for t, (weight, role) in enumerate(zip(w.to_numpy(), target_roles, strict=True)):  # token by token
            expected = np.float32(LAM / n_env) if role == ENV else np.float32(0.0)
            assert weight == expected, (t, role, weight)
    assert out.metrics["echo/tokens/selected"] == n_env


def test_policy_datums_scale_advantages_and_never_touch_env_tokens(episodes: list[TokenizedTrajectory]) -> None:
    ids, roles, _ = datums_from_tokenized(episodes)
    adv = [1.0, -1.0, 0.5, -0.5]
    lps = _sampler_logprobs(episodes)
    out = build_datums(ids, roles, adv, lps, EchoConfig(world_model_coeff=LAM))
    n_act = sum(int((it.role_ids[1:] == ACT).sum()) for it in episodes)
    for d, it, a, lp in zip(out.rl, episodes, adv, lps, strict=True):
        target_roles = it.role_ids[1:]
        got_adv = d.loss_fn_inputs["advantages"].to_numpy()
        got_lp = d.loss_fn_inputs["logprobs"].to_numpy()
        for t, role in enumerate(target_roles):
            if role == ACT:
                assert got_adv[t] == np.float32(a / n_act)  # token_mean policy normalization folded in
                assert got_lp[t] == np.float32(lp[t + 1])
            else:
                assert got_adv[t] == 0.0 and got_lp[t] == 0.0


def test_sequence_mean_full_observation_weights(episodes: list[TokenizedTrajectory]) -> None:
    ids, roles, obs = datums_from_tokenized(episodes)
    cfg = EchoConfig(world_model_coeff=LAM, normalization="sequence_mean", sequence_denominator="full_observation")
    out = build_datums(ids, roles, None, None, cfg, obs_count=obs, verifier_free=[True] * 4)
    assert out.rl == []  # verifier-free: no policy datums at all
    with_env = [i for i, it in enumerate(episodes) if (it.role_ids[1:] == ENV).any()]
    assert with_env and out.env_rows == with_env  # a datum for exactly the episodes with env targets
    for d, it in zip(out.env, [episodes[i] for i in out.env_rows], strict=True):
        w = d.loss_fn_inputs["weights"].to_numpy()
        expected = np.float32(LAM / (it.obs_count * len(episodes)))
        assert (w[it.role_ids[1:] == ENV] == expected).all()
        assert (w[it.role_ids[1:] != ENV] == 0).all()


def test_split_batches_with_global_denominators_match_one_call(episodes: list[TokenizedTrajectory]) -> None:
    ids, roles, _ = datums_from_tokenized(episodes)
    adv = [1.0, -1.0, 0.5, -0.5]
    lps = _sampler_logprobs(episodes)
    cfg = EchoConfig(world_model_coeff=LAM)
    whole = build_datums(ids, roles, adv, lps, cfg)
    parts = [slice(0, 1), slice(1, 4)]
    dens = Denominators.total(local_denominators(EchoBatch(_pad(roles[p])), cfg) for p in parts)
    split = [build_datums(ids[p], roles[p], adv[p], lps[p], cfg, denominators=dens) for p in parts]
    env = [d for s in split for d in s.env]
    rl = [d for s in split for d in s.rl]
    assert whole.env and whole.rl  # both sides have datums to compare
    for a, b in zip(whole.env, env, strict=True):
        assert np.array_equal(a.loss_fn_inputs["weights"].to_numpy(), b.loss_fn_inputs["weights"].to_numpy())
    for a, b in zip(whole.rl, rl, strict=True):
        assert np.array_equal(a.loss_fn_inputs["advantages"].to_numpy(), b.loss_fn_inputs["advantages"].to_numpy())


def _pad(rows: list[list[int]]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [-1] * (width - len(r)) for r in rows])


def _forward_output(logprobs: list[torch.Tensor]) -> types.ForwardBackwardOutput:
    return types.ForwardBackwardOutput(
        loss_fn_output_type="offline",
        loss_fn_outputs=[{"logprobs": types.TensorData.from_torch(lp)} for lp in logprobs],
    )


@pytest.mark.parametrize("lam", [0.0, LAM])
def test_custom_loss_sends_exact_env_weights_through_the_sdk(episodes: list[TokenizedTrajectory], lam: float) -> None:
    ids, roles, _ = datums_from_tokenized(episodes)
    adv = [1.0, -1.0, 0.5, -0.5]
    lps = _sampler_logprobs(episodes)
    data = build_custom_datums(ids, roles, adv, lps, EchoConfig(world_model_coeff=lam))
    handle = trace_loss(echo_datum_loss, CUSTOM_INPUT_RANKS, session_id="offline")  # the SDK's tracer
    check_loss_inputs(handle, data)
    g = torch.Generator().manual_seed(3)
    current = [torch.as_tensor(-torch.rand(len(i) - 1, generator=g) * 5) for i in ids]  # env log-probs of -0..-5
    n_env, n_act = _n_env_targets(episodes), sum(int((it.role_ids[1:] == ACT).sum()) for it in episodes)
    for loss_fn in (handle, echo_custom_loss):  # traced handle and plain callable: same linearisation
        result = tinker.TrainingClient._compute_custom_loss(data, loss_fn, _forward_output(current))
        for lin, it, lp_cur, lp_samp, a in zip(result.data, episodes, current, lps, adv, strict=True):
            w = lin.loss_fn_inputs["weights"].to_numpy()
            target_roles = it.role_ids[1:]
            for t, role in enumerate(target_roles):
                if role == ENV:  # exactly λ/N, whatever the current log-prob (no λ·p trap)
                    assert w[t] == pytest.approx(lam / n_env, rel=1e-6, abs=0)
                elif role == ACT:  # importance-sampling gradient: exp(ℓ - q)·A/N
                    expected = math.exp(float(lp_cur[t]) - float(lp_samp[t + 1])) * a / n_act
                    assert w[t] == pytest.approx(expected, rel=1e-5)
                else:
                    assert w[t] == 0.0
    _loss, metrics = run_loss_handle(handle, data, [c.clone().requires_grad_() for c in current])
    assert set(metrics) == {"custom/policy_loss:sum", "custom/world_loss:sum"}


def test_constant_advantage_importance_sampling_trap_is_what_we_avoid(episodes: list[TokenizedTrajectory]) -> None:
    """The RFC-010 recipe (advantage λ on env tokens, sampler log-prob 0.0, importance_sampling) trains each env
    token at λ·p; the adapter's cross_entropy env datums train it at exactly λ/N."""
    lam, lp_env = 0.05, torch.tensor([-2.0, -4.0, -6.0], requires_grad=True)
    trap = -(torch.exp(lp_env - 0.0) * lam).sum()  # importance_sampling with q = 0 placeholders
    trap.backward()
    assert torch.allclose(-lp_env.grad, lam * torch.exp(lp_env.detach()))  # 0.0068, 0.0009, 0.0001
    ours = echo_datum_loss(lp_env.detach().requires_grad_(), torch.zeros(3), torch.zeros(3), torch.full((3,), lam))[0]
    lp = lp_env.detach().requires_grad_()
    echo_datum_loss(lp, torch.zeros(3), torch.zeros(3), torch.full((3,), lam))[0].backward()
    assert torch.equal(-lp.grad, torch.full((3,), lam))
    assert torch.isfinite(ours)


class RecordingTrainingClient:
    """Stands at the network boundary: records what ``echo_step`` sends, in order, and answers like an APIFuture."""

    class _Done:
        def __init__(self, value: Any) -> None:
            self.value = value

        def result(self) -> Any:
            return self.value

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def forward_backward(self, data: list[types.Datum], loss_fn: str, loss_fn_config: Any = None) -> Any:
        self.calls.append(("forward_backward", loss_fn, len(data)))
        return self._Done(types.ForwardBackwardOutput(loss_fn_output_type="offline", loss_fn_outputs=[]))

    def optim_step(self, optim_params: Any = None) -> Any:
        self.calls.append(("optim_step", type(optim_params).__name__, 0))
        return self._Done(None)


def test_echo_step_sends_policy_then_env_then_one_optimizer_step(episodes: list[TokenizedTrajectory]) -> None:
    # the methods echo_step calls exist on the real TrainingClient with these parameters
    for name, params in (("forward_backward", ["data", "loss_fn", "loss_fn_config"]), ("optim_step", ["optim_params"])):
        sig = inspect.signature(getattr(tinker.TrainingClient, name))
        assert all(p in sig.parameters for p in params)
    ids, roles, _ = datums_from_tokenized(episodes)
    out = build_datums(
        ids, roles, [1.0, -1.0, 0.5, -0.5], _sampler_logprobs(episodes), EchoConfig(world_model_coeff=LAM)
    )
    client = RecordingTrainingClient()
    echo_step(client, out, types.AdamParams(learning_rate=1e-5), rl_loss_fn="ppo")
    assert client.calls == [
        ("forward_backward", "ppo", len(out.rl)),
        ("forward_backward", "cross_entropy", len(out.env)),
        ("optim_step", "AdamParams", 0),
    ]
    with pytest.raises(ValueError, match="policy loss"):
        echo_step(client, out, types.AdamParams(), rl_loss_fn="cross_entropy")
    vanilla = build_datums(ids, roles, [1.0, -1.0, 0.5, -0.5], _sampler_logprobs(episodes), EchoConfig())
    assert vanilla.env == []  # λ = 0: no env pass at all
    client = RecordingTrainingClient()
    echo_step(client, vanilla, types.AdamParams())
    assert [c[1] for c in client.calls] == ["importance_sampling", "AdamParams"]


def _applied_coefficients(
    sent: list[types.Datum], loss_fn: str, logprobs: list[np.ndarray], semantics: str, n_datums: int
) -> list[np.ndarray]:
    """-∂(the loss a server differentiates)/∂ℓ per target, at log-probs ``logprobs``: the coefficient each target's
    ``∇ℓ`` gets in the applied gradient. ``sum``: Tinker's documented per-token sums; ``mean_per_datum``: SkyRL 0.4's
    JAX backend (``Σ_t m·loss_t / Σ_t m`` per datum, then the mean over the step's datums), re-implemented here."""
    out = []
    for d, lp in zip(sent, logprobs, strict=True):
        inputs = {k: v.to_numpy().astype(np.float64) for k, v in d.loss_fn_inputs.items()}
        m = inputs.get("weights", np.ones_like(lp))
        if loss_fn == "cross_entropy":
            per_token = m  # loss_t = -m·ℓ
        else:  # importance_sampling: loss_t = -m·exp(ℓ - q)·a
            per_token = m * np.exp(lp - inputs["logprobs"]) * inputs["advantages"]
        if semantics == "mean_per_datum":
            per_token = per_token / max(float(m.sum()), 1e-9) / n_datums
        out.append(per_token)
    return out


@pytest.mark.parametrize("lam", [0.05, 1.0, 20.0])
def test_lambda_scales_the_applied_env_gradient_under_both_server_semantics(
    episodes: list[TokenizedTrajectory], lam: float
) -> None:
    ids, roles, obs = datums_from_tokenized(episodes)
    adv = [1.0, -1.0, 0.5, -0.5]
    sampled = _sampler_logprobs(episodes)
    out = build_datums(ids, roles, adv, sampled, EchoConfig(world_model_coeff=lam), obs_count=obs)
    unit = build_datums(ids, roles, adv, sampled, EchoConfig(world_model_coeff=1.0), obs_count=obs)
    g = np.random.default_rng(3)
    current = [-g.uniform(0.05, 4.0, len(i) - 1) for i in ids]  # the model's log-probs now (any values)
    env_lp = [current[r] for r in out.env_rows]
    rl_lp = [current[r] for r in out.rl_rows]
    # the reference: the RFC's coefficients, -∂L/∂ℓ = λ·w on env targets, A·u·exp(ℓ - q) on action targets
    ref_env = [lam * u.loss_fn_inputs["weights"].to_numpy() for u in unit.env]
    ref_rl = [
        d.loss_fn_inputs["advantages"].to_numpy() * np.exp(lp - d.loss_fn_inputs["logprobs"].to_numpy())
        for d, lp in zip(out.rl, rl_lp)
    ]
    # hosted Tinker (sum): the datums as built, cross_entropy for the env term
    n = len(out.rl) + len(out.env)
    for got, want in zip(_applied_coefficients(out.env, "cross_entropy", env_lp, "sum", n), ref_env, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
    # SkyRL's local server (mean_per_datum): the rescaled datums, env log-probs from a forward pass at ℓ
    sent = for_mean_per_datum(out, env_lp)
    assert len(sent.env) == len(out.env) and len(sent.rl) == len(out.rl)
    got_env = _applied_coefficients(sent.env, "importance_sampling", env_lp, "mean_per_datum", n)
    got_rl = _applied_coefficients(sent.rl, "importance_sampling", rl_lp, "mean_per_datum", n)
    for got, want in zip(got_env + got_rl, ref_env + ref_rl, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    # the naive datums on a mean_per_datum server: λ cancels (what SkyRL 0.4's server did to the old recipe)
    naive = _applied_coefficients(out.env, "cross_entropy", env_lp, "mean_per_datum", n)
    naive_unit = _applied_coefficients(unit.env, "cross_entropy", env_lp, "mean_per_datum", n)
    for a, b in zip(naive, naive_unit, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_mean_per_datum_step_reads_env_logprobs_with_a_forward_first(episodes: list[TokenizedTrajectory]) -> None:
    ids, roles, _ = datums_from_tokenized(episodes)
    out = build_datums(
        ids, roles, [1.0, -1.0, 0.5, -0.5], _sampler_logprobs(episodes), EchoConfig(world_model_coeff=LAM)
    )

    class Forwarding(RecordingTrainingClient):
        def forward(self, data: list[types.Datum], loss_fn: str) -> Any:
            self.calls.append(("forward", loss_fn, len(data)))
            outs = [{"logprobs": np.full(len(d.loss_fn_inputs["target_tokens"].tolist()), -1.5)} for d in data]
            return self._Done(type("Out", (), {"loss_fn_outputs": outs})())

    client = Forwarding()
    res = echo_step(client, out, types.AdamParams(), semantics="mean_per_datum")
    assert client.calls == [
        ("forward", "cross_entropy", len(out.env)),
        ("forward_backward", "importance_sampling", len(out.rl)),
        ("forward_backward", "importance_sampling", len(out.env)),
        ("optim_step", "AdamParams", 0),
    ]
    env0 = res["sent"].env[0].loss_fn_inputs
    assert set(env0) == {"target_tokens", "weights", "logprobs", "advantages"}
    on = env0["weights"].to_numpy() > 0
    assert np.all(env0["logprobs"].to_numpy()[on] == np.float32(-1.5))
    with pytest.raises(ValueError, match="importance_sampling"):
        echo_step(client, out, types.AdamParams(), rl_loss_fn="ppo", semantics="mean_per_datum")


def test_bad_inputs(episodes: list[TokenizedTrajectory]) -> None:
    ids, roles, _ = datums_from_tokenized(episodes)
    cfg = EchoConfig(world_model_coeff=LAM)
    with pytest.raises(ValueError, match="role rows"):
        build_datums(ids, roles[:2], None, None, cfg)
    with pytest.raises(ValueError, match="advantages are required"):
        build_datums(ids, roles, None, None, cfg)
    with pytest.raises(ValueError, match="sampling_logprobs are required"):
        build_datums(ids, roles, [1.0] * 4, None, cfg)
    with pytest.raises(ValueError, match="nothing to predict"):
        build_datums([[1]], [[0]], [1.0], None, cfg)
    with pytest.raises(ValueError, match="no sequences"):
        build_datums([], [], [], None, cfg)
    with pytest.raises(ValueError, match="one value per token"):
        build_datums(ids, roles, [1.0] * 4, [[0.0]] * 4, cfg)

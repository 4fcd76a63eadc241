"""Tinker adapter: real ``tinker.types.Datum`` objects for the policy term and the world-model term.

Tinker's built-in losses are per-token *sums* over ``loss_fn_inputs``, so all normalization is folded into the
per-token numbers here, computed by the same core code as every other trainer (global denominators included):

* **policy datums** (``importance_sampling``/``ppo``/...): ``advantages[t] = A_i · u_{i,t}`` on action targets and
  0 elsewhere, ``logprobs`` = the sampler's log-probs;
* **env datums** (``cross_entropy``): ``weights[t] = λ · w_{i,t}`` on the selected observation targets, 0 elsewhere.

``echo_step`` sends both ``forward_backward`` calls, then one ``optim_step`` (gradients accumulate; exact, one
extra forward/backward). That is exact on a server that differentiates per-token sums (hosted Tinker's documented
convention, ``semantics="sum"``). SkyRL 0.4's local Tinker-API server divides each datum's loss by the sum of its
``weights`` and averages over datums, which would cancel λ on the env datums; ``semantics="mean_per_datum"`` sends
datums rescaled for it (``for_mean_per_datum``), so the applied gradient is the same ``∇(L_policy + λ·L_world)``. ``echo_datum_loss`` is the same objective as one traced per-datum custom loss (for
``ServiceClient.create_custom_loss`` / ``forward_backward_custom``). Never put env tokens into the policy loss
with a constant advantage λ: with a placeholder sampler log-prob of 0.0, importance sampling trains them at
``λ · p`` instead of ``λ`` (and PPO clips them), see ``rfcs/0004-echo-objective.md``.

Alignment: tinker's ``model_input`` position i predicts ``target_tokens[i]``; a sequence ``ids`` becomes
``model_input = ids[:-1]``, ``target_tokens = ids[1:]``, and every per-token vector is shifted the same way, so
the first token is never a target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from tinker import types

from ...objective import Denominators, EchoBatch, EchoConfig, token_weights
from ...roles import PAD_ROLE_CODE

POLICY_LOSSES = frozenset({"importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce"})
"""Tinker loss functions accepted for the policy datums (never ``cross_entropy``: that is the env term's)."""
CUSTOM_INPUT_RANKS: dict[str, int] = {"logprobs": 1, "advantages": 1, "sampling_logprobs": 1, "env_weights": 1}
"""``input_ranks`` for ``ServiceClient.create_custom_loss(echo_datum_loss, CUSTOM_INPUT_RANKS)``."""


@dataclass
class EchoDatums:
    """Datums for one optimizer step: ``rl`` for the policy loss, ``env`` for ``cross_entropy``."""

    rl: list[types.Datum]
    env: list[types.Datum]
    rl_rows: list[int] = field(default_factory=list)
    env_rows: list[int] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class _Prepared:
    ids: list[list[int]]
    adv_tok: torch.Tensor  # (B, T) A·u, 0 off the action targets
    env_w: torch.Tensor  # (B, T) λ·w, 0 off the selection
    metrics: dict[str, float]


def _prepare(
    input_ids: Sequence[Sequence[int]],
    role_ids: Sequence[Sequence[int]],
    advantages: Sequence[float] | Sequence[Sequence[float]] | None,
    cfg: EchoConfig,
    step: int,
    denominators: Denominators | None,
    obs_count: Sequence[int] | None,
    verifier_free: Sequence[bool] | None,
    env_keep: Sequence[bool] | None,
) -> _Prepared:
    n = len(input_ids)
    if n == 0:
        raise ValueError("no sequences")
    if len(role_ids) != n:
        raise ValueError(f"{n} sequences but {len(role_ids)} role rows")
    ids = [[int(t) for t in row] for row in input_ids]
    for i, (a, r) in enumerate(zip(ids, role_ids)):
        if len(a) != len(r):
            raise ValueError(f"sequence {i}: {len(a)} ids but {len(r)} roles")
        if len(a) < 2:
            raise ValueError(f"sequence {i} has {len(a)} token(s): nothing to predict")
    width = max(len(a) for a in ids)
    rid = torch.full((n, width), PAD_ROLE_CODE, dtype=torch.long)
    for i, r in enumerate(role_ids):
        rid[i, : len(r)] = torch.as_tensor([int(x) for x in r], dtype=torch.long)
    adv = None
    if advantages is not None:
        if len(advantages) != n:
            raise ValueError(f"{n} sequences but {len(advantages)} advantages")
        if all(np.ndim(a) == 0 for a in advantages):
            adv = torch.as_tensor([float(np.asarray(a)) for a in advantages], dtype=torch.float64)
        else:
            adv = torch.zeros((n, width), dtype=torch.float64)
            for i, row_adv in enumerate(advantages):
                per_token = np.asarray(row_adv, dtype=np.float64).reshape(-1)
                if per_token.size != len(ids[i]):
                    raise ValueError(f"sequence {i}: per-token advantages must have one value per token")
                adv[i, : per_token.size] = torch.from_numpy(per_token)

    def vec(x: Sequence[Any] | None, name: str, dtype: torch.dtype) -> torch.Tensor | None:
        if x is None:
            return None
        if len(x) != n:
            raise ValueError(f"{name} must have one value per sequence")
        return torch.as_tensor(list(x), dtype=dtype)

    batch = EchoBatch(
        rid,
        advantages=adv,
        obs_count=vec(obs_count, "obs_count", torch.float64),
        verifier_free=vec(verifier_free, "verifier_free", torch.bool),
        env_keep=vec(env_keep, "env_keep", torch.bool),
    )
    tw = token_weights(batch, cfg, step=step, denominators=denominators)
    env_w = tw.world
    if tw.policy_mask.any():
        if adv is None:
            raise ValueError("advantages are required unless every sequence is verifier-free")
        adv_rows = adv.unsqueeze(1).expand_as(tw.policy) if adv.dim() == 1 else adv
        adv_tok = torch.where(tw.policy_mask, adv_rows * tw.policy, torch.zeros_like(tw.policy))
    else:
        adv_tok = torch.zeros_like(env_w)
    metrics = dict(tw.metrics)
    return _Prepared(ids, adv_tok, env_w, metrics)


def _shift(row: torch.Tensor, n: int) -> types.TensorData:
    """Per-token values of tokens 1..n-1 (the targets), as float32."""
    return _data(row[1:n].to(torch.float32).numpy().copy())


def _data(array: np.ndarray) -> types.TensorData:
    """A loss input as tinker's ``TensorData`` (what ``Datum`` would convert the array to itself)."""
    return types.TensorData.from_numpy(array)


def build_datums(
    input_ids: Sequence[Sequence[int]],
    role_ids: Sequence[Sequence[int]],
    advantages: Sequence[float] | Sequence[Sequence[float]] | None,
    sampling_logprobs: Sequence[Sequence[float]] | None,
    cfg: EchoConfig,
    *,
    step: int = 0,
    denominators: Denominators | None = None,
    obs_count: Sequence[int] | None = None,
    verifier_free: Sequence[bool] | None = None,
    env_keep: Sequence[bool] | None = None,
) -> EchoDatums:
    """Policy and env datums for sequences with per-token roles (e.g. ``TokenizedTrajectory`` rows).

    ``advantages``: one per sequence (GRPO) or one per token. ``sampling_logprobs[i][t]`` is the sampler's
    log-prob of token t (any value on non-sampled tokens: it is only read on action targets). ``denominators``:
    global counts when one optimizer step spans several ``build_datums`` calls (``sum`` of
    ``local_denominators`` of each part). Rows without a policy (or env) term get no datum of that kind.
    """
    p = _prepare(input_ids, role_ids, advantages, cfg, step, denominators, obs_count, verifier_free, env_keep)
    if sampling_logprobs is not None and len(sampling_logprobs) != len(p.ids):
        raise ValueError("sampling_logprobs must have one row per sequence")
    out = EchoDatums(rl=[], env=[], metrics=p.metrics)
    for i, ids in enumerate(p.ids):
        n = len(ids)
        model_input = types.ModelInput.from_ints(ids[:-1])
        targets = _data(np.asarray(ids[1:], dtype=np.int64))
        if p.adv_tok[i].any():
            if sampling_logprobs is None:
                raise ValueError("sampling_logprobs are required for the policy datums")
            lp = np.asarray(sampling_logprobs[i], dtype=np.float32).reshape(-1)
            if lp.size != n:
                raise ValueError(f"sequence {i}: sampling_logprobs must have one value per token")
            action = p.adv_tok[i, 1:n] != 0
            out.rl.append(
                types.Datum(
                    model_input=model_input,
                    loss_fn_inputs={
                        "target_tokens": targets,
                        "logprobs": _data(np.where(action.numpy(), lp[1:], 0.0).astype(np.float32)),
                        "advantages": _shift(p.adv_tok[i], n),
                    },
                )
            )
            out.rl_rows.append(i)
        if p.env_w[i].any():
            out.env.append(
                types.Datum(
                    model_input=model_input,
                    loss_fn_inputs={"target_tokens": targets, "weights": _shift(p.env_w[i], n)},
                )
            )
            out.env_rows.append(i)
    return out


def build_custom_datums(
    input_ids: Sequence[Sequence[int]],
    role_ids: Sequence[Sequence[int]],
    advantages: Sequence[float] | Sequence[Sequence[float]] | None,
    sampling_logprobs: Sequence[Sequence[float]],
    cfg: EchoConfig,
    *,
    step: int = 0,
    denominators: Denominators | None = None,
    obs_count: Sequence[int] | None = None,
    verifier_free: Sequence[bool] | None = None,
    env_keep: Sequence[bool] | None = None,
) -> list[types.Datum]:
    """One datum per sequence for ``echo_datum_loss``: ``target_tokens``, ``advantages`` (A·u),
    ``sampling_logprobs`` and ``env_weights`` (λ·w), all shifted to targets."""
    p = _prepare(input_ids, role_ids, advantages, cfg, step, denominators, obs_count, verifier_free, env_keep)
    if len(sampling_logprobs) != len(p.ids):
        raise ValueError("sampling_logprobs must have one row per sequence")
    out = []
    for i, ids in enumerate(p.ids):
        n = len(ids)
        lp = np.asarray(sampling_logprobs[i], dtype=np.float32).reshape(-1)
        if lp.size != n:
            raise ValueError(f"sequence {i}: sampling_logprobs must have one value per token")
        out.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={
                    "target_tokens": _data(np.asarray(ids[1:], dtype=np.int64)),
                    "advantages": _shift(p.adv_tok[i], n),
                    "sampling_logprobs": _data(lp[1:].copy()),
                    "env_weights": _shift(p.env_w[i], n),
                },
            )
        )
    return out


def echo_datum_loss(
    logprobs: torch.Tensor, advantages: torch.Tensor, sampling_logprobs: torch.Tensor, env_weights: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-datum ECHO loss (torch.fx-traceable): importance-sampled policy term + weighted env NLL.

    ``policy = -Σ exp(ℓ - q)·A`` only where ``A ≠ 0`` (the log-ratio is 0 elsewhere, so a placeholder sampler
    log-prob can never reach an ``exp``); ``world = -Σ env_weights·ℓ``, whose gradient is exactly
    ``-env_weights`` whatever ℓ is.
    """
    log_ratio = torch.where(advantages != 0, logprobs - sampling_logprobs, torch.zeros_like(logprobs))
    policy = -(torch.exp(log_ratio) * advantages).sum()
    world = -(env_weights * logprobs).sum()
    return policy + world, {"custom/policy_loss:sum": policy, "custom/world_loss:sum": world}


def echo_custom_loss(
    data: list[types.Datum], logprobs_list: list[torch.Tensor]
) -> tuple[torch.Tensor, dict[str, float]]:
    """``forward_backward_custom`` callable: ``echo_datum_loss`` summed over datums."""
    total: torch.Tensor | None = None
    sums = {"custom/policy_loss:sum": 0.0, "custom/world_loss:sum": 0.0}
    for datum, lp in zip(data, logprobs_list, strict=True):
        inputs = [
            datum.loss_fn_inputs[k].to_torch().to(lp.dtype) for k in ("advantages", "sampling_logprobs", "env_weights")
        ]
        loss, metrics = echo_datum_loss(lp, *inputs)
        total = loss if total is None else total + loss
        for k, v in metrics.items():
            sums[k] += float(v.detach())
    if total is None:
        raise ValueError("no datums")
    return total, sums


ServerSemantics = Literal["sum", "mean_per_datum"]
"""How a Tinker-API server turns per-token losses into the gradient it applies. ``sum``: the hosted service's
documented convention, the gradient of ``Σ_datums Σ_t loss_t``. ``mean_per_datum``: SkyRL 0.4's local server (JAX
backend), the gradient of ``(1/D) Σ_d Σ_t m_dt·loss_dt / Σ_t m_dt`` with ``m`` the datum's ``weights`` (all ones
when absent) and ``D`` the datums accumulated before ``optim_step``."""


def for_mean_per_datum(datums: EchoDatums, env_logprobs: Sequence[Sequence[float]]) -> EchoDatums:
    """The same step's datums for a ``mean_per_datum`` server, so that the gradient it applies is the ``sum``
    convention's one (the RFC's): every datum becomes an ``importance_sampling`` datum whose ``weights`` are 1 on its
    trained targets and whose ``advantages`` are the per-token coefficients times ``D · Σ weights`` (undoing the
    server's two divisions). On a cross-entropy datum the weights would be both the coefficients and the divisor,
    so λ would cancel; here the env targets carry ``λ·w`` as advantages with ``logprobs`` = ``env_logprobs``, their
    current log-probs (a ``forward`` pass at the same weights), where ``∂ exp(ℓ - q)·a / ∂ℓ = a``: the env term's
    gradient is exactly the cross-entropy one. ``env_logprobs[k]``: the per-target log-probs of ``datums.env[k]``."""
    if len(env_logprobs) != len(datums.env):
        raise ValueError(f"{len(datums.env)} env datums but {len(env_logprobs)} log-prob rows")
    n_datums = len(datums.rl) + len(datums.env)

    def rescaled(datum: types.Datum, coeff: np.ndarray, sampled: np.ndarray) -> types.Datum:
        mask = coeff != 0
        if sampled.shape != coeff.shape:
            raise ValueError(f"{sampled.size} log-probs for {coeff.size} targets")
        scale = float(n_datums * int(mask.sum()))
        return types.Datum(
            model_input=datum.model_input,
            loss_fn_inputs={
                "target_tokens": datum.loss_fn_inputs["target_tokens"],
                "weights": _data(mask.astype(np.float32)),
                "logprobs": _data(np.where(mask, sampled, 0.0).astype(np.float32)),
                "advantages": _data((coeff.astype(np.float64) * scale).astype(np.float32)),
            },
        )

    rl = [
        rescaled(d, d.loss_fn_inputs["advantages"].to_numpy(), d.loss_fn_inputs["logprobs"].to_numpy())
        for d in datums.rl
    ]
    env = [
        rescaled(d, d.loss_fn_inputs["weights"].to_numpy(), np.asarray(lp, dtype=np.float32).reshape(-1))
        for d, lp in zip(datums.env, env_logprobs)
    ]
    return EchoDatums(
        rl=rl, env=env, rl_rows=list(datums.rl_rows), env_rows=list(datums.env_rows), metrics=datums.metrics
    )


def echo_step(
    training_client: Any,
    datums: EchoDatums,
    optim_params: Any,
    *,
    rl_loss_fn: str = "importance_sampling",
    rl_loss_fn_config: dict[str, float | str] | None = None,
    semantics: ServerSemantics = "sum",
) -> dict[str, Any]:
    """One optimizer step whose applied gradient is the RFC's ``∇(L_policy + λ·L_world)`` on a server with the
    given ``ServerSemantics``. ``sum``: policy ``forward_backward`` and env ``forward_backward(...,
    "cross_entropy")`` (they accumulate), then ``optim_step``. ``mean_per_datum``: first a ``forward`` of the env
    datums (their current log-probs), then both as ``for_mean_per_datum`` datums (``importance_sampling`` only,
    so ``rl_loss_fn`` must be it), then ``optim_step``. Returns the results by name (``policy``, ``world``, ``optim``)
    and, under ``sent``, the datums actually sent."""
    if rl_loss_fn not in POLICY_LOSSES:
        raise ValueError(
            f"rl_loss_fn must be a policy loss ({sorted(POLICY_LOSSES)}), got {rl_loss_fn!r}; the env term is "
            "always a separate pass"
        )
    env_loss = "cross_entropy"
    if semantics == "mean_per_datum":
        if rl_loss_fn != "importance_sampling":
            raise ValueError("a mean_per_datum server needs rl_loss_fn='importance_sampling' (its per-datum divisor)")
        current: list[list[float]] = []
        if datums.env:
            out = training_client.forward(datums.env, "cross_entropy").result()
            current = [_floats(o["logprobs"]).tolist() for o in out.loss_fn_outputs]
        datums = for_mean_per_datum(datums, current)
        env_loss = "importance_sampling"
    elif semantics != "sum":
        raise ValueError(f"semantics must be 'sum' or 'mean_per_datum', not {semantics!r}")
    futures: dict[str, Any] = {}
    if datums.rl:
        futures["policy"] = training_client.forward_backward(datums.rl, rl_loss_fn, rl_loss_fn_config)
    if datums.env:
        futures["world"] = training_client.forward_backward(datums.env, env_loss)
    futures["optim"] = training_client.optim_step(optim_params)
    results: dict[str, Any] = {k: f.result() for k, f in futures.items()}
    results["sent"] = datums
    return results


class TinkerSampler:
    """The rollouts' ``Sampler`` over a Tinker ``SamplingClient``: one sample
    request per prompt, all in flight at once, stopping at ``eos_ids``; returns the sampled ids as the server sent
    them, with their log-probs (token in, token out: nothing is re-tokenized)."""

    def __init__(self, sampling_client: Any, eos_ids: Sequence[int], *, temperature: float = 1.0) -> None:
        self.client = sampling_client
        self.eos_ids = [int(e) for e in eos_ids]
        self.temperature = float(temperature)

    def __call__(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[tuple[list[int], list[float]]]:
        params = types.SamplingParams(max_tokens=max_new_tokens, temperature=self.temperature, stop=self.eos_ids)
        futures = [
            self.client.sample(types.ModelInput.from_ints([int(t) for t in p]), num_samples=1, sampling_params=params)
            for p in prompts
        ]
        out = []
        for f in futures:
            seq = f.result().sequences[0]
            ids = [int(t) for t in seq.tokens]
            lps = [float(x) for x in (seq.logprobs or [])]
            if len(lps) != len(ids):
                raise ValueError(f"the sampler returned {len(lps)} log-probs for {len(ids)} tokens")
            out.append((ids, lps))
        return out


def _floats(value: Any) -> torch.Tensor:
    return torch.as_tensor(value.tolist() if hasattr(value, "tolist") else value, dtype=torch.float64).reshape(-1)


def reported_loss(output: Any) -> float:
    """A ``forward_backward`` result's loss as the server computed it: the sum of its per-token
    ``elementwise_loss`` over the datums (Tinker's convention: built-in losses are per-token sums)."""
    return float(sum(float(_floats(o["elementwise_loss"]).sum()) for o in output.loss_fn_outputs))


def reference_loss(
    datums: Sequence[types.Datum],
    output: Any,
    loss_fn: str,
    *,
    watch: Callable[[int, torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """The same batch's loss computed here (float64, differentiable in the log-probs) from the datums' own inputs
    and the per-target log-probs ``ℓ`` the server returned: ``cross_entropy`` = ``-Σ weights·ℓ``,
    ``importance_sampling`` = ``-Σ exp(ℓ - logprobs)·advantages``. ``watch(k, ℓ)`` sees datum k's grad-enabled
    log-probs (e.g. a gradient probe: ``∂loss/∂ℓ`` is what the server's backward receives per token)."""
    total = torch.zeros((), dtype=torch.float64)
    for k, (datum, out) in enumerate(zip(datums, output.loss_fn_outputs, strict=True)):
        lp = _floats(out["logprobs"]).requires_grad_(True)
        if watch is not None:
            watch(k, lp)
        inputs = {name: _floats(v) for name, v in datum.loss_fn_inputs.items()}
        if loss_fn == "cross_entropy":
            total = total - (inputs["weights"] * lp).sum()
        elif loss_fn == "importance_sampling":
            total = total - (torch.exp(lp - inputs["logprobs"]) * inputs["advantages"]).sum()
        else:
            raise ValueError(f"no local reference for loss_fn={loss_fn!r}")
    return total


def datums_from_tokenized(items: Sequence[Any]) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """``(input_ids, role_ids, obs_count)`` of the project's ``TokenizedTrajectory`` objects."""
    return (
        [list(map(int, it.input_ids)) for it in items],
        [list(map(int, it.role_ids)) for it in items],
        [int(it.obs_count) for it in items],
    )


__all__ = [
    "CUSTOM_INPUT_RANKS",
    "POLICY_LOSSES",
    "EchoDatums",
    "ServerSemantics",
    "TinkerSampler",
    "build_custom_datums",
    "build_datums",
    "datums_from_tokenized",
    "echo_custom_loss",
    "echo_datum_loss",
    "echo_step",
    "for_mean_per_datum",
    "reference_loss",
    "reported_loss",
]

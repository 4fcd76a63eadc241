"""Training: the start checkpoint (generic LM pretraining, then SFT with the action tokens as the only targets) and
one RL step of an arm (the ECHO objective).

The start checkpoint is trained the way agents are usually trained, so that it leaves the world model to learn:

* generic pretraining: next-token CE on packed chunks of text that is not the env's (``corpus.stdlib_docstrings``);
* SFT: ``-mean log p(action tokens)`` of the train seeds' expert episodes; the system prompt, the task, the chat
  scaffold and every observation are inputs only (what TRL's ``assistant_only_loss`` does).

RL step: ``echo_loss`` = GRPO clipped surrogate on action tokens + λ·CE on ``env_output`` tokens after the first
action (``world_loss_target="env_only"``), from one forward pass. λ = 0 for the GRPO arm; the direct-CE arm is λ = 1
with ``verifier_free=True`` (env-token CE only). The batch's denominators are computed once over the whole batch, so
micro-batching gives the same gradient. Per-token log-probs come from ``openenv_echo.objective.hidden_logps`` (the
final hidden states and the LM head's weight: the (B, T, V) logits are never materialised) over sequences assembled
by ``openenv_echo.tokenization``; only the KLs, which need whole distributions, read logits: the SFT teacher's, and
GRPO + ECHO's optional action-KL anchor (``action_kl``, at the action positions alone).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..objective import (
    EchoBatch,
    EchoConfig,
    PolicyLossConfig,
    echo_loss,
    env_keep_mask,
    group_advantages,
    hidden_logps,
    local_denominators,
    token_logps,
)
from ..objective._advantages import zero_variance_groups
from ..roles import Role, target_positions
from ..tokenization import TokenizedTrajectory, collate
from .config import ECHO_NORMALIZATIONS
from .optim import make_optimizer


def forward_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, T, V) logits of a collated batch (its own position ids, no KV cache)."""
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    )
    logits: torch.Tensor = out.logits
    return logits


def forward_hidden(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T, D) final hidden states of a collated batch (its own position ids, no KV cache) and the LM head's
    weight (V, D): what ``hidden_logps`` scores, without the (B, T, V) logits."""
    out = model.base_model(  # type: ignore[operator]  # a transformers CausalLM's decoder stack
        input_ids=batch["input_ids"],
        attention_mask=batch.get("attention_mask"),
        position_ids=batch.get("position_ids"),
        use_cache=False,
    )
    hidden: torch.Tensor = out.last_hidden_state
    head: torch.Tensor = model.get_output_embeddings().weight  # type: ignore[operator]
    return hidden, head


def forward_logps(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], temperatures: tuple[float, ...] = (1.0,)
) -> list[torch.Tensor]:
    """(B, T) log-probs of ``batch['input_ids']`` in the shared target alignment, one tensor per temperature, all
    from one forward pass (``hidden_logps``: the logits are recomputed block by block, never stored whole)."""
    hidden, head = forward_hidden(model, batch)
    return [hidden_logps(hidden, head, batch["input_ids"], t) for t in temperatures]


def action_kl(
    hidden: torch.Tensor,
    head: torch.Tensor,
    anchor: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    temperature: float,
) -> tuple[torch.Tensor, int]:
    """Sum over a batch's action targets of KL(π_θ ‖ π_anchor), both at ``temperature``, and the targets' count.

    Whole distributions at the action positions only (a few dozen per turn), from ``hidden`` of the model's forward
    pass and the frozen ``anchor``'s own (no gradient): ECHO's anchor against the world term moving the policy."""
    act = action_targets(batch["role_ids"], batch["attention_mask"])[:, 1:]  # targets t, predicted at t - 1
    n = int(act.sum())
    if n == 0:
        return hidden.sum() * 0.0, 0
    logp = torch.log_softmax((hidden[:, :-1][act] @ head.T).float() / temperature, dim=-1)
    with torch.no_grad():
        a_hidden, a_head = forward_hidden(anchor, batch)
        a_logp = torch.log_softmax((a_hidden[:, :-1][act] @ a_head.T).float() / temperature, dim=-1)
    return (logp.exp() * (logp - a_logp)).sum(), n


def _trained(copy: torch.nn.Module, model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """``copy``'s parameters that match ``model``'s trained ones, in their order."""
    mine = dict(copy.named_parameters())
    return [mine[name] for name, p in model.named_parameters() if p.requires_grad]


def micro_batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def arm_config(
    arm: str, lam: float, normalization: str = "token_mean", varied_only: bool = False, kl: float = 0.0
) -> EchoConfig:
    """The objective of each arm (everything else identical). GRPO + ECHO's world term: ``normalization``
    (``ECHO_NORMALIZATIONS``: ``sequence_mean`` is the paper's, over each rollout's |O_i|) and ``varied_only``
    (only on rollouts of groups with reward variance). ``kl``: the policy term's k3 KL coefficient β (both policy
    arms; the reference log-probs come from ``rl_step``'s ``ref``)."""
    policy = PolicyLossConfig(kl_coeff=kl)
    if arm == "grpo":
        return EchoConfig(world_model_coeff=0.0, policy=policy)
    if arm == "grpo_echo":
        if normalization not in ECHO_NORMALIZATIONS:
            raise ValueError(f"unknown world-term normalization {normalization!r}")
        paper = {"sequence_denominator": "full_observation"} if normalization == "sequence_mean" else {}
        return EchoConfig(
            world_model_coeff=lam,
            normalization=normalization,  # type: ignore[arg-type]  # checked above
            keep_zero_variance_env=not varied_only,
            policy=policy,
            **paper,  # type: ignore[arg-type]
        )
    if arm == "direct_ce":
        if kl:
            raise ValueError("direct CE has no policy term to hold near a reference")
        return EchoConfig(world_model_coeff=1.0, verifier_free=True)
    raise ValueError(f"unknown arm {arm!r}")


# -- the start checkpoint -----------------------------------------------------------------------------------
@dataclass
class PhaseResult:
    """One training phase of the start checkpoint: its losses, what it trained on, and the final AdamW state."""

    losses: list[float]
    tokens: int  # tokens seen (inputs)
    targets: int  # tokens trained as targets
    optimizer: dict[str, Any] | None = None  # AdamW state at the end: the next phase (and every RL arm) continues it


def warmup_cosine(steps: int, warmup: int) -> Any:
    """LR factor: linear warm-up over ``warmup`` steps, then cosine down to 10 %."""

    def factor(s: int) -> float:
        return min(1.0, (s + 1) / max(1, warmup)) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(s, steps) / steps)))

    return factor


def pack_chunks(tokenizer: Any, texts: list[str] | tuple[str, ...], length: int) -> torch.Tensor:
    """(N, length) token ids: the texts encoded, each followed by the end-of-text id, concatenated and cut into
    chunks (the tail that does not fill a chunk is dropped)."""
    ids: list[int] = []
    eos = int(tokenizer.eos_token_id)
    for enc in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        ids.extend(enc)
        ids.append(eos)
    n = len(ids) // length
    if n < 1:
        raise ValueError(f"the corpus has {len(ids)} tokens, fewer than one chunk of {length}")
    return torch.tensor(ids[: n * length], dtype=torch.long).view(n, length)


def pretrain_generic(
    model: torch.nn.Module,
    chunks: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    warmup: int,
    seed: int,
    progress: bool = False,
) -> PhaseResult:
    """Next-token CE on random batches of generic-text chunks (every token a target)."""
    from tqdm.auto import tqdm

    opt = make_optimizer(model, lr)
    if steps == 0:
        return PhaseResult([], 0, 0, opt.state_dict())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(steps, warmup))
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    model.train()
    bar = tqdm(range(steps), desc="start checkpoint: generic pretraining", disable=not progress, leave=False)
    for _ in bar:
        x = chunks[torch.randint(0, len(chunks), (batch_size,), generator=gen)]
        loss = -forward_logps(model, {"input_ids": x})[0][:, 1:].mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        bar.set_postfix(nll=f"{losses[-1]:.3f}")
    n = steps * batch_size * chunks.shape[1]
    return PhaseResult(losses, n, n - steps * batch_size, opt.state_dict())


def action_targets(role_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The SFT targets of a collated batch: action tokens (the shared shift rule: a row's first real token has no
    context and is never a target)."""
    valid = target_positions(role_ids) & attention_mask.bool()
    return valid & (role_ids == Role.ACTION.code)


def sft_actions(
    model: torch.nn.Module,
    sequences: list[TokenizedTrajectory],
    tokenizer: Any,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    warmup: int,
    micro_batch: int,
    seed: int,
    optimizer: dict[str, Any] | None,
    checkpoint: Callable[[int, torch.optim.Optimizer], None] | None = None,
    checkpoint_every: int = 0,
    progress: bool = False,
    replay: torch.Tensor | None = None,
    replay_batch: int = 0,
    teacher: torch.nn.Module | None = None,
    teacher_weight: float = 0.0,
) -> PhaseResult:
    """Assistant-only SFT on expert episodes: the mean NLL of the batch's action tokens; everything else is input.
    ``teacher`` (with ``teacher_weight``): plus the mean KL(teacher || model) over every other target position, so
    the model stays the teacher's language model where it is not predicting an action (no token there is a target).
    ``replay``: plus the LM loss of ``replay_batch`` generic-text chunks per step.
    Continues the generic phase's AdamW moments (``optimizer``) at its own learning rate. ``checkpoint(step, opt)``
    is called every ``checkpoint_every`` steps and after the last (the caller evaluates and keeps what it wants)."""
    from tqdm.auto import tqdm

    opt = make_optimizer(model, lr)
    if optimizer is not None:
        opt.load_state_dict(optimizer)
        for g in opt.param_groups:
            g["lr"] = g["initial_lr"] = lr
    if steps == 0:
        return PhaseResult([], 0, 0, opt.state_dict())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(steps, warmup))
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed + 7)
    order: list[int] = []
    losses: list[float] = []
    seen = targets = 0
    model.train()
    bar = tqdm(total=steps, desc="start checkpoint: SFT on expert actions", disable=not progress, leave=False)
    for step in range(1, steps + 1):
        if len(order) < batch_size:
            fresh = list(range(len(sequences)))
            rng.shuffle(fresh)
            order.extend(fresh)
        idx, order = order[:batch_size], order[batch_size:]
        rows = sorted((sequences[i] for i in idx), key=len)  # length-sorted micro batches pad less
        n_action = sum(int((r.role_ids[1:] == Role.ACTION.code).sum()) for r in rows)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        n_other = sum(int((r.role_ids[1:] != Role.ACTION.code).sum()) for r in rows)
        for part in micro_batches(rows, micro_batch):
            b = collate(part, tokenizer=tokenizer)
            act = action_targets(b["role_ids"], b["attention_mask"])
            if teacher is not None and teacher_weight > 0:  # the KL needs whole distributions: logits
                logits = forward_logits(model, b)
                lp = token_logps(logits, b["input_ids"])
            else:
                lp = forward_logps(model, b)[0]
            loss = -torch.where(act, lp, torch.zeros((), dtype=lp.dtype)).sum() / max(n_action, 1)
            if teacher is not None and teacher_weight > 0:  # stay the pretrained LM wherever no action is predicted
                other = target_positions(b["role_ids"]) & b["attention_mask"].bool() & ~act
                with torch.no_grad():
                    t_logp = torch.log_softmax(forward_logits(teacher, b)[:, :-1].float(), dim=-1)
                s_logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
                kl = (t_logp.exp() * (t_logp - s_logp)).sum(-1)
                loss = loss + teacher_weight * torch.where(
                    other[:, 1:], kl, torch.zeros((), dtype=kl.dtype)
                ).sum() / max(n_other, 1)
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
            total += float(loss.detach())
            seen += int(b["attention_mask"].sum())
        if replay is not None and replay_batch > 0:  # generic-text LM replay: keeps the LM a language model
            x = replay[torch.randint(0, len(replay), (replay_batch,), generator=gen)]
            rl = -forward_logps(model, {"input_ids": x})[0][:, 1:].mean()
            rl.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
            seen += int(x.numel())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        targets += n_action
        losses.append(total)
        bar.update(1)
        bar.set_postfix(action_nll=f"{total:.3f}")
        if checkpoint is not None and (step == steps or (checkpoint_every and step % checkpoint_every == 0)):
            checkpoint(step, opt)
    bar.close()
    return PhaseResult(losses, seen, targets, opt.state_dict())


# -- RL ---------------------------------------------------------------------------------------------------
def _world_policy_surgery(
    world_grads: list[torch.Tensor], params: list[torch.nn.Parameter], surgery: bool
) -> dict[str, float]:
    """The cosine of the world term's gradient (``world_grads``) with the policy term's (the parameters' ``.grad``),
    and with ``surgery`` PCGrad on the world term's: where the inner product is negative, its component along the
    policy term's gradient is removed in place, so that the world step does not undo the policy step to first
    order. Returns the logged cosine (before any projection) and whether the gradient was projected."""
    with torch.no_grad():
        policy = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        dot = sum(float((w * g).sum()) for w, g in zip(world_grads, policy, strict=True))
        pp = sum(float(g.square().sum()) for g in policy)
        ww = sum(float(w.square().sum()) for w in world_grads)
        cos = dot / (pp * ww) ** 0.5 if pp > 0 and ww > 0 else 0.0
        projected = surgery and dot < 0 and pp > 0
        if projected:
            for w, g in zip(world_grads, policy, strict=True):
                w.sub_(g, alpha=dot / pp)
    return {"world_policy_cos": cos} | ({"world_projected": float(projected)} if surgery else {})


def rl_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sequences: list[TokenizedTrajectory],
    rewards: list[float],
    group_size: int,
    cfg: EchoConfig,
    tokenizer: Any,
    *,
    micro_batch: int,
    step: int,
    temperature: float = 1.0,
    advantage: str = "grpo",
    world_opt: torch.optim.Optimizer | None = None,
    anchor: torch.nn.Module | None = None,
    anchor_coeff: float = 0.0,
    anchor_follows: bool = False,
    surgery: bool = False,
    ref: torch.nn.Module | None = None,
) -> dict[str, float]:
    """One on-policy update on a batch of policy rollouts (consecutive groups of ``group_size`` samples).

    The policy term uses the log-probs of the distribution that sampled (logits / ``temperature``); the world term
    scores observations with the model's own T = 1 distribution (``env_temperature="one"``), both from the same
    hidden states of one forward pass (``hidden_logps``). ``world_opt``: the world term's gradient is kept apart
    and stepped by this optimizer (its own pace), after ``opt`` steps the policy term's; each is clipped on its own.
    ``anchor``: ``anchor_coeff`` · mean over the batch's action targets of KL(π_θ ‖ π_anchor) at the sampling
    temperature joins the world term (and its optimizer): the world step then learns env tokens without moving the
    policy away from the frozen ``anchor`` (the run's start). ``anchor_follows`` (needs ``world_opt``): the anchor
    takes the policy term's steps too, so that it holds the policy to the start moved by the policy term alone and
    resists only what the world term's steps do to the actions. ``surgery`` (needs ``world_opt``): PCGrad, where
    the world term's gradient has a negative inner product with the policy term's, its component along the policy
    term's gradient is removed before its step. With a world optimizer the cosine of the two gradients is logged.
    ``ref``: the frozen reference of the policy term's KL penalty (``cfg.policy.kl_coeff`` > 0, and only then);
    its sampling-temperature log-probs join the batch as ``ref_logps`` (computed for the rows that carry a policy
    term only) and the penalty's mean is logged.
    """
    r = torch.tensor(rewards, dtype=torch.float32)
    flat = zero_variance_groups(r, group_size)  # no reward variance: no policy term (the env term stays)
    varied_groups = int((~flat).sum()) // group_size
    adv = None if cfg.verifier_free else group_advantages(r, group_size, advantage)  # type: ignore[arg-type]
    full = collate(sequences, tokenizer=tokenizer)
    keep = None if cfg.keep_zero_variance_env else env_keep_mask(cfg, group_size, len(sequences), rewards=r).keep
    full_batch = EchoBatch(
        role_ids=full["role_ids"], advantages=adv, obs_count=full["obs_count"], verifier_free=flat, env_keep=keep
    )
    dens = local_denominators(full_batch, cfg)
    model.train()
    opt.zero_grad(set_to_none=True)
    params = [p for p in model.parameters() if p.requires_grad]
    if world_opt is not None and cfg.coeff_at(step) == 0.0:
        raise ValueError("a world optimizer needs a world term (λ > 0 at this step)")
    world_grads = None if world_opt is None else [torch.zeros_like(p) for p in params]
    if (anchor is None) != (anchor_coeff == 0.0) or anchor_coeff < 0:
        raise ValueError("an action-KL anchor needs a frozen model and a coefficient > 0, and each needs the other")
    if anchor_follows and (anchor is None or world_opt is None):
        raise ValueError("an anchor that follows the policy term needs an anchor and a world optimizer")
    if surgery and world_opt is None:
        raise ValueError("gradient surgery needs a world optimizer (the two terms' gradients apart)")
    if (ref is None) != (cfg.policy.kl_coeff == 0.0):
        raise ValueError("a KL penalty (policy.kl_coeff > 0) needs a frozen reference model, and each the other")
    n_action = max(int(action_targets(full["role_ids"], full["attention_mask"]).sum()), 1)
    sums = {"policy": 0.0, "world": 0.0, "nll": 0.0, "n_env": 0.0, "kl": 0.0, "ref_kl": 0.0, "n_ref": 0.0}
    for lo in range(0, len(sequences), micro_batch):
        rows = slice(lo, lo + micro_batch)
        b = collate(sequences[rows], tokenizer=tokenizer)
        hidden, head = forward_hidden(model, b)
        lp = hidden_logps(hidden, head, b["input_ids"], temperature)
        lp_env = hidden_logps(hidden, head, b["input_ids"], 1.0) if temperature != 1.0 else None
        ref_lp = None
        if ref is not None and bool(flat[rows].all()):  # no policy term here: the penalty is masked out, so no
            ref_lp = lp.detach()  # reference pass (a reference equal to the policy is an exact zero)
        elif ref is not None:
            with torch.no_grad():
                ref_lp = forward_logps(ref, b, (temperature,))[0]
        eb = EchoBatch(
            role_ids=b["role_ids"],
            advantages=None if adv is None else adv[rows],
            obs_count=b["obs_count"],
            verifier_free=flat[rows],
            env_keep=None if keep is None else keep[rows],
            ref_logps=ref_lp,
        )
        out = echo_loss(lp, eb, cfg, step=step, denominators=dens, env_logps=lp_env)
        loss, world_loss = out.loss, out.world_loss
        if anchor is not None:  # the anchor is part of the world term
            kl, _ = action_kl(hidden, head, anchor, b, temperature)
            sums["kl"] += float(kl.detach())
            term = anchor_coeff * kl / n_action
            loss, world_loss = loss + term, world_loss + term
        if world_grads is not None:  # the world term's gradient apart, then the policy term's into .grad
            parts = torch.autograd.grad(world_loss, params, retain_graph=True, allow_unused=True)
            for acc, g in zip(world_grads, parts, strict=True):
                if g is not None:
                    acc.add_(g)
            out.policy_loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        else:
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        m = out.metrics
        n_env = float(m["echo/tokens/selected"])  # env_output targets (selected even when λ = 0: metrics only)
        sums["policy"] += float(out.policy_loss.detach())
        sums["world"] += float(out.world_loss.detach())
        if n_env:  # a micro-batch without env tokens has no CE (nan), not a zero one
            sums["nll"] += float(m["echo/ce_per_token/env_output"]) * n_env
        sums["n_env"] += n_env
        if ref is not None:  # the penalty's mean over the action targets that carry a policy term
            n_ref = float(action_targets(b["role_ids"], b["attention_mask"])[~flat[rows]].sum())
            if n_ref:
                sums["ref_kl"] += float(m["policy/kl"]) * n_ref
                sums["n_ref"] += n_ref
    world: dict[str, float] = {}
    if world_grads is not None:
        world |= _world_policy_surgery(world_grads, params, surgery)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    # A batch with no reward variance and λ = 0 has an exactly zero gradient; AdamW would still move the weights on
    # its stale momentum (on a tiny model, enough to wreck the policy), so such a step is skipped and logged. With a
    # world optimizer ``grad_norm`` is the policy term's alone: its step is skipped, the world term's is not.
    before = [p.detach().clone() for p in params] if anchor_follows else []
    if grad_norm != 0.0:
        opt.step()
    if anchor is not None and anchor_follows:  # the policy term's step, taken by the anchor as well
        with torch.no_grad():
            for a, p, p0 in zip(_trained(anchor, model), params, before, strict=True):
                a.add_(p - p0)
    skipped = grad_norm == 0.0 and world_opt is None
    if world_opt is not None and world_grads is not None:
        for p, g in zip(params, world_grads, strict=True):  # every .grad replaced: the policy term's are spent
            p.grad = g
        world["world_grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
        if world["world_grad_norm"] != 0.0:  # nothing to learn: no step on stale momentum (as for the policy term)
            world_opt.step()
        world_opt.zero_grad(set_to_none=True)
    anchored = {"action_kl": sums["kl"] / n_action} if anchor is not None else {}
    held = {"ref_kl": sums["ref_kl"] / max(sums["n_ref"], 1.0)} if ref is not None else {}
    return {
        **world,
        **anchored,
        **held,
        "grad_norm": grad_norm,
        "skipped": float(skipped),
        "groups_with_reward_variance": float(varied_groups),
        "policy_loss": sums["policy"],
        "world_loss": sums["world"],
        "env_ce": sums["nll"] / max(sums["n_env"], 1.0),
        "env_tokens": sums["n_env"],
        "action_tokens": float(full["action_mask"].sum()),
        "tokens": float(full["attention_mask"].sum()),
    }

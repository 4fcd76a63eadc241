"""TRL adapter: ``EchoGRPOTrainer``, a ``trl.GRPOTrainer`` that adds ``λ · CE(observation tokens)``.

What it does, in TRL's own loop (``trl`` 1.16; written against the hooks, not a version string):

* reuses the grad-enabled log-probs TRL computes for its policy loss (``_get_per_token_logps_and_entropies`` is
  wrapped and its result indexed, never unpacked: 2-tuple in 0.29, 3-tuple in 1.x) — no second forward;
* carries the project's per-token roles under its own batch key (``echo_role_ids``), not TRL's binary
  ``tool_mask``, which swallows chat-template scaffolding. Roles come from ``rollout_func`` (key
  ``echo_role_ids``, one role code per completion token; see ``rollout_output``) — this works for
  OpenEnv-style runs where ``self.tools`` is empty — or, for ``tools=``/``environment_factory=`` runs, are rebuilt
  from TRL's tool loop: the tool *body* of each inserted tool turn is ``env_output``, its scaffold ``context``;
* normalizes the env term with global counts over the generation batch, scaled exactly like TRL's own
  ``dapo`` normalizer (``/ num_processes · GAS / steps_per_generation`` in train), so gradient accumulation and
  data parallelism give the full-batch gradient whatever the ``loss_type``;
* zeroes the env term of truncated rows (``mask_truncated_completions`` zeroes ``completion_mask``, which the
  roles follow) and refuses settings that bypass ``_compute_loss`` (Liger);
* with ``env_temperature="one"`` and a sampling temperature ≠ 1, rescales only the selected env positions at
  T = 1 from the same forward's hidden states (one small LM-head matmul, no second forward).

With λ = 0 the loss is returned untouched (bit-identical to ``GRPOTrainer``).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
from trl.trainer.grpo_trainer import GRPOTrainer

from ...objective import Denominators, EchoBatch, EchoConfig, RolloutStats, echo_loss, env_keep_mask, local_denominators
from ...roles import PAD_ROLE_CODE, Role, observation_count
from ..rollouts import reset_options_of
from .hidden import _HiddenCapture, _unwrap
from .rollouts import (
    ENV_KEEP_KEY,
    OBS_COUNT_KEY,
    RESET_KEY,
    ROLE_KEY,
    STATS_KEYS,
    VERIFIER_FREE_KEY,
    _role_code,
    _trainer_eos_ids,
)

_WORLD_TOKENS_KEY = "echo_world_tokens"
_WORLD_SEQS_KEY = "echo_world_sequences"
_REQUIRED_HOOKS = ("_get_per_token_logps_and_entropies", "_compute_loss", "_generate_and_score_completions")
_LOGIT_SCALING_ATTRS = (
    "final_logit_softcapping",
    "logit_scale",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_scaling",
)


class EchoGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` plus the ECHO world-model term. Pass ``echo_config=EchoConfig(world_model_coeff=...)``.

    Everything else is TRL's: same constructor, same ``GRPOConfig``, same data paths (``rollout_func``, ``tools``,
    ``environment_factory``). Metrics are logged under ``echo/*`` next to TRL's.
    """

    def __init__(self, *args: Any, echo_config: EchoConfig | None = None, **kwargs: Any) -> None:
        for hook in _REQUIRED_HOOKS:
            if not callable(getattr(GRPOTrainer, hook, None)):
                raise RuntimeError(
                    f"this TRL version has no GRPOTrainer.{hook}; openenv_echo's TRL adapter cannot attach "
                    "(tested with trl 1.16)"
                )
        args_obj = kwargs.get("args", args[2] if len(args) > 2 else None)
        if args_obj is not None and getattr(args_obj, "use_liger_kernel", False):
            raise ValueError(
                "EchoGRPOTrainer refuses use_liger_kernel=True: Liger's fused loss path bypasses _compute_loss, so the "
                "env term would silently never be added"
            )
        self.echo_config = echo_config or EchoConfig()
        self._echo_capturing = False
        self._echo_logps: torch.Tensor | None = None
        self._echo_hidden = _HiddenCapture()
        self._echo_pending: dict[str, Any] | None = None
        self._echo_tool_roles: list[list[int]] | None = None
        self._echo_rewards: torch.Tensor | None = None
        self._echo_warned_empty = False
        self.echo_reset_options: list[dict[str, Any]] | None = None
        """Reset options (dataset column ``RESET_KEY``) of the prompts ``rollout_func`` receives, in order."""
        super().__init__(*args, **kwargs)
        if getattr(self.args, "use_liger_kernel", False):
            raise ValueError("EchoGRPOTrainer refuses use_liger_kernel=True (it bypasses _compute_loss)")
        if self.rollout_func is not None:
            self.rollout_func = self._wrap_rollout_func(self.rollout_func)
        self._echo_needs_t1 = self.echo_config.env_temperature == "one" and float(self.temperature) != 1.0
        if self._echo_needs_t1:
            assert self.model is not None
            model_config: Any = self.model.config  # a transformers config
            text_config = model_config.get_text_config()
            scaled = [a for a in _LOGIT_SCALING_ATTRS if getattr(text_config, a, None) not in (None, 1.0)]
            if scaled:
                raise NotImplementedError(
                    f"env_temperature='one' with temperature={self.temperature} needs plain LM-head logits, but this "
                    f"model scales them ({', '.join(scaled)}); use EchoConfig(env_temperature='rollout') or "
                    "temperature=1.0"
                )

    # -- data path: roles ------------------------------------------------------------------------------------
    @property
    def _echo_enabled(self) -> bool:
        cfg = self.echo_config
        return cfg.world_model_coeff != 0.0 or cfg.schedule.kind != "constant"

    def _wrap_rollout_func(self, fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        @functools.wraps(fn)
        def wrapped(prompts: list[Any], trainer: Any) -> dict[str, Any]:
            out = dict(fn(prompts, trainer))
            pending: dict[str, Any] = {}
            self._echo_limit_lengths(out)
            roles = out.pop(ROLE_KEY, None)
            if roles is not None:
                comps = out.get("completion_ids", [])
                if len(roles) != len(comps) or any(len(r) != len(c) for r, c in zip(roles, comps)):
                    raise ValueError(f"rollout_func's {ROLE_KEY} must have one role per completion token")
                roles = [[_role_code(x) for x in row] for row in roles]
                if "env_mask" not in out:  # never let TRL's policy mask train observation tokens
                    out["env_mask"] = [[1 if r == Role.ACTION.code else 0 for r in row] for row in roles]
                pending["roles"] = roles
            vf = out.pop(VERIFIER_FREE_KEY, None)
            if vf is not None:
                if len(vf) != len(out.get("completion_ids", [])) or "env_mask" not in out:
                    raise ValueError(f"{VERIFIER_FREE_KEY} needs one flag per completion (and roles or an env_mask)")
                # no policy term (nor policy denominator) for verifier-free rollouts: empty their policy mask
                out["env_mask"] = [[0] * len(m) if flag else m for m, flag in zip(out["env_mask"], vf)]
            for key in (ENV_KEEP_KEY, OBS_COUNT_KEY, *STATS_KEYS.values()):
                if key in out:
                    pending[key] = out.pop(key)
            self._echo_pending = pending
            return out

        return wrapped

    def _echo_limit_lengths(self, out: dict[str, Any]) -> None:
        """Refuse a batch that ``mask_truncated_completions`` would zero entirely (every completion not ending on an
        EOS id). Completions longer than ``max_completion_length`` are left as TRL leaves them (it does not cut
        ``rollout_func`` output), so λ = 0 stays bit-identical to plain TRL (RFC 0004 P5); |O_i| is then counted
        from the whole row by the objective."""
        comps = out.get("completion_ids") or []
        if self.mask_truncated_completions and comps:
            pad = getattr(self, "pad_token_id", None)  # 0.29; 1.x keeps it on the tokenizer
            ends = {*_trainer_eos_ids(self), pad if pad is not None else self._tokenizer.pad_token_id}
            if all(not c or c[-1] not in ends for c in out["completion_ids"]):
                raise ValueError(
                    "mask_truncated_completions=True would zero every completion of this batch: none ends on an EOS "
                    f"id {sorted(e for e in ends if e is not None)}, so TRL counts all of them as truncated and the "
                    "loss and gradients are 0. End each completion on an end-of-turn token when its episode ended "
                    "(openenv_echo.adapters.rollouts.end_completion; env_rollout_func does), or set "
                    "mask_truncated_completions=False"
                )

    def _calculate_rewards(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        rewards: torch.Tensor = super()._calculate_rewards(*args, **kwargs)
        self._echo_rewards = rewards  # gathered over processes (TRL normalizes per group globally)
        return rewards

    def _tool_call_loop(self, *args: Any, **kwargs: Any) -> Any:
        out = super()._tool_call_loop(*args, **kwargs)  # type: ignore[no-untyped-call]  # TRL leaves it unannotated
        tool_mask, completions, completion_ids = out[0], out[1], out[2]
        self._echo_tool_roles = [
            self._roles_from_tool_loop(tm, comp, ids) for tm, comp, ids in zip(tool_mask, completions, completion_ids)
        ]
        return out

    def _roles_from_tool_loop(self, tool_mask: list[int], messages: list[dict[str, Any]], ids: list[int]) -> list[int]:
        """Per-token roles of one tool-loop completion: model tokens action; in each inserted tool turn, the tool
        message bodies env_output and the scaffold around them context (found by re-rendering each tool message
        with an empty body and diffing, as the reference implementation does)."""
        roles = [Role.ACTION.code if m == 1 else Role.CONTEXT.code for m in tool_mask]
        runs, start = [], None
        for t, m in enumerate(list(tool_mask) + [1]):
            if m == 0 and start is None:
                start = t
            elif m == 1 and start is not None:
                runs.append((start, t))
                start = None
        rounds, cur = [], []
        for msg in messages:
            if msg.get("role") == "tool":
                cur.append(msg)
            elif cur:
                rounds.append(cur)
                cur = []
        if cur:
            rounds.append(cur)
        if len(rounds) != len(runs):
            warnings.warn(
                f"ECHO: {len(runs)} tool spans but {len(rounds)} tool rounds in a completion; its tool turns are "
                "treated as scaffold (no env target)",
                stacklevel=2,
            )
            return roles
        for (a, b), round_msgs in zip(runs, rounds):
            suffix = list(ids[a:b])
            if self._get_tool_suffix_ids(round_msgs) != suffix:  # type: ignore[no-untyped-call]  # TRL: unannotated
                warnings.warn(
                    "ECHO: a tool turn does not re-render to its token ids; treated as scaffold", stacklevel=2
                )
                continue
            for j, msg in enumerate(round_msgs):
                if not isinstance(msg.get("content"), str) or not msg["content"]:
                    continue
                emptied = [dict(m, content="") if k == j else m for k, m in enumerate(round_msgs)]
                ref = self._get_tool_suffix_ids(emptied)  # type: ignore[no-untyped-call]  # TRL: unannotated
                p = 0
                while p < min(len(ref), len(suffix)) and ref[p] == suffix[p]:
                    p += 1
                s = 0
                while s < min(len(ref), len(suffix)) - p and ref[-1 - s] == suffix[-1 - s]:
                    s += 1
                lo, hi = self._trim_to_content(ids, a + p, b - s, msg["content"])
                for t in range(lo, hi):
                    roles[t] = Role.ENV_OUTPUT.code
        return roles

    def _trim_to_content(self, ids: list[int], lo: int, hi: int, content: str) -> tuple[int, int]:
        """Drop scaffold tokens (e.g. a template newline split differently next to an empty body) from the edges of
        a diffed body span, as long as the span still decodes to text containing the whole tool output."""
        tok = self._tokenizer

        def holds(x: int, y: int) -> bool:
            return x < y and content in tok.decode(ids[x:y], skip_special_tokens=False)

        if not holds(lo, hi):
            return lo, hi
        while holds(lo + 1, hi):
            lo += 1
        while holds(lo, hi - 1):
            hi -= 1
        return lo, hi

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        self._echo_pending, self._echo_tool_roles, self._echo_rewards = None, None, None
        self.echo_reset_options = [reset_options_of(row.get(RESET_KEY)) for row in inputs]
        out = super()._generate_and_score_completions(inputs)
        pending: dict[str, Any] = self._echo_pending or {}
        tool_roles = self._echo_tool_roles
        self._echo_pending, self._echo_tool_roles = None, None
        assert self.model is not None
        mode = "train" if self.model.training else "eval"

        completion_mask = out["completion_mask"]
        b, t = completion_mask.shape
        device = completion_mask.device
        tool_mask = out.get("tool_mask")
        rows = pending.get("roles") or tool_roles
        if rows is not None:
            role_ids = torch.full((b, t), PAD_ROLE_CODE, dtype=torch.long, device=device)
            for i, r in enumerate(rows):
                if len(r) > t:
                    raise ValueError(f"completion {i} has {len(r)} roles for {t} token positions")
                role_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long, device=device)
        elif tool_mask is not None:
            if self._echo_enabled and self.echo_config.world_loss_target != "full_observation":
                raise ValueError(
                    "ECHO got TRL's binary env_mask/tool_mask but no per-token roles: it cannot tell observation "
                    "bodies from chat-template scaffolding. Return `echo_role_ids` from rollout_func (see "
                    "openenv_echo.adapters.trl.rollout_output), or use world_loss_target='full_observation' to train on every "
                    "non-model token"
                )
            role_ids = torch.where(tool_mask.bool(), Role.ACTION.code, Role.CONTEXT.code).long()
        else:
            role_ids = torch.full((b, t), Role.ACTION.code, dtype=torch.long, device=device)
            if self._echo_enabled and not self._echo_warned_empty:
                warnings.warn(
                    "ECHO is on but no observation tokens reach the trainer (single-turn completions, no rollout_func "
                    "roles, no tools): the env term is empty",
                    stacklevel=2,
                )
                self._echo_warned_empty = True
        role_ids = role_ids.masked_fill(completion_mask == 0, PAD_ROLE_CODE)  # padding and truncated rows

        if tool_mask is not None:
            policy = (completion_mask * tool_mask).bool()
            leak = policy & (role_ids != Role.ACTION.code) & (role_ids != PAD_ROLE_CODE)
            if leak.any():
                raise ValueError(
                    f"env_mask/tool_mask marks {int(leak.sum())} non-action tokens as policy tokens: TRL would train "
                    "observation/scaffold tokens with the policy gradient. env_mask must be 0 wherever the role is "
                    "not action"
                )

        keep = torch.ones(b, dtype=torch.bool, device=device)
        if ENV_KEEP_KEY in pending:
            keep &= torch.tensor(pending[ENV_KEEP_KEY], dtype=torch.bool, device=device)
        keep &= self._echo_filter_keep(pending, b, mode, device)
        obs = None
        if OBS_COUNT_KEY in pending:
            obs = torch.tensor(pending[OBS_COUNT_KEY], dtype=torch.float64, device=device)
        batch = EchoBatch(role_ids, obs_count=obs, env_keep=keep, includes_sequence_start=False)
        dens = local_denominators(batch, self.echo_config)
        obs_present = observation_count(role_ids).sum()
        local = torch.tensor([dens.world_tokens, dens.world_sequences, float(obs_present)], device=device)
        total = self.accelerator.gather(local.to(torch.float64).unsqueeze(0)).sum(dim=0)
        if self._echo_enabled and total[0] == 0 and total[2] > 0 and not self._echo_warned_empty:
            warnings.warn(  # P26: a config that silently trains nothing
                f"ECHO selects 0 tokens although the batch has {int(total[2])} observation tokens "
                f"(world_loss_target={self.echo_config.world_loss_target!r}, filters/zero-variance may drop rows)",
                stacklevel=2,
            )
            self._echo_warned_empty = True
        out[ROLE_KEY] = role_ids
        out[ENV_KEEP_KEY] = keep
        out[OBS_COUNT_KEY] = obs if obs is not None else observation_count(role_ids).to(torch.float64)
        out[_WORLD_TOKENS_KEY] = total[0]
        out[_WORLD_SEQS_KEY] = total[1]
        return out

    def _echo_filter_keep(self, pending: dict[str, Any], b: int, mode: str, device: torch.device) -> torch.Tensor:
        """Rollout filters and the zero-variance rule, decided per group over the gathered batch, sliced back."""
        cfg = self.echo_config
        keep = torch.ones(b, dtype=torch.bool, device=device)
        zero_variance = not cfg.keep_zero_variance_env and self._echo_rewards is not None
        if not (cfg.filters.active or zero_variance):
            return keep
        num_gen = self.num_generations if mode == "train" else self.num_generations_eval
        assert num_gen is not None, "GRPOConfig sets num_generations"
        stats = {}
        for name, key in STATS_KEYS.items():
            if key in pending:
                local = torch.tensor(pending[key], dtype=torch.float64, device=device)
                stats[name] = self.accelerator.gather(local).cpu()
        if "correct" in stats:
            stats["correct"] = stats["correct"] > 0.5
        rewards = None
        if zero_variance:
            assert self._echo_rewards is not None
            r = self._echo_rewards * self.reward_weights.to(self._echo_rewards.device).unsqueeze(0)
            rewards = r.nansum(dim=1).cpu()
        else:
            cfg = cfg.model_copy(update={"keep_zero_variance_env": True})
        n = b * self.accelerator.num_processes
        res = env_keep_mask(cfg, num_gen, n, rewards=rewards, stats=RolloutStats(**stats))
        start = self.accelerator.process_index * b
        for k, v in res.metrics.items():
            self._metrics[mode][f"echo/{k}"].append(v)
        return keep & res.keep.to(device)[start : start + b]

    # -- loss -------------------------------------------------------------------------------------------------
    def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        capture = self._echo_capturing
        handle = self._echo_hidden.attach(model) if capture and self._echo_hidden_wanted else None
        try:
            out = super()._get_per_token_logps_and_entropies(model, input_ids, *args, **kwargs)
        finally:
            if handle is not None:
                handle.remove()
        if capture:
            self._echo_logps = out[0]  # index, never unpack: 2-tuple in trl 0.29, 3-tuple in 1.x
        return out

    @property
    def _echo_hidden_wanted(self) -> bool:
        return self._echo_needs_t1  # the env CE is scored at T = 1 at every λ, 0 included (metrics compare)

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        self._echo_capturing, self._echo_logps = True, None
        self._echo_hidden.chunks = []
        try:
            loss = super()._compute_loss(model, inputs)  # type: ignore[no-untyped-call]  # TRL leaves it unannotated
        finally:
            self._echo_capturing = False
        logps, self._echo_logps = self._echo_logps, None
        hidden = self._echo_hidden.take()
        if logps is None:
            raise RuntimeError(
                "ECHO could not capture the policy log-probs from _get_per_token_logps_and_entropies; this TRL "
                "version computes them elsewhere"
            )
        tool_mask = inputs.get("tool_mask")
        policy_mask = inputs["completion_mask"] if tool_mask is None else inputs["completion_mask"] * tool_mask
        if not policy_mask.any() and not torch.isfinite(loss):  # TRL 0.29 divides 0 by 0 with no policy token
            loss = torch.where(torch.zeros_like(logps, dtype=torch.bool), logps, 0.0).sum()  # connected zero
        mode = "train" if self.model.training else "eval"
        step = self.state.global_step
        role_ids = inputs.get(ROLE_KEY)
        if role_ids is None:  # inputs built outside _generate_and_score_completions: no observation tokens
            role_ids = inputs["completion_mask"].long().masked_fill(inputs["completion_mask"] == 0, PAD_ROLE_CODE)
        batch = EchoBatch(
            role_ids,
            obs_count=inputs.get(OBS_COUNT_KEY),
            env_keep=inputs.get(ENV_KEEP_KEY),
            includes_sequence_start=False,
        )
        # global counts of the generation batch, scaled like TRL's own "dapo" normalizer
        procs = float(self.accelerator.num_processes)
        scale = self.current_gradient_accumulation_steps / self.args.steps_per_generation if mode == "train" else 1.0
        local = local_denominators(batch, self.echo_config)
        tokens = float(inputs.get(_WORLD_TOKENS_KEY, local.world_tokens))
        seqs = float(inputs.get(_WORLD_SEQS_KEY, local.world_sequences))
        dens = Denominators(0.0, 0.0, tokens / procs * scale, seqs / procs * scale)
        env_logps = None
        if hidden is not None:
            no_grad = self.echo_config.coeff_at(step) == 0.0
            env_logps = functools.partial(self._t1_logps, model, hidden, inputs["completion_ids"], logps, no_grad)
        out = echo_loss(
            logps, batch, self.echo_config, step=step, denominators=dens, env_logps=env_logps, policy_loss=loss
        )
        self._echo_log(out.metrics, mode)
        return out.loss

    @staticmethod
    def _t1_logps(
        model: Any,
        hidden: torch.Tensor,
        completion_ids: torch.Tensor,
        logps: torch.Tensor,
        no_grad: bool,
        selected: torch.Tensor,
    ) -> torch.Tensor:
        """Log-probs at T = 1 on the selected positions (policy log-probs elsewhere), from the captured hidden
        states: one LM-head projection of the selected positions only (without grad when λ = 0)."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and not no_grad):
            tc = completion_ids.shape[1]
            h = hidden[:, -(tc + 1) : -1]
            lm: Any = _unwrap(model)  # a transformers model
            head: torch.nn.Module = lm.get_output_embeddings()
            logits = head(h[selected]).float()
            lp = torch.log_softmax(logits, dim=-1).gather(-1, completion_ids[selected].unsqueeze(-1)).squeeze(-1)
            return logps.masked_scatter(selected, lp.to(logps.dtype))

    def _echo_log(self, metrics: dict[str, torch.Tensor], mode: str) -> None:
        """Log every metric of the seam (mean over processes); a NaN ("no such token in this batch") is not
        logged, so a step's value averages only the micro-batches that had data."""
        keys = sorted(metrics)
        vec = torch.stack([metrics[k].float() for k in keys])
        vec = self.accelerator.gather(vec.unsqueeze(0)).nanmean(dim=0).tolist()
        for k, v in zip(keys, vec):
            if not math.isnan(v):
                self._metrics[mode][k].append(v)


__all__ = ["EchoGRPOTrainer"]

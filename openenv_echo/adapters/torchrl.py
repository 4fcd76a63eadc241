"""torchrl adapter: ``EchoGRPOLoss``, a ``torchrl.objectives.llm.GRPOLoss`` with the ECHO world-model term.

The subclass keeps torchrl's policy objective untouched (masking strategy, clipping, KL, entropy, aggregation) and
adds ``loss_world_model = λ · L_world`` computed from the *same* forward: it keeps the distribution torchrl builds
in ``_get_cur_log_prob`` and scores the selected observation tokens from ``dist.logits`` with
`openenv_echo.objective.target_logps` (chunked, float32 per block, no copy of the logits; torchrl's masked
log-probs do not cover tool messages, so they cannot be reused directly). Roles are read from their own
tensordict key (default ``("echo", "role_ids")``: ``torchrl``'s ``Masks`` class rejects extra keys), aligned with
``("tokens", "full")`` and left-padded with -1 like it. Sum the output's ``loss_*`` fields as usual; with λ = 0
``loss_world_model`` is ``None`` so the sum is bit-identical to ``GRPOLoss``.

torchrl scores at T = 1 (it never divides logits by a temperature when computing log-probs), so
``env_temperature="one"`` is exact; ``"rollout"`` divides the logits by ``sampling_temperature``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase
from torchrl.objectives.llm.grpo import GRPOLoss, GRPOLossOutput

from ..objective import Denominators, EchoBatch, EchoConfig, echo_loss, local_denominators, target_logps
from ..roles import PAD_ROLE_CODE, Role

ROLE_IDS_KEY: tuple[str, str] = ("echo", "role_ids")


class EchoGRPOLossOutput(GRPOLossOutput):  # type: ignore[misc]  # torchrl ships no type information
    """``GRPOLossOutput`` plus the world-model term (``loss_world_model`` is summed with the other ``loss_*``)."""

    loss_world_model: torch.Tensor | None = None
    world_model_ce: torch.Tensor | None = None
    world_model_tokens: torch.Tensor | None = None
    world_model_coeff: torch.Tensor | None = None


class EchoGRPOLoss(GRPOLoss):  # type: ignore[misc]  # torchrl ships no type information
    """``GRPOLoss`` + ``λ · CE(selected observation tokens)`` from the logits it already computed.

    Keyword Args:
        echo_config: the ECHO configuration (λ, target roles, normalization, ...).
        role_ids_key: tensordict key of the (B, T) role ids aligned with ``("tokens", "full")``.
        sampling_temperature: only used with ``env_temperature="rollout"``.
        **kwargs: everything ``GRPOLoss`` takes.

    Set ``echo_step`` (the optimizer step, for λ schedules) and, when splitting an optimizer batch into several
    calls, ``echo_denominators`` (from ``global_denominators``) so the env term is normalized over the whole
    batch.
    """

    output_type = EchoGRPOLossOutput

    def __init__(
        self,
        actor_network: Any = None,
        *,
        echo_config: EchoConfig | None = None,
        role_ids_key: NestedKey = ROLE_IDS_KEY,
        sampling_temperature: float = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(actor_network, **kwargs)
        if sampling_temperature <= 0:
            raise ValueError(f"sampling_temperature must be > 0, got {sampling_temperature}")
        self.echo_config = echo_config or EchoConfig()
        self.role_ids_key = role_ids_key
        self.sampling_temperature = float(sampling_temperature)
        self.echo_step = 0
        self.echo_denominators: Denominators | None = None
        self._echo_dist: Any = None

    @property
    def out_keys(self) -> list[str]:
        return [*super().out_keys, "loss_world_model", "world_model_ce", "world_model_tokens", "world_model_coeff"]

    @out_keys.setter
    def out_keys(self, values: list[str]) -> None:
        self._out_keys = values

    def _get_cur_log_prob(self, tensordict: TensorDictBase) -> Any:
        log_prob, dist, composite = super()._get_cur_log_prob(tensordict)
        self._echo_dist = dist  # keep the logits of this forward for the env term
        return log_prob, dist, composite

    def echo_batch(self, tensordict: TensorDictBase) -> EchoBatch | None:
        """The role ids of ``tensordict`` as an ``EchoBatch`` (``None`` if the key is absent)."""
        if self.role_ids_key not in tensordict.keys(include_nested=True):
            return None
        role_ids = tensordict.get(
            self.role_ids_key, as_padded_tensor=True, padding_side="left", padding_value=PAD_ROLE_CODE
        )
        return EchoBatch(role_ids.long())

    def forward(self, tensordict: TensorDictBase) -> EchoGRPOLossOutput:
        self._echo_dist = None
        out: EchoGRPOLossOutput = super().forward(tensordict)
        dist, self._echo_dist = self._echo_dist, None
        cfg = self.echo_config
        lam = cfg.coeff_at(self.echo_step)
        batch = self.echo_batch(tensordict)
        if batch is None:
            if lam != 0.0:
                raise KeyError(
                    f"ECHO is on but the tensordict has no role ids under {self.role_ids_key!r}; build them with "
                    "openenv_echo.adapters.torchrl.history_role_ids (or from the project's tokenized trajectories)"
                )
            return out
        if dist is None:
            raise RuntimeError("EchoGRPOLoss could not capture the distribution of the policy forward")
        logits = dist.logits
        tokens = tensordict.get(self.tensor_keys.action, as_padded_tensor=True, padding_side="left", padding_value=-100)
        if batch.shape != tuple(tokens.shape) or tuple(logits.shape[:2]) != batch.shape:
            raise ValueError(
                f"role ids {batch.shape} must align with the tokens {tuple(tokens.shape)} and logits "
                f"{tuple(logits.shape[:2])} (left-padded like ('tokens', 'full'))"
            )
        scale = self.sampling_temperature if cfg.env_temperature == "rollout" else 1.0

        def env_logps(selected: torch.Tensor) -> torch.Tensor:
            """Log-probs of the selected tokens from this forward's logits (torchrl's own log-probs do not cover
            tool messages), zero elsewhere; without grad when λ = 0 (the CE is then a metric only)."""
            with torch.set_grad_enabled(torch.is_grad_enabled() and lam != 0.0):
                # chunked, float32 per block, no copy of the logits kept for backward (objective.target_logps)
                return target_logps(logits, tokens.masked_fill(~selected, -1), scale)

        res = echo_loss(
            torch.zeros(batch.shape, dtype=torch.float32, device=logits.device),  # the policy term is torchrl's
            batch,
            cfg,
            step=self.echo_step,
            denominators=self.echo_denominators,
            env_logps=env_logps,
            policy_loss=out.loss_objective,
        )
        metrics = res.metrics
        out.loss_world_model = res.world_loss if lam != 0.0 else None
        if cfg.verifier_free:  # no rewards: every policy-side loss becomes an exact zero, only the env term trains
            for key in ("loss_objective", "loss_entropy", "loss_kl_to_ref", "loss_kl_to_inference"):
                value = getattr(out, key, None)
                if value is not None:
                    setattr(out, key, torch.zeros_like(value.detach()))
        out.world_model_ce = metrics["echo/env_ce_per_token"]
        out.world_model_tokens = metrics["echo/tokens/selected"]
        out.world_model_coeff = metrics["echo/world_model_coeff"]
        return out


def global_denominators(
    batches: Iterable[TensorDictBase], loss: EchoGRPOLoss, world_size: int = 1, all_reduce: bool = False
) -> Denominators:
    """World-term denominators over every micro-batch of one optimizer step (set them on ``loss.echo_denominators``).

    ``all_reduce`` sums them over the ``torch.distributed`` group; ``world_size`` rescales them for gradients that
    DDP/FSDP average over ranks.
    """
    parts = []
    for td in batches:
        b = loss.echo_batch(td)
        if b is None:
            raise KeyError(f"a micro-batch has no role ids under {loss.role_ids_key!r}")
        parts.append(local_denominators(b, loss.echo_config))
    total = Denominators.total(parts)
    if all_reduce:
        total = total.all_reduce()
    return total.per_rank(world_size) if world_size > 1 else total


def history_role_ids(
    history: Any,
    tokenizer: Any,
    *,
    chat_template: str | None = None,
    chat_template_name: str | None = None,
    observation_roles: Sequence[str] = ("tool",),
    policy_roles: Sequence[str] = ("assistant",),
    segments: Sequence[Sequence[Sequence[tuple[str, str]] | None]] | None = None,
) -> torch.Tensor:
    """(B, T) role ids for a batch of torchrl ``History`` conversations, left-padded with -1 like
    ``ChatHistory.to_tokens(...)`` padded on the left.

    Each conversation is rendered with the same template torchrl uses (pass the same ``chat_template`` /
    ``chat_template_name`` as the wrapper). Tokens lying entirely inside the body of an ``observation_roles``
    message are ``env_output``, inside a ``policy_roles`` body ``action``; all template scaffolding is ``context``.
    ``segments`` (per conversation, per message: ``[(role, text), ...]`` or None) refines observation bodies to
    the roles the env tagged (``env_output`` / ``warning`` / ``context``), e.g. ``Rollout.conversation``'s.
    Raises if the template is not prefix-stable or the ids differ from torchrl's own tokenization.
    """
    rows = [history[i] for i in range(history.batch_size[0])] if history.ndim > 1 else [history]
    if segments is not None and len(segments) != len(rows):
        raise ValueError(f"segments for {len(segments)} conversations, history has {len(rows)}")
    out: list[torch.Tensor] = []
    for i, conv in enumerate(rows):
        segs = segments[i] if segments is not None else None
        out.append(
            _conversation_roles(
                conv, tokenizer, chat_template, chat_template_name, observation_roles, policy_roles, segs
            )
        )
    width = max(len(r) for r in out)
    padded = torch.full((len(out), width), PAD_ROLE_CODE, dtype=torch.long)
    for i, r in enumerate(out):
        padded[i, width - len(r) :] = r
    return padded


def _conversation_roles(
    conv: Any,
    tokenizer: Any,
    chat_template: str | None,
    chat_template_name: str | None,
    observation_roles: Sequence[str],
    policy_roles: Sequence[str],
    segments: Sequence[Sequence[tuple[str, str]] | None] | None = None,
) -> torch.Tensor:
    kw: dict[str, Any] = {"tokenizer": tokenizer, "add_generation_prompt": False, "tokenize": False}
    if chat_template is not None:
        kw["chat_template"] = chat_template
    if chat_template_name is not None:
        kw["chat_template_name"] = chat_template_name
    messages = [m for m in conv.tolist(tolist_first=True) if m["role"] != "<none>"]
    n = len(messages)
    conv = conv[:n]
    text = conv.apply_chat_template(**kw)
    starts = [0]
    for k in range(1, n + 1):
        prefix = conv[:k].apply_chat_template(**kw)
        if not text.startswith(prefix):
            raise ValueError(f"the chat template is not prefix-stable at message {k - 1}: cannot attribute roles")
        starts.append(len(prefix))
    spans: list[tuple[int, int, int]] = []
    for k, m in enumerate(messages):
        role = m["role"]
        code = Role.ENV_OUTPUT.code if role in observation_roles else Role.ACTION.code if role in policy_roles else None
        content = m.get("content") or ""
        if code is None or not isinstance(content, str) or not content:
            continue
        pos = text.find(content, starts[k], starts[k + 1])
        if pos < 0:
            raise ValueError(f"message {k} ({role}) does not render its content verbatim: cannot attribute roles")
        segs = segments[k] if segments is not None and k < len(segments) else None
        if segs and code == Role.ENV_OUTPUT.code:
            if "".join(t for _, t in segs) != content:
                raise ValueError(f"message {k}: its segments do not join to its content")
            at = pos
            for seg_role, seg_text in segs:
                spans.append((at, at + len(seg_text), Role(seg_role).code))
                at += len(seg_text)
        else:
            spans.append((pos, pos + len(content), code))
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    ref = conv.apply_chat_template(**{**kw, "tokenize": True, "return_dict": True})
    ref_ids = _flat_ids(ref.get("input_ids", as_list=True) if hasattr(ref, "get") else ref["input_ids"])
    if ids != ref_ids:
        raise ValueError("tokenizing the rendered text does not reproduce torchrl's token ids")
    roles = torch.full((len(ids),), Role.CONTEXT.code, dtype=torch.long)
    for t, (s, e) in enumerate(enc["offset_mapping"]):
        for a, b, code in spans:
            if a <= s and e <= b and e > s:
                roles[t] = code
                break
    return roles


def rollout_batch(
    rollouts: Sequence[Any], tokenizer: Any, advantages: Sequence[float], *, observation_role: str = "tool"
) -> TensorDictBase:
    """A torchrl GRPO batch from env rollouts (``openenv_echo.adapters.rollouts.Rollout``): each episode's
    ``conversation`` as a ``ChatHistory`` (prompt = the messages before the first assistant turn), its tokens,
    masks, the rollout's advantage on every position, and role ids refined to the env's segments.

    ``("log_probs", "full")`` holds zeros: fill it with the sampling policy's log-probs (see the recipe) before
    the loss if the ratio should start at 1.
    """
    import tensordict as tdlib
    from tensordict import TensorDict, lazy_stack
    from tensordict.tensorclass import MetaData
    from torchrl.data.llm import History
    from torchrl.modules.llm.policies.common import ChatHistory, Masks

    if len(rollouts) != len(advantages):
        raise ValueError(f"{len(rollouts)} rollouts but {len(advantages)} advantages")
    samples = []
    with tdlib.set_list_to_stack(True):
        for r, adv in zip(rollouts, advantages):
            msgs = list(r.conversation)
            k = next((i for i, m in enumerate(msgs) if m["role"] == "assistant"), None)
            if not k:
                raise ValueError("a rollout has no assistant turn after its prompt: nothing for GRPO to train")
            full = History(
                role=[m["role"] for m in msgs], content=[m["content"] for m in msgs], batch_size=(len(msgs),)
            ).unsqueeze(0)
            hist = ChatHistory(prompt=full[:, :k], response=full[:, k:], full=full, batch_size=(1,))
            toks = hist.to_tokens(tokenizer)
            t = toks.get("full", as_padded_tensor=True).shape[-1]
            roles = history_role_ids(
                full, tokenizer, observation_roles=(observation_role,), segments=[[m.get("segments") for m in msgs]]
            )
            td = TensorDict(
                {
                    "advantage": torch.full((1, t, 1), float(adv)),
                    "history": hist,
                    "tokens": toks,
                    "masks": Masks(
                        all_attention_mask=torch.ones(1, t, dtype=torch.bool),
                        all_assistant_mask=None,
                        padded=MetaData(False),
                        batch_size=(1,),
                    ),
                    "log_probs": torch.zeros_like(toks, dtype=torch.float32),
                    ROLE_IDS_KEY: roles,
                },
                batch_size=(1,),
            )
            samples.append(td[0])
        return lazy_stack(samples)


def _flat_ids(x: Any) -> list[int]:
    """Token ids of one conversation from whatever container the tokenizer returned ((1, T), [T], [[T]])."""
    if isinstance(x, torch.Tensor):
        return [int(v) for v in x.reshape(-1).tolist()]
    if isinstance(x, (list, tuple)) and len(x) == 1 and isinstance(x[0], (list, tuple, torch.Tensor)):
        return _flat_ids(x[0])
    return [int(v) for v in x]


__all__ = [
    "ROLE_IDS_KEY",
    "EchoGRPOLoss",
    "EchoGRPOLossOutput",
    "global_denominators",
    "history_role_ids",
    "rollout_batch",
]

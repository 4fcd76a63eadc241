"""prime-rl's side of ECHO on verifiers traces: the role of every token the renderer produced for an observation,
the per-token ``ce`` loss-weight stream prime-rl's trainer consumes, the echo filter for prime-rl's own
``algo.type = "echo"``, and the training samples prime-rl builds from a trace.

Works on verifiers' trace objects by attribute (``trace.nodes``, ``node.token_ids``/``mask``/``is_content``/
``loss_weights``, ``trace.branches``, ``trace.info``), so it imports without verifiers; the environment that fills
them is ``openenv_echo.adapters.verifiers``.

* **Roles.** An observation node's ``token_ids`` are its template scaffold and body as the renderer tokenized them.
  The node's text is decoded with per-token offsets (``token_offsets``), the body (the observation's segments
  joined) is located in it — at the renderer's ``is_content`` run when the body also occurs in the template text —
  and each token takes the role of the characters it covers; a token across a role boundary and every template
  token is ``context`` (``node_roles``; the straddle rule of ``openenv_echo.tokenization``).
* **The ce stream.** The selected tokens (``world_loss_target``, after the first action) of each observation node
  get ``node.loss_weights["ce"] = λ·c_role`` (``stamp_world_weights``). prime-rl ships a node's ``ce`` stream
  as the sample's ``ce_weights`` whatever its algorithm, and its trainer adds ``Σ w·(-log p) / N_ce`` (masked NLL
  over the global count of ce tokens) to the RL term: ECHO with ``world_model_coeff = λ`` and ``token_mean``.
* **prime-rl's echo.** ``algo.type = "echo"`` weights whole observation *messages* by message role (their
  ``is_content`` tokens); ``keep_world_targets`` as its ``filter`` narrows that to the selected *segments*.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..objective import EchoConfig
from ..roles import Role, WorldLossTarget, world_target_mask
from ..tokenization.fragment_encoding import fragment_codec
from ..tokenization.role_boundaries import token_roles

INFO_KEY = "openenv_echo"
"""Key of this adapter's entry in ``trace.info``: ``{"roles": {node index: role codes as a digit string}}``."""

CE_STREAM = "ce"
"""The ``loss_weights`` stream prime-rl's trainer reads as the cross-entropy component's per-token weights."""


class WorldWeightsConfig(BaseModel):
    """Which observation tokens the ``ce`` stream trains, and with what weight: the token-selection part of
    ``openenv_echo.objective.EchoConfig`` (normalization is prime-rl's: each loss component is divided by its
    own global token count, i.e. ``token_mean``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    world_model_coeff: float = Field(default=0.0, ge=0.0, description="λ; 0 stamps no ce stream (vanilla RL).")
    world_loss_target: WorldLossTarget = Field(default="env_only", description="As EchoConfig.world_loss_target.")
    role_coeffs: dict[Role, float] = Field(default_factory=dict, description="As EchoConfig.role_coeffs.")

    def echo_config(self) -> EchoConfig:
        """The same selection as an ``EchoConfig`` (validated there: finite λ, coefficients of selected roles)."""
        return EchoConfig(
            world_model_coeff=self.world_model_coeff,
            world_loss_target=self.world_loss_target,
            role_coeffs=self.role_coeffs,
        )


# -- roles of the renderer's tokens -------------------------------------------------------------------------------
def token_offsets(tokenizer: Any, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """The text ``ids`` decode to (special tokens kept, nothing stripped) and each token's ``(start, end)`` in it.

    Per-token decoding when it concatenates to the whole; otherwise (a character split over tokens, e.g. UTF-8
    bytes in byte-level BPE) by decoding growing prefixes: a token that does not finish a character is
    zero-width and the token that finishes it covers it."""
    codec = fragment_codec(tokenizer)
    text = codec.decode(ids)
    pieces = codec.scaffold.decode_batch([[int(i)] for i in ids], skip_special_tokens=False)
    offsets: list[tuple[int, int]] = []
    if "".join(pieces) == text:
        pos = 0
        for p in pieces:
            offsets.append((pos, pos + len(p)))
            pos += len(p)
        return text, offsets
    end = 0
    for k in range(1, len(ids) + 1):
        prefix = codec.decode(ids[:k])
        new_end = len(prefix) if text.startswith(prefix) and len(prefix) >= end else end
        offsets.append((end, new_end))
        end = new_end
    if end != len(text):
        raise ValueError("token ids do not decode to a stable text; cannot place role boundaries")
    return text, offsets


def node_roles(
    tokenizer: Any, token_ids: Sequence[int], is_content: Sequence[bool], segments: Sequence[tuple[Role, str]]
) -> list[int] | None:
    """Role code per token of one observation node (``token_ids``: its template scaffold and body as the renderer
    tokenized them), or None when the body (the segments' texts joined) cannot be placed: not in the node's text (a
    template that rewrites bodies), there more than once with no ``is_content`` to pick one, or ids that do not
    decode to a stable text."""
    ctx = Role.CONTEXT.code
    body = "".join(text for _, text in segments)
    if not body:
        return [ctx] * len(token_ids)
    try:
        text, offsets = token_offsets(tokenizer, token_ids)
    except ValueError:  # ids that do not decode to one stable text: nothing can be placed on them
        return None
    starts = [i for i in range(len(text)) if text.startswith(body, i)]
    if not starts:
        return None
    if len(starts) > 1:
        if len(is_content) != len(token_ids) or not any(is_content):
            return None
        first = next(offsets[k][0] for k, c in enumerate(is_content) if c)
        starts = [min(starts, key=lambda s: abs(s - first))]
    croles = bytearray([ctx]) * len(text)
    pos = starts[0]
    for role, seg in segments:
        croles[pos : pos + len(seg)] = bytes([role.code]) * len(seg)
        pos += len(seg)
    roles, _ = token_roles(len(text), croles, offsets)
    return [int(r) for r in roles]


# -- the ce stream, and what prime-rl reads ----------------------------------------------------------------------
def stamp_world_weights(
    trace: Any, observations: Sequence[Sequence[tuple[Role, str]]], tokenizer: Any, weights: WorldWeightsConfig
) -> None:
    """Give ``trace``'s observation nodes their token roles (``trace.info``) and, when λ > 0, their ``ce`` stream.

    ``observations`` are the segments of the observation messages sent, in order; nodes are matched to them by
    content. A trace without token ids (an eval client) or a node whose body cannot be placed gets no weights,
    counted in the metrics ``echo/unplaced_nodes``."""
    queue: dict[tuple[str, ...], list[Sequence[tuple[Role, str]]]] = {}
    for segs in observations:
        queue.setdefault(tuple(text for _, text in segs), []).append(segs)
    roles: dict[int, list[int]] = {}
    unplaced = 0
    for idx, node in enumerate(trace.nodes):
        msg = node.message
        if node.sampled or msg.role != "user" or not isinstance(msg.content, list):
            continue
        key = tuple(part.text for part in msg.content if getattr(part, "type", "") == "text" and part.text)
        pending = queue.get(key)
        if not pending:
            continue
        segs = pending.pop(0)
        placed = node_roles(tokenizer, node.token_ids, node.is_content, segs) if tokenizer and node.token_ids else None
        if placed is None:
            unplaced += 1
        else:
            roles[idx] = placed
    trace.info.setdefault(INFO_KEY, {})["roles"] = {str(i): "".join(map(str, c)) for i, c in roles.items()}
    cfg = weights.echo_config()
    lam = cfg.coeff_at(0)
    selected: dict[int, list[bool]] = {}  # per observation node, from the first branch holding it
    for node_ids in _branch_node_ids(trace):
        mask = _selected(_branch_roles(trace, node_ids, roles), cfg.target_roles)
        offset = 0
        for nid in node_ids:
            n = len(trace.nodes[nid].token_ids)
            if nid in roles and nid not in selected:
                selected[nid] = mask[offset : offset + n]
            offset += n
    for nid, sel in selected.items():
        stream = [lam * cfg.role_coeff(Role.from_code(c)) if s else 0.0 for c, s in zip(roles[nid], sel)]
        if any(stream):
            node = trace.nodes[nid]
            node.loss_weights = {**(node.loss_weights or {}), CE_STREAM: stream}
    codes = [c for r in roles.values() for c in r]
    trace.record_metrics(
        {
            "echo/env_output_tokens": codes.count(Role.ENV_OUTPUT.code),
            "echo/warning_tokens": codes.count(Role.WARNING.code),
            "echo/selected_tokens": sum(sum(s) for s in selected.values()),
            "echo/unplaced_nodes": unplaced,
            "echo/world_model_coeff": lam,
        }
    )


def _branch_node_ids(trace: Any) -> list[list[int]]:
    """Each branch of ``trace`` as node indices (root to leaf), in ``trace.branches`` order."""
    ids = {id(n): i for i, n in enumerate(trace.nodes)}
    return [[ids[id(n)] for n in branch.nodes] for branch in trace.branches]


def _branch_roles(trace: Any, node_ids: Sequence[int], roles: dict[int, list[int]]) -> list[int]:
    """Role code per token of a branch: sampled tokens are actions, observation nodes carry their roles, every
    other token (prompt messages, template scaffold, generation prompts) is context."""
    out: list[int] = []
    for nid in node_ids:
        node = trace.nodes[nid]
        if nid in roles:
            out += roles[nid]
        elif node.sampled:
            out += [Role.ACTION.code if m else Role.CONTEXT.code for m in node.mask]
        else:
            out += [Role.CONTEXT.code] * len(node.token_ids)
    return out


def _selected(codes: Sequence[int], target_roles: frozenset[Role]) -> list[bool]:
    """World-target mask of one branch's role codes (the shared rule: selected roles after the first action)."""
    if not codes:
        return []
    return [bool(x) for x in world_target_mask(np.asarray(codes, dtype=np.int64), target_roles).tolist()]


def recorded_roles(trace: Any) -> dict[int, list[int]]:
    """The role codes ``EchoEnv`` recorded for ``trace``'s observation nodes: ``{node index: codes}``."""
    table = trace.info.get(INFO_KEY, {}).get("roles", {})
    return {int(k): [int(c) for c in v] for k, v in table.items()}


def _trainable_branches(trace: Any) -> list[tuple[Any, list[bool]]]:
    """The branches prime-rl turns into training samples, each with its trainable mask: the sampled mask, with a
    sampled node shared by several branches trainable only in the first (``iter_trainable_branches``);
    branches left with nothing to train are skipped."""
    trained: set[int] = set()
    out = []
    for branch in trace.branches:
        mask: list[bool] = []
        for node in branch.nodes:
            if node.sampled and any(node.mask) and id(node) in trained:
                mask += [False] * len(node.mask)
            else:
                if node.sampled and any(node.mask):
                    trained.add(id(node))
                mask += list(node.mask)
        if any(mask):
            out.append((branch, mask))
    return out


def keep_world_targets(trace: Any, *, world_loss_target: WorldLossTarget = "env_only") -> list[list[bool]]:
    """prime-rl's echo filter (``[orchestrator.algo.filter] import_path =
    "openenv_echo.adapters.prime_rl.keep_world_targets"``): one keep-mask per trainable branch over its
    ``token_ids``, True exactly on the tokens ``world_loss_target`` selects (the roles ``EchoEnv`` recorded).
    prime-rl's ``EchoAlgorithm`` weights whole observation messages by role; this narrows it to those segments."""
    target = EchoConfig(world_loss_target=world_loss_target).target_roles
    roles = recorded_roles(trace)
    ids = {id(n): i for i, n in enumerate(trace.nodes)}
    masks = []
    for branch, _ in _trainable_branches(trace):
        codes = _branch_roles(trace, [ids[id(n)] for n in branch.nodes], roles)
        masks.append(_selected(codes, target))
    return masks


def training_samples(trace: Any) -> list[dict[str, Any]]:
    """What prime-rl's orchestrator ships to its trainer for ``trace`` (``trace_to_samples``), built with
    verifiers' ``Branch`` API: per trainable branch ``token_ids``, ``mask``, ``logprobs``, ``advantages`` (None
    until credit is assigned) and ``ce_weights`` (None when no node carries a ``ce`` stream; a node shared by
    several branches counts in the first only); plus ``role_ids``, openenv-echo's role code per token (not part
    of prime-rl's sample). prime-rl itself needs Python 3.12, vLLM and CUDA and does not install here; this is
    its conversion, restated, so a CPU test can check what its trainer would receive."""
    roles = recorded_roles(trace)
    ids = {id(n): i for i, n in enumerate(trace.nodes)}
    samples = []
    seen: set[int] = set()
    for branch, mask in _trainable_branches(trace):
        ce: list[float] = []
        for node in branch.nodes:
            w = (node.loss_weights or {}).get(CE_STREAM)
            if w is None or id(node) in seen:
                ce += [0.0] * len(node.token_ids)
                continue
            if len(w) != len(node.token_ids):
                raise ValueError(f"ce stream of {len(w)} weights on a node of {len(node.token_ids)} tokens")
            ce += list(w)
            if any(w):
                seen.add(id(node))
        samples.append(
            {
                "token_ids": branch.token_ids,
                "mask": mask,
                "logprobs": branch.logprobs,
                "advantages": branch.advantages,
                "ce_weights": ce if any(ce) else None,
                "role_ids": _branch_roles(trace, [ids[id(n)] for n in branch.nodes], roles),
            }
        )
    return samples


__all__ = [
    "CE_STREAM",
    "INFO_KEY",
    "WorldWeightsConfig",
    "keep_world_targets",
    "node_roles",
    "recorded_roles",
    "stamp_world_weights",
    "token_offsets",
    "training_samples",
]

"""ECHO for prime-rl: a verifiers (v1) environment over any openenv-echo server (and, through ``PlainTextRule``,
any OpenEnv server) that keeps each observation's role segments as separate message content and stamps
prime-rl's per-token ``ce`` loss weights on the observation tokens ECHO trains.

verifiers' own OpenEnv taskset (``verifiers.v1.tasksets.openenv``) JSON-dumps each observation into the user
turn, so which characters the world wrote and which the harness wrote is lost. Here:

* **Messages.** Every observation is one user message whose content is a list of text parts, one per role
  segment, in order (a renderer joins text parts with nothing in between, so the model sees exactly the
  segments' text).
* **Roles on tokens.** After the episode each observation node of the trace (its ``token_ids`` are what the
  renderer produced) gets a role per token: the node's text is decoded with per-token offsets, the message body
  is located in it (at the renderer's ``is_content`` run when it reports one), and every token takes the role of
  the characters it covers; a token across a role boundary, and every template token, is ``context``
  (``openenv_echo.tokenize.runs.token_roles``). The codes are kept in ``trace.info["openenv_echo"]["roles"]``.
* **Loss weights.** With ``echo.world_model_coeff = λ > 0`` the selected tokens (``world_loss_target``, after the
  first action, as everywhere in openenv-echo) of each observation node get ``node.loss_weights["ce"] = λ·c_role``.
  prime-rl ships a node's ``ce`` stream to its trainer as the sample's ``ce_weights`` whatever its algorithm; its
  trainer adds ``Σ w·(-log p) / N_ce`` (masked NLL over the global count of ce tokens) to the RL term.
  With prime-rl's own ``algo.type = "echo"``, pass :func:`keep_world_targets` as its ``filter``: prime-rl then
  weights observation *messages* by role and the filter narrows them to the selected *segments*.

The plugin id is ``openenv-echo-verifiers`` (the ``openenv_echo_verifiers`` package re-exports
:class:`EchoTaskset`, :class:`EchoEnv` and :class:`InProcessChatHarness`); its default harness runs verifiers'
null-harness chat program in this process (see :class:`InProcessChatHarness`). Needs ``verifiers`` 0.4 (Python
≥ 3.11; ``pip install openenv-echo[verifiers]``).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import shutil
import tempfile
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import BaseModel, ConfigDict, Field
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.harnesses.null import NullHarness
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
from verifiers.v1.runtimes import ProgramResult
from verifiers.v1.tasksets.openenv.taskset import parse_action

from ..client import AsyncEnvClient, EnvClientError, PlainTextRule, StepResult
from ..objective import EchoConfig
from ..roles import Role, WorldLossTarget, world_target_mask
from ..tokenize.fragment import fragment_codec
from ..tokenize.runs import token_roles

INFO_KEY = "openenv_echo"
"""Key of this adapter's entry in ``trace.info``: ``{"roles": {node index: role codes as a digit string}}``."""

CE_STREAM = "ce"
"""The ``loss_weights`` stream prime-rl's trainer reads as the cross-entropy component's per-token weights."""


# -- configuration ---------------------------------------------------------------------------------------------
class WorldWeightsConfig(BaseModel):
    """Which observation tokens the ``ce`` stream trains, and with what weight: the token-selection part of
    :class:`openenv_echo.objective.EchoConfig` (normalization is prime-rl's: each loss component is divided by its
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


class EchoTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]  # verifiers ships no type information
    """``[env.taskset]``: the server and the worlds (one task per reset-options object)."""

    base_url: str = Field(min_length=1, description="An OpenEnv server (openenv-echo or any), http(s)://host:port.")
    resets: list[dict[str, Any]] = Field(default_factory=lambda: [{}], min_length=1)
    """One task per entry: the options the episode is reset with (``{"seed": 3, "max_steps": 4}``)."""
    instructions: str | None = None
    """The task's system prompt (how to act in this env)."""
    plain_text_fields: list[str] | None = None
    """For observations without segments (a plain OpenEnv env): ``PlainTextRule.fields`` (None: its default)."""
    plain_text_role: Role = Role.ENV_OUTPUT
    """The role ``PlainTextRule`` gives such observations."""


class EchoTaskData(vf.TaskData):  # type: ignore[misc]
    base_url: str
    reset: dict[str, Any]
    plain_text_fields: list[str] | None = None
    plain_text_role: Role = Role.ENV_OUTPUT


class EchoTask(vf.Task[EchoTaskData]):  # type: ignore[misc]
    pass


class EchoTaskset(vf.Taskset[EchoTask, EchoTasksetConfig]):  # type: ignore[misc]
    """One task per ``resets`` entry, in order; the prompt is the server's reset observation."""

    def load(self) -> Iterator[EchoTask]:
        c = self.config
        for idx, reset in enumerate(c.resets):
            data = EchoTaskData(
                name=f"{c.base_url}#{idx}",
                prompt=None,
                system_prompt=c.instructions,
                base_url=c.base_url,
                reset=dict(reset),
                plain_text_fields=c.plain_text_fields,
                plain_text_role=c.plain_text_role,
            )
            yield EchoTask(data, c.task)


class EchoEnvConfig(vf.EnvConfig):  # type: ignore[misc]
    """``[env]``: the one seat ``agent`` and the ECHO weights."""

    agent: vf.AgentConfig = vf.AgentConfig()
    echo: WorldWeightsConfig = WorldWeightsConfig()


# -- the environment ---------------------------------------------------------------------------------------------
class EchoEnv(vf.Env[EchoEnvConfig]):  # type: ignore[misc]
    """The agent plays the server: its reply is the action (JSON, or the value of a one-field action), the next
    observation comes back as the user turn (one text part per role segment), ``done`` or a refused action ends
    the exchange. Rewards are summed onto the trace (``openenv_reward``); after the exchange the trace's
    observation tokens get their roles and the ``ce`` loss weights (see the module docstring)."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        data = task.data
        rule = PlainTextRule(
            fields=tuple(data.plain_text_fields) if data.plain_text_fields is not None else PlainTextRule().fields,
            role=Role(data.plain_text_role),
        )
        sent: list[list[tuple[Role, str]]] = []
        total = 0.0
        async with AsyncEnvClient(data.base_url, segment_rule=rule) as client:
            schema = (await client.schema())["action"]
            result = await client.reset(**data.reset)
            async with agents.agent.interaction(task) as interaction:
                trace = interaction.trace
                sent.append(_segments(result))
                segment = await interaction.turn([observation_message(result)])
                while not segment.terminated and not result.done:
                    reply = segment.last_reply
                    if not reply:
                        trace.stop("empty_action")
                        break
                    try:
                        action = parse_action(reply, schema)
                        result = await client.step(action, action_text=reply)
                    except (ValueError, EnvClientError) as e:  # an unparseable or refused action ends the episode
                        trace.record_metric("echo/refused_action", 1.0)
                        trace.info.setdefault(INFO_KEY, {})["end"] = f"{type(e).__name__}: {e}"
                        trace.stop("refused_action")
                        break
                    total += float(result.reward or 0.0)
                    if result.done:
                        break
                    sent.append(_segments(result))
                    segment = await interaction.turn([observation_message(result)])
        trace.record_reward("openenv_reward", total)
        stamp_world_weights(trace, sent, _tokenizer(agents.agent.ctx), self.config.echo)


def observation_message(result: StepResult) -> vf.UserMessage:
    """The user turn for one observation: one text part per non-empty role segment, in order."""
    return vf.UserMessage(content=[vf.TextContentPart(text=s.text) for s in result.segments if s.text])


def _segments(result: StepResult) -> list[tuple[Role, str]]:
    return [(s.role, s.text) for s in result.segments if s.text]


@functools.lru_cache(maxsize=4)
def _load_tokenizer(name: str) -> Any:
    from renderers.base import load_tokenizer

    return load_tokenizer(name)


QWEN3_RENDERER_TOKENS = ("<tool_call>", "</tool_call>")
"""Tokens the ``renderers`` Qwen3 renderer requires beyond the offline ``qwen3`` tokenizer's."""


def offline_renderer_tokenizer(cache_dir: str | os.PathLike[str] | None = None) -> str:
    """A directory holding a real tokenizer for renderers' ``qwen3`` renderer, built offline: the ``qwen3``
    family of :func:`openenv_echo.tokenize.build_tokenizer` plus :data:`QWEN3_RENDERER_TOKENS` (saved once under
    ``cache_dir``, default the tokenizer cache). Use it as ``TrainClientConfig.renderer_model_name`` with
    ``renderer=Qwen3RendererConfig(enable_thinking=False)``, and size the model's vocabulary to it."""
    from ..tokenize import build_tokenizer
    from ..tokenize.local import default_cache_dir

    tok = build_tokenizer("qwen3")
    key = hashlib.sha256(tok.backend_tokenizer.to_str().encode()).hexdigest()[:16]
    target = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = target / f"qwen3-renderer-{key}"
    if not (target / "tokenizer.json").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".building-"))
        try:
            from transformers import AutoTokenizer

            tok.save_pretrained(str(tmp))  # a copy: the built tokenizer object is shared (memoized)
            copy = AutoTokenizer.from_pretrained(str(tmp))
            copy.add_tokens(list(QWEN3_RENDERER_TOKENS))
            copy.save_pretrained(str(tmp))
            try:
                tmp.rename(target)
            except OSError:  # another process saved it first
                if not (target / "tokenizer.json").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def _tokenizer(ctx: Any) -> Any:
    """The tokenizer the renderer tokenized with (``TrainClientConfig.renderer_model_name``, else the model);
    None for a client that returns no token ids (eval)."""
    client = getattr(ctx, "client", None)
    if not isinstance(client, vf.TrainClientConfig):
        return None
    return _load_tokenizer(client.renderer_model_name or ctx.model)


# -- roles and weights on the trace's tokens ---------------------------------------------------------------------
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
    tokenized them), or None when the body (the segments' texts joined) is not found once in the node's text
    (a template that rewrites bodies, or an ambiguous body and no ``is_content`` to pick an occurrence)."""
    ctx = Role.CONTEXT.code
    body = "".join(text for _, text in segments)
    if not body:
        return [ctx] * len(token_ids)
    text, offsets = token_offsets(tokenizer, token_ids)
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
    import torch

    if not codes:
        return []
    rid = torch.tensor(list(codes), dtype=torch.long)
    return [bool(x) for x in world_target_mask(rid, target_roles).tolist()]


def recorded_roles(trace: Any) -> dict[int, list[int]]:
    """The role codes :class:`EchoEnv` recorded for ``trace``'s observation nodes: ``{node index: codes}``."""
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
    "openenv_echo.adapters.verifiers.keep_world_targets"``): one keep-mask per trainable branch over its
    ``token_ids``, True exactly on the tokens ``world_loss_target`` selects (the roles :class:`EchoEnv` recorded).
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


def assign_group_advantages(traces: Sequence[Any], rewards: Sequence[float]) -> list[float]:
    """prime-rl's GRPO credit for one group: ``reward - mean(rewards)`` on every sampled token of each trace
    (``node.advantages``, as ``GRPOAlgorithm.score_group`` assigns it); returns the advantages."""
    if len(traces) != len(rewards) or not traces:
        raise ValueError(f"{len(traces)} traces for {len(rewards)} rewards")
    mean = sum(rewards) / len(rewards)
    adv = [float(r - mean) for r in rewards]
    for trace, a in zip(traces, adv):
        for node in trace.nodes:
            if any(node.mask):
                node.advantages = [a] * sum(node.mask)
    return adv


# -- the harness -------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _chat_program() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "verifiers_chat_program"}
    exec(compile(CHAT_PROGRAM_SOURCE, "<verifiers chat program>", "exec"), namespace)
    return namespace


class InProcessChatHarness(NullHarness):  # type: ignore[misc]
    """verifiers' ``null`` harness (a tool-less chat loop), run in this process: the same program source the null
    harness launches (``CHAT_PROGRAM_SOURCE``: its ``Compactor`` and ``run_chat_loop``), called here instead of
    through ``uv`` in a runtime. Every model call still goes to the interception endpoint, so the trace is
    recorded as for any harness; no ``uv``, no package download, no child process. Choose verifiers' own
    ``null`` (``[env.agent.harness] id = "null"``) to launch the program as verifiers does."""

    SUPPORTS_MCP = False
    SUPPORTS_TOOL_INTERCEPTION = False

    async def setup(self, runtime: Any) -> None:
        return None

    async def launch(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: Any,
        tool_interception_url: str | None = None,
    ) -> ProgramResult:
        from openai import AsyncOpenAI

        if mcp_urls:
            return ProgramResult(exit_code=2, stdout="", stderr="the in-process chat harness runs no MCP tools")
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages += [message_to_wire(m) for m in prompt]
        program = _chat_program()
        args = argparse.Namespace(
            api_key=secret, tool_interception_url="", bash=False, edit=False, search=False, serper_key=""
        )
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        try:
            compactor = program["Compactor"](client, ctx.model, [], False, None)
            compactor.note_good(messages)
            await program["run_chat_loop"](args, compactor, messages, {}, {}, None)
        except SystemExit as e:  # the program's exit on a lost model connection
            return ProgramResult(exit_code=int(e.code or 1), stdout="", stderr=traceback.format_exc())
        except Exception:
            return ProgramResult(exit_code=1, stdout="", stderr=traceback.format_exc())
        finally:
            await client.close()
        return ProgramResult(exit_code=0, stdout="", stderr="")


__all__ = [
    "CE_STREAM",
    "INFO_KEY",
    "EchoEnv",
    "EchoEnvConfig",
    "EchoTask",
    "EchoTaskData",
    "EchoTaskset",
    "EchoTasksetConfig",
    "InProcessChatHarness",
    "WorldWeightsConfig",
    "assign_group_advantages",
    "keep_world_targets",
    "node_roles",
    "observation_message",
    "stamp_world_weights",
    "token_offsets",
    "training_samples",
]

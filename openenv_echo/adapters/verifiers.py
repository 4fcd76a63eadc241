"""A verifiers (v1) environment over any openenv-echo server — and, through ``PlainTextRule``, any OpenEnv server —
that keeps each observation's role segments as separate message content and gives prime-rl its per-token ``ce``
loss weights for ECHO.

verifiers' own OpenEnv taskset (``verifiers.v1.tasksets.openenv``) JSON-dumps each observation into the user
turn, so which characters the world wrote and which the harness wrote is lost. ``EchoEnv`` instead sends each
observation as one user message whose content is a list of text parts, one per role segment, in order (renderers
join text parts with nothing in between: the model sees exactly the segments' text), and after the exchange
stamps the trace with the roles of the renderer's tokens and the ``ce`` stream (``openenv_echo.adapters.prime_rl``).

The plugin id is ``openenv-echo-verifiers`` (the ``openenv_echo_verifiers`` package exports ``EchoTaskset``,
``EchoEnv`` and ``InProcessChatHarness``, the taskset's default harness). Needs ``verifiers`` 0.4
(Python ≥ 3.11; ``pip install openenv-echo[verifiers]``, in an environment without ``openenv``: verifiers pins
mcp 2.0.0, openenv's fastmcp needs mcp < 2).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import shutil
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.harnesses.null import NullHarness
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
from verifiers.v1.runtimes import ProgramResult
from verifiers.v1.tasksets.openenv.taskset import parse_action

from ..client import AsyncEnvClient, EnvClientError, PlainTextRule, StepResult
from ..roles import Role
from .prime_rl import INFO_KEY, WorldWeightsConfig, stamp_world_weights


# -- configuration ---------------------------------------------------------------------------------------------
def _one_default_reset() -> list[dict[str, Any]]:
    return [{}]


class EchoTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]  # verifiers ships no type information
    """``[env.taskset]``: the server and the worlds (one task per reset-options object)."""

    base_url: str = Field(min_length=1, description="An OpenEnv server (openenv-echo or any), http(s)://host:port.")
    resets: list[dict[str, Any]] = Field(default_factory=_one_default_reset, min_length=1)
    """One task per entry: the options the episode is reset with (``{"seed": 3, "max_steps": 4}``)."""
    instructions: str | None = None
    """The task's system prompt (how to act in this env)."""
    plain_text_fields: list[str] | None = None
    """For observations without segments (a plain OpenEnv env): ``PlainTextRule.fields`` (None: its default)."""
    plain_text_role: Role = Role.ENV_OUTPUT
    """The role ``PlainTextRule`` gives such observations."""


class EchoTaskData(vf.TaskData):  # type: ignore[misc]
    """One world: the server, its reset options, and how observations without segments get roles."""

    base_url: str
    reset: dict[str, Any]
    plain_text_fields: list[str] | None = None
    plain_text_role: Role = Role.ENV_OUTPUT


class EchoTask(vf.Task[EchoTaskData]):  # type: ignore[misc]
    """A task of ``EchoTaskset`` (no prompt: the reset observation opens the exchange)."""


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
    family of ``openenv_echo.tokenization.build_tokenizer`` plus ``QWEN3_RENDERER_TOKENS`` (saved once under
    ``cache_dir``, default the tokenizer cache). Use it as ``TrainClientConfig.renderer_model_name`` with
    ``renderer=Qwen3RendererConfig(enable_thinking=False)``, and size the model's vocabulary to it."""
    from ..tokenization import build_tokenizer
    from ..tokenization.local_tokenizers import default_cache_dir

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
            extended = AutoTokenizer.from_pretrained(str(tmp))
            extended.add_tokens(list(QWEN3_RENDERER_TOKENS))
            extended.save_pretrained(str(tmp))
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
    "QWEN3_RENDERER_TOKENS",
    "EchoEnv",
    "EchoEnvConfig",
    "EchoTask",
    "EchoTaskData",
    "EchoTaskset",
    "EchoTasksetConfig",
    "InProcessChatHarness",
    "observation_message",
    "offline_renderer_tokenizer",
]

"""Request handling shared by the HTTP routes and the WebSocket: validation, env calls, serialization.

Every failure becomes a ``ProtocolError`` with an ``ErrorCode`` and a message; the transports only decide how
to send it (WS error frame or JSON HTTP error).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from ..roles import Role
from ..wire import (
    MCP_ACTION_TYPES,
    Action,
    CallToolAction,
    ErrorCode,
    ListToolsAction,
    Observation,
    Segment,
    join_segments,
)
from .environment import EnvError, Environment
from .limits import ServerLimits
from .tools import TOOL_CALL_FIELDS, TOOL_LIST_FIELDS, tool_observation_type
from .workers import WorkerEnv, WorkerFailed, WorkerLimits

MAX_SEED = 2**53 - 1  # the largest integer every JSON implementation represents exactly
_RESET_RESERVED = ("seed", "episode_id", "return_tokens")


class ProtocolError(Exception):
    def __init__(self, code: ErrorCode, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra

    def payload(self) -> dict[str, Any]:
        return {"code": self.code.value, "message": self.message, **self.extra}


def validation_errors(e: ValidationError) -> list[dict[str, Any]]:
    """pydantic errors as plain JSON (no exception objects in ``ctx``)."""
    errors: list[dict[str, Any]] = json.loads(e.json(include_url=False, include_input=False))
    return errors


class ResetOptions(BaseModel):
    """The reset options every environment accepts; ``reset_model`` adds the env's own from ``_reset``."""

    model_config = ConfigDict(extra="forbid")

    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] | None = Field(
        default=None, description="Seed of the episode's world; the same seed and actions replay byte-identically."
    )
    episode_id: Annotated[str, Field(strict=True, min_length=1, max_length=255)] | None = Field(
        default=None, description="Echoed by state; generated when absent."
    )
    return_tokens: Annotated[bool, Field(strict=True)] = Field(
        default=False, description="Attach segment-body token ids to every observation (needs a server tokenizer)."
    )

    @field_validator("seed", mode="before")
    @classmethod
    def _integral(cls, v: Any) -> Any:
        """A seed is a JSON integer (``7`` or ``7.0``), never a string or a boolean."""
        if isinstance(v, (str, bool)):
            raise ValueError("seed must be a JSON integer")
        return v

    @field_validator("return_tokens", mode="before")
    @classmethod
    def _boolean(cls, v: Any) -> Any:
        if not isinstance(v, bool):
            raise ValueError("return_tokens must be a JSON boolean")
        return v


class _NoTokenizerResetOptions(ResetOptions):
    """On a server without a tokenizer ``return_tokens`` can only be false (so the published spec says)."""

    return_tokens: Literal[False] = Field(default=False, description="This server has no tokenizer: always false.")


def reset_model(env_cls: type[Environment[Any, Any]], with_tokenizer: bool) -> type[ResetOptions]:
    """The exact reset request of ``env_cls``: the common options plus ``_reset``'s keyword parameters.

    Published in OpenAPI and used to validate WS and HTTP resets alike, so the spec and the server agree.
    """
    signature = inspect.signature(env_cls._reset)
    try:
        hints = typing.get_type_hints(env_cls._reset, include_extras=True)
    except Exception:  # unresolvable annotations: accept any JSON value
        hints = {}
    fields: dict[str, Any] = {}
    var_kw = False
    for p in signature.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.name not in ("self", "seed") and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            fields[p.name] = (hints.get(p.name, Any), ... if p.default is p.empty else p.default)
    base = ResetOptions if with_tokenizer else _NoTokenizerResetOptions
    model = create_model(f"{env_cls.__name__}ResetRequest", __base__=base, **fields)
    if var_kw:
        model.model_config["extra"] = "allow"
        model.model_rebuild(force=True)
    return model


class EnvDriver:
    """Validates and runs reset/step (native actions and OpenEnv's MCP actions) for one environment class."""

    def __init__(
        self, env_cls: type[Environment[Any, Any]], tokenizer: Any = None, limits: ServerLimits | None = None
    ) -> None:
        self.env_cls = env_cls
        self.tokenizer = tokenizer
        self.limits = limits = limits or ServerLimits()
        self.step_timeout_s = limits.step_timeout_s
        self.worker_limits = WorkerLimits(
            memory_bytes=limits.memory_mb << 20,
            file_bytes=limits.temp_disk_mb << 20,
            cpu_s_per_call=None
            if limits.step_timeout_s is None or limits.reset_timeout_s is None
            else 2 * max(limits.step_timeout_s, limits.reset_timeout_s) + 1,
        )
        self.reset_model = reset_model(env_cls, with_tokenizer=tokenizer is not None)
        self.tools = {t.name: t for t in env_cls.TOOLS}
        self.tool_specs = [t.spec() for t in env_cls.TOOLS]
        self.observation_type = tool_observation_type(env_cls.observation_type)

    async def new_env(self) -> Environment[Any, Any] | WorkerEnv:
        """A fresh instance: in its own worker process for ``BLOCKING`` envs, else in this process."""
        if self.env_cls.BLOCKING:
            return await WorkerEnv.start(self.env_cls, self.worker_limits)
        return self.env_cls()

    async def state(self, env: Environment[Any, Any] | WorkerEnv) -> dict[str, Any]:
        if isinstance(env, WorkerEnv):
            return await self._in_worker(env, "state")  # type: ignore[no-any-return]
        return env.state.model_dump(mode="json")

    # -- reset ------------------------------------------------------------------------------------------
    def parse_reset(self, data: Any) -> tuple[int | None, str | None, bool, dict[str, Any]]:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, "reset data must be a JSON object")
        if data.get("return_tokens") is True and self.tokenizer is None:
            raise ProtocolError(
                ErrorCode.TOKENIZER_UNAVAILABLE,
                "this server has no tokenizer: start it with one (serve --tokenizer PATH) or tokenize client-side",
            )
        try:
            request = self.reset_model.model_validate(data)
        except ValidationError as e:
            accepted = sorted(self.reset_model.model_fields)
            raise ProtocolError(
                ErrorCode.VALIDATION_ERROR,
                f"invalid reset: {_summary(e)} (accepted options: {accepted})",
                errors=validation_errors(e),
            ) from None
        kwargs = {k: v for k, v in request if k not in _RESET_RESERVED and k in data}
        kwargs.update(dict((request.model_extra or {}).items()))
        return request.seed, request.episode_id, request.return_tokens, kwargs

    async def reset(self, env: Environment[Any, Any] | WorkerEnv, data: Any) -> tuple[Observation, bool]:
        seed, episode_id, return_tokens, kwargs = self.parse_reset(data)
        obs = await self._run(env, "reset", seed, episode_id, **kwargs)
        return obs, return_tokens

    # -- step -------------------------------------------------------------------------------------------
    def parse_action(self, data: Any) -> Action:
        """The native action, or OpenEnv's ``ListToolsAction``/``CallToolAction`` when ``data["type"]`` says so."""
        if not isinstance(data, dict):
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, "action must be a JSON object")
        model = MCP_ACTION_TYPES.get(data["type"]) if "type" in data else None
        try:
            return (model or self.env_cls.action_type).model_validate(data)
        except ValidationError as e:
            raise ProtocolError(
                ErrorCode.VALIDATION_ERROR, f"invalid action: {_summary(e)}", errors=validation_errors(e)
            ) from None

    async def step(self, env: Environment[Any, Any] | WorkerEnv, data: Any) -> Observation:
        return await self.act(env, self.parse_action(data))

    async def act(self, env: Environment[Any, Any] | WorkerEnv, action: Action) -> Observation:
        """Run one validated action: a tool list needs no episode; a tool call is its native action's step."""
        if isinstance(action, ListToolsAction):
            return self.tool_list(env.done)
        if isinstance(action, CallToolAction):
            return await self.call_tool(env, action.tool_name, action.arguments)
        return await self._run(env, "step", action)

    def tool_list(self, done: bool = False) -> Observation:
        return self.observation_type.model_construct(tools=self.tool_specs, done=done)

    async def call_tool(self, env: Environment[Any, Any] | WorkerEnv, name: str, arguments: Any) -> Observation:
        tool = self.tools.get(name)
        if tool is None:
            raise ProtocolError(
                ErrorCode.VALIDATION_ERROR, f"tool {name!r} not found; this environment's tools: {sorted(self.tools)}"
            )
        try:
            native = tool.action(tool.arguments.model_validate(arguments))
        except ValidationError as e:
            raise ProtocolError(
                ErrorCode.VALIDATION_ERROR,
                f"invalid arguments for {name!r}: {_summary(e)}",
                errors=validation_errors(e),
            ) from None
        obs = await self._run(env, "step", native)
        return self.observation_type.model_construct(
            _fields_set=obs.model_fields_set | TOOL_CALL_FIELDS, **obs.__dict__, tool_name=name, result=tool.result(obs)
        )

    async def _run(self, env: Environment[Any, Any] | WorkerEnv, method: str, *args: Any, **kwargs: Any) -> Observation:
        """Call ``env.<method>``: ``BLOCKING`` envs in their worker process under the call's wall-time budget
        (killed when over it), async overrides under the same timeout, plain synchronous envs directly (a trivial
        step is cheaper than any hop). The observation's text is then held to ``max_output_bytes``."""
        if isinstance(env, WorkerEnv):
            obs = await self._in_worker(env, method, *args, **kwargs)
            env.done = bool(obs.done)
            return self._capped(obs)
        return self._capped(await self._run_here(env, method, *args, **kwargs))

    async def _in_worker(self, env: WorkerEnv, method: str, *args: Any, **kwargs: Any) -> Any:
        """``env.<method>`` in its worker, under the reset's or the step's wall-time budget."""
        timeout = self.limits.reset_timeout_s if method == "reset" else self.step_timeout_s
        try:
            return await env.call(method, args, kwargs, timeout)
        except (WorkerFailed, EnvError) as e:
            raise ProtocolError(e.code, str(e)) from None

    def _capped(self, obs: Observation) -> Observation:
        limit = self.limits.max_output_bytes
        total = 0
        for i, seg in enumerate(obs.segments):
            total += len(seg.text)  # characters <= bytes <= 4 x characters: a cheap first test
            if 4 * total > limit and _utf8_len(obs.segments[: i + 1]) > limit:
                return _cut(obs, limit)
        return obs

    async def _run_here(self, env: Environment[Any, Any], method: str, *args: Any, **kwargs: Any) -> Observation:
        try:
            if getattr(type(env), method + "_async") is not getattr(Environment, method + "_async"):
                call = getattr(env, method + "_async")(*args, **kwargs)
            else:
                obs: Observation = getattr(env, method)(*args, **kwargs)
                return obs
            obs = await (call if self.step_timeout_s is None else asyncio.wait_for(call, self.step_timeout_s))
            return obs
        except asyncio.TimeoutError:
            raise ProtocolError(
                ErrorCode.STEP_TIMEOUT,
                f"the environment did not answer within {self.step_timeout_s}s; the episode was abandoned, reset to start anew",
            ) from None
        except EnvError as e:
            raise ProtocolError(e.code, str(e), **e.extra) from None
        except ProtocolError:
            raise
        except Exception as e:  # an env bug: report it, keep serving
            raise ProtocolError(ErrorCode.EXECUTION_ERROR, f"{type(e).__name__}: {e}") from None

    # -- serialization ----------------------------------------------------------------------------------
    def envelope(self, obs: Observation, with_tokens: bool) -> dict[str, Any]:
        """OpenEnv's observation envelope: ``{"observation": {...}, "reward", "done", "metadata"?}``."""
        envelope: dict[str, Any] = json.loads(self.envelope_json(obs, with_tokens))
        return envelope

    def envelope_json(self, obs: Observation, with_tokens: bool, http: bool = False) -> str:
        """The envelope as JSON text, serialized once by pydantic's serializer (the WS hot path). ``http``: as
        OpenEnv's HTTP ``ResetResponse``/``StepResponse``, with ``metadata`` always present (null when empty)."""
        if with_tokens and obs.tokens is None:
            from ..tokenization.observation_tokens import segment_tokens

            obs.tokens = segment_tokens(self.tokenizer, obs.segments)
        fields = obs.__dict__
        if "tools" not in fields:
            exclude = _ENVELOPE_TOP
        else:  # a tool list carries no tool-call keys and vice versa (OpenEnv's clients dispatch on them)
            exclude = _TOOL_LIST_EXCLUDE if fields["tools"] is not None else _TOOL_CALL_EXCLUDE
        body = obs.__pydantic_serializer__.to_json(obs, exclude=exclude).decode()
        reward = "null" if obs.reward is None else repr(float(obs.reward))
        done = "true" if obs.done else "false"
        if obs.metadata:
            meta = json.dumps(obs.metadata, default=str)
            return f'{{"observation":{body},"reward":{reward},"done":{done},"metadata":{meta}}}'
        if http:
            return f'{{"observation":{body},"reward":{reward},"done":{done},"metadata":null}}'
        return f'{{"observation":{body},"reward":{reward},"done":{done}}}'


_ENVELOPE_TOP = {"reward", "done"}


def _utf8_len(segments: list[Segment]) -> int:
    return sum(len(s.text.encode("utf-8", "surrogatepass")) for s in segments)


def _cut(obs: Observation, limit: int) -> Observation:
    """``obs`` with its segments cut to ``limit`` UTF-8 bytes and a ``warning`` saying so (roles kept)."""
    kept: list[Segment] = []
    room = limit
    for seg in obs.segments:
        data = seg.text.encode("utf-8", "surrogatepass")
        if len(data) > room:
            text = data[:room].decode("utf-8", "ignore")
            if text:
                kept.append(Segment(role=seg.role, text=text, metadata=seg.metadata))
            break
        kept.append(seg)
        room -= len(data)
    kept.append(Segment(role=Role.WARNING, text=f"\n[output cut at the server's limit of {limit} bytes per step]\n"))
    return obs.model_copy(update={"segments": kept, "text": join_segments(kept), "tokens": None})


_TOOL_LIST_EXCLUDE = _ENVELOPE_TOP | TOOL_CALL_FIELDS
_TOOL_CALL_EXCLUDE = _ENVELOPE_TOP | TOOL_LIST_FIELDS


def _summary(e: ValidationError) -> str:
    parts = []
    for err in e.errors(include_url=False)[:3]:
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)

"""Request handling shared by the HTTP routes and the WebSocket: validation, env calls, serialization.

Every failure becomes a ``ProtocolError`` with an ``ErrorCode`` and a message; the transports only decide how
to send it (WS error frame or JSON HTTP error).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

from pydantic import ValidationError

from ..tokenizer_identity import segment_tokens
from ..wire import ErrorCode, Observation
from .environment import EnvError, Environment

MAX_SEED = 2**63 - 1
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
    return json.loads(e.json(include_url=False))


def reset_kwarg_names(env_cls: type[Environment]) -> tuple[frozenset[str], bool]:
    """Names ``_reset`` accepts beyond ``seed``, and whether it takes ``**kwargs``."""
    params = inspect.signature(env_cls._reset).parameters.values()
    names = frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)) - {"self", "seed"}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


class Protocol:
    """Validates and runs reset/step for one environment class."""

    def __init__(self, env_cls: type[Environment], tokenizer: Any = None, step_timeout_s: float | None = None) -> None:
        self.env_cls = env_cls
        self.tokenizer = tokenizer
        self.step_timeout_s = step_timeout_s
        self._reset_names, self._reset_var_kw = reset_kwarg_names(env_cls)

    # -- reset ------------------------------------------------------------------------------------------
    def parse_reset(self, data: Any) -> tuple[int | None, str | None, bool, dict[str, Any]]:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, "reset data must be a JSON object")
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"seed must be an integer in [0, 2^63-1], got {seed!r}")
        episode_id = data.get("episode_id")
        if episode_id is not None and (not isinstance(episode_id, str) or not 0 < len(episode_id) <= 255):
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, "episode_id must be a string of 1-255 characters")
        return_tokens = data.get("return_tokens", False)
        if not isinstance(return_tokens, bool):
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, "return_tokens must be a boolean")
        if return_tokens and self.tokenizer is None:
            raise ProtocolError(
                ErrorCode.TOKENIZER_UNAVAILABLE,
                "this server has no tokenizer: start it with one (serve --tokenizer PATH) or tokenize client-side",
            )
        kwargs = {k: v for k, v in data.items() if k not in _RESET_RESERVED}
        unknown = sorted(k for k in kwargs if k not in self._reset_names)
        if unknown and not self._reset_var_kw:
            accepted = sorted(self._reset_names | set(_RESET_RESERVED))
            raise ProtocolError(
                ErrorCode.VALIDATION_ERROR, f"unknown reset option(s) {unknown}; accepted: {accepted}"
            )
        return seed, episode_id, return_tokens, kwargs

    async def reset(self, env: Environment, data: Any) -> tuple[Observation, bool]:
        seed, episode_id, return_tokens, kwargs = self.parse_reset(data)
        obs = await self._run(env, "reset", seed, episode_id, **kwargs)
        return obs, return_tokens

    # -- step -------------------------------------------------------------------------------------------
    def parse_action(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, "action must be a JSON object")
        try:
            return self.env_cls.action_type.model_validate(data)
        except ValidationError as e:
            raise ProtocolError(
                ErrorCode.VALIDATION_ERROR, f"invalid action: {_summary(e)}", errors=validation_errors(e)
            ) from None

    async def step(self, env: Environment, data: Any) -> Observation:
        action = self.parse_action(data)
        return await self._run(env, "step", action)

    async def _run(self, env: Environment, method: str, *args: Any, **kwargs: Any) -> Observation:
        """Call ``env.<method>``: blocking envs in a worker thread and async overrides under the step timeout;
        plain synchronous envs directly (nothing could interrupt them, and a task per step is costly)."""
        try:
            if env.BLOCKING:
                call = asyncio.to_thread(getattr(env, method), *args, **kwargs)
            elif getattr(type(env), method + "_async") is not getattr(Environment, method + "_async"):
                call = getattr(env, method + "_async")(*args, **kwargs)
            else:
                return getattr(env, method)(*args, **kwargs)
            if self.step_timeout_s is None:
                return await call
            return await asyncio.wait_for(call, self.step_timeout_s)
        except asyncio.TimeoutError:
            raise ProtocolError(
                ErrorCode.STEP_TIMEOUT,
                f"the environment did not answer within {self.step_timeout_s}s; the episode was abandoned, reset to start anew",
            ) from None
        except EnvError as e:
            raise ProtocolError(e.code, str(e)) from None
        except ProtocolError:
            raise
        except Exception as e:  # an env bug: report it, keep serving
            raise ProtocolError(ErrorCode.EXECUTION_ERROR, f"{type(e).__name__}: {e}") from None

    # -- serialization ----------------------------------------------------------------------------------
    def envelope(self, obs: Observation, with_tokens: bool) -> dict[str, Any]:
        """OpenEnv's observation envelope: ``{"observation": {...}, "reward", "done", "metadata"?}``."""
        return json.loads(self.envelope_json(obs, with_tokens))

    def envelope_json(self, obs: Observation, with_tokens: bool) -> str:
        """The envelope as JSON text, serialized once by pydantic's serializer (the WS hot path)."""
        if with_tokens and obs.tokens is None:
            obs.tokens = segment_tokens(self.tokenizer, obs.segments)
        body = obs.__pydantic_serializer__.to_json(obs, exclude=_ENVELOPE_TOP).decode()
        reward = "null" if obs.reward is None else repr(float(obs.reward))
        done = "true" if obs.done else "false"
        if obs.metadata:
            meta = json.dumps(obs.metadata, default=str)
            return f'{{"observation":{body},"reward":{reward},"done":{done},"metadata":{meta}}}'
        return f'{{"observation":{body},"reward":{reward},"done":{done}}}'


_ENVELOPE_TOP = {"reward", "done"}


def _summary(e: ValidationError) -> str:
    parts = []
    for err in e.errors(include_url=False)[:3]:
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)

"""HTTP ``/reset``, ``/step``, ``/state`` (simulation mode): stateless like OpenEnv's, a fresh env per request.

Request bodies are generated per environment (its reset options, its action model), so ``/openapi.json`` states
exactly what the server accepts. Episodes need the WebSocket: ``/step`` on a fresh env answers 409.

(No ``from __future__ import annotations`` here: FastAPI must see the generated models as real annotations.)
"""

from typing import Any

from fastapi import Body, FastAPI
from pydantic import BaseModel, ConfigDict, Field, create_model

from ..wire import ErrorCode, StepResponse
from .environment import Environment
from .protocol import Protocol, ProtocolError
from .sessions import EnvHandle, SessionManager
from .workers import WorkerFactoryError


def step_request_model(env_cls: type[Environment]) -> type[BaseModel]:
    return create_model(
        f"{env_cls.__name__}StepRequest",
        __config__=ConfigDict(extra="forbid"),
        action=(env_cls.action_type, Field(description="The action; its fields are the env's action model.")),
        request_id=(str | None, Field(default=None, max_length=255, description="Free-form, ignored.")),
    )


def add_stateless_routes(
    app: FastAPI,
    env_cls: type[Environment],
    protocol: Protocol,
    sessions: SessionManager,
    errors: dict[int, Any],
    error_response: Any,
) -> None:
    reset_model = protocol.reset_model
    step_model = step_request_model(env_cls)

    async def fresh(call: Any) -> Any:
        try:
            env = await sessions.new_env()  # a worker process of its own for BLOCKING envs, like a session's
        except WorkerFactoryError as e:
            raise ProtocolError(ErrorCode.FACTORY_ERROR, f"could not create the environment: {e}") from None
        try:
            return await call(env)
        finally:
            env.close()

    @app.post("/reset", response_model=StepResponse, responses=errors, tags=["simulation"])
    async def reset(body: reset_model | None = Body(default=None)) -> Any:  # type: ignore[valid-type]
        data = body.model_dump(exclude_unset=True) if body is not None else {}

        async def run(env: EnvHandle) -> Any:
            obs, tokens = await protocol.reset(env, data)
            return StepResponse(**protocol.envelope(obs, tokens))

        try:
            return await fresh(run)
        except ProtocolError as e:
            return error_response(e)

    @app.post("/step", response_model=StepResponse, responses=errors, tags=["simulation"])
    async def step(body: step_model) -> Any:  # type: ignore[valid-type]
        async def run(env: EnvHandle) -> Any:
            obs = await protocol.step(env, body.action.model_dump(exclude_unset=True))  # type: ignore[attr-defined]
            return StepResponse(**protocol.envelope(obs, False))

        try:
            return await fresh(run)
        except ProtocolError as e:
            return error_response(e)

    @app.get("/state", response_model=env_cls.state_type, tags=["simulation"])
    async def state() -> Any:
        env = env_cls()
        try:
            return env.state.model_dump()
        finally:
            env.close()

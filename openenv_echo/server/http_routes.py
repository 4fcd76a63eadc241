"""HTTP ``/reset``, ``/step``, ``/state`` (simulation mode): stateless like OpenEnv's, a fresh env per request.

Request bodies are generated per environment (its reset options; its action model or OpenEnv's MCP actions), so
``/openapi.json`` states exactly what the server accepts, and each body is validated once. ``/step`` answers as
OpenEnv's does: the action runs on a fresh env, here at the start of a freshly reset (unseeded) episode, since
an openenv-echo env has no episode before a reset. Episodes that last more than one step need the WebSocket.

(No ``from __future__ import annotations`` here: FastAPI must see the generated models as real annotations.)
"""

from typing import Any, Union

from fastapi import Body, FastAPI
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, create_model

from ..wire import ErrorCode, ListToolsAction, StepResponse
from .environment import Environment
from .protocol import EnvDriver, ProtocolError
from .tools import call_action_types
from .workers import WorkerFactoryError


def step_request_model(env_cls: type[Environment[Any, Any]]) -> type[BaseModel]:
    choices = (env_cls.action_type, ListToolsAction, *call_action_types(env_cls.TOOLS))
    action_type: Any = Union[choices]  # noqa: UP007
    return create_model(
        f"{env_cls.__name__}StepRequest",
        __config__=ConfigDict(extra="forbid"),
        action=(
            action_type,
            Field(description="The env's native action, or OpenEnv's call_tool / list_tools action."),
        ),
        timeout_s=(float | None, Field(default=None, gt=0, description="Accepted for OpenEnv compatibility.")),
        request_id=(str | None, Field(default=None, max_length=255, description="Free-form, ignored.")),
    )


def add_stateless_routes(
    app: FastAPI, driver: EnvDriver, errors: dict[int | str, dict[str, Any]], error_response: Any
) -> None:
    env_cls = driver.env_cls
    reset_model = driver.reset_model
    step_model = step_request_model(env_cls)

    async def fresh() -> Any:
        """A new env for one request: a worker process of its own for BLOCKING envs, as a session gets."""
        try:
            return await driver.new_env()
        except WorkerFactoryError as e:
            raise ProtocolError(ErrorCode.FACTORY_ERROR, f"could not create the environment: {e}") from None

    @app.post("/reset", response_model=StepResponse, responses=errors, tags=["simulation"])
    async def reset(body: reset_model | None = Body(default=None)) -> Any:  # type: ignore[valid-type]
        data: dict[str, Any] = body.model_dump(exclude_unset=True) if body is not None else {}
        try:
            env = await fresh()
        except ProtocolError as e:
            return error_response(e)
        try:
            obs, tokens = await driver.reset(env, data)
            return _json(driver.envelope_json(obs, tokens, http=True))
        except ProtocolError as e:
            return error_response(e)
        finally:
            env.close()

    @app.post("/step", response_model=StepResponse, responses=errors, tags=["simulation"])
    async def step(body: step_model) -> Any:  # type: ignore[valid-type]
        try:
            env = await fresh()
        except ProtocolError as e:
            return error_response(e)
        try:
            if not isinstance(body.action, ListToolsAction):  # type: ignore[attr-defined]
                await driver.reset(env, {})
            obs = await driver.act(env, body.action)  # type: ignore[attr-defined]
            return _json(driver.envelope_json(obs, False, http=True))
        except ProtocolError as e:
            return error_response(e)
        finally:
            env.close()

    @app.get("/state", response_model=env_cls.state_type, tags=["simulation"])
    async def state() -> Any:
        env = env_cls()
        try:
            return env.state.model_dump()
        finally:
            env.close()


def _json(text: str) -> Response:
    """The envelope as serialized once by the driver (``response_model`` still documents it in OpenAPI)."""
    return Response(content=text, media_type="application/json")

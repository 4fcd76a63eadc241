"""``create_app``: a FastAPI app serving one environment class over OpenEnv's HTTP + WebSocket protocol."""

from __future__ import annotations

import asyncio
import json
import os
import time
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect, WebSocketState

from ..wire import (
    EnvironmentMetadata,
    ErrorCode,
    HealthResponse,
    SchemaResponse,
)
from . import strict_json, workers
from .environment import Environment
from .http_routes import add_stateless_routes
from .limits import ServerLimits
from .mcp import PARSE_ERROR, SERVER_ERROR, McpEndpoint, parse_body, rpc_error
from .metrics import ServerMetrics
from .protocol import EnvDriver, ProtocolError
from .sessions import CapacityReached, Session, SessionManager
from .task_routes import add_task_routes
from .web import ENABLE_VALUES, add_web_routes
from .workers import WorkerEnv, WorkerFactoryError

OPENAPI_VERSION = "1.0.0"  # OpenEnv's validator maps info.version 1.x to profile openenv-http/1.x
_FRAME_KEYS = {
    "reset": {"type", "data"},
    "step": {"type", "data"},
    "state": {"type"},
    "close": {"type"},
    "mcp": {"type", "data"},
}
_HTTP_STATUS = {
    ErrorCode.VALIDATION_ERROR: 422,
    ErrorCode.EPISODE_NOT_STARTED: 409,
    ErrorCode.EPISODE_DONE: 409,
    ErrorCode.MESSAGE_TOO_LARGE: 413,
    ErrorCode.TOKENIZER_UNAVAILABLE: 400,
    ErrorCode.STEP_TIMEOUT: 504,
    ErrorCode.EXECUTION_ERROR: 500,
    ErrorCode.SANDBOX_LOST: 502,
}


class ErrorResponse(BaseModel):
    """JSON body of every HTTP error: a code from ``ErrorCode``, a message, and details where useful."""

    model_config = ConfigDict(extra="allow")
    code: str
    message: str
    detail: Any = None


def _error_response(e: ProtocolError) -> JSONResponse:
    payload = e.payload()
    return JSONResponse(
        {**payload, "detail": payload.get("errors", e.message)}, status_code=_HTTP_STATUS.get(e.code, 400)
    )


class _RequestGuard:
    """ASGI middleware, before any handler: HTTP bodies over ``max_bytes`` get 413, a body that stalls for
    ``body_timeout_s`` between chunks gets 408, and a body that is not strict JSON (see ``strict_json``) gets 400
    INVALID_JSON. The body is read here, checked, and handed on whole."""

    def __init__(self, app: ASGIApp, limits: ServerLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limits.max_message_bytes:
            return await _reject(
                send, 413, "MESSAGE_TOO_LARGE", f"request body exceeds {limits.max_message_bytes} bytes"
            )
        chunks: list[bytes] = []
        seen = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), limits.body_timeout_s)
            except asyncio.TimeoutError:
                return await _reject(send, 408, "REQUEST_TIMEOUT", f"no body data for {limits.body_timeout_s}s")
            if message["type"] != "http.request":  # the client went away
                return None
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > limits.max_message_bytes:
                return await _reject(
                    send, 413, "MESSAGE_TOO_LARGE", f"request body exceeds {limits.max_message_bytes} bytes"
                )
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body.strip() and scope.get("method") in ("POST", "PUT", "PATCH"):
            try:
                strict_json.loads(body, limits.max_json_depth)
            except strict_json.BadJson as e:
                if scope.get("path") == "/mcp":  # JSON-RPC answers everything itself, parse errors included
                    return await _send_json(send, 200, rpc_error(None, PARSE_ERROR, f"Parse error: {e}"))
                return await _reject(send, 400, "INVALID_JSON", f"request body is not strict JSON: {e}")
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as the server would

        await self.app(scope, replay, send)


async def _reject(send: Any, status: int, code: str, message: str) -> None:
    await _send_json(send, status, {"code": code, "message": message, "detail": None})


async def _send_json(send: Any, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def create_app(
    env_cls: type[Environment[Any, Any]],
    *,
    limits: ServerLimits | None = None,
    mode: Literal["simulation", "production"] = "simulation",
    tokenizer: Any = None,
    web: bool | None = None,
) -> FastAPI:
    """Build the app for ``env_cls``.

    ``mode="production"`` omits the HTTP ``/reset``, ``/step`` and ``/state`` routes (OpenEnv's production mode);
    ``tokenizer`` (any HF tokenizer) lets clients ask for segment-body token ids with ``return_tokens``;
    ``web`` adds OpenEnv's web interface at ``/web/`` (default: env var ``ENABLE_WEB_INTERFACE`` is true/1/yes).
    """
    limits = limits or ServerLimits.from_env(defaults=env_cls.DEFAULT_LIMITS)
    if limits.max_sessions > 1 and not env_cls.SUPPORTS_CONCURRENT_SESSIONS:
        raise ValueError(f"{env_cls.__name__} does not support concurrent sessions; use max_sessions=1")
    if mode not in ("simulation", "production"):
        raise ValueError(f"mode must be 'simulation' or 'production', got {mode!r}")
    driver = EnvDriver(env_cls, tokenizer=tokenizer, limits=limits)
    sessions = SessionManager(driver.new_env, limits.max_sessions, limits.idle_timeout_s)
    mcp = McpEndpoint(driver, sessions)
    metrics = ServerMetrics(env_cls.get_metadata().name)
    metrics.watch_sessions(lambda: sessions.active)

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        sessions.start_reaper()
        if env_cls.BLOCKING:
            await workers.prewarm(env_cls)
        await env_cls.startup()
        try:
            yield
        finally:
            await sessions.stop_reaper()
            sessions.close_all()
            await env_cls.shutdown()

    meta = env_cls.get_metadata()
    app = FastAPI(
        title=f"{meta.name} (openenv-echo)",
        description=meta.description,
        version=OPENAPI_VERSION,
        lifespan=lifespan,
        # what _RequestGuard may answer on any route, before its handler runs
        responses={c: {"model": ErrorResponse} for c in (400, 408, 413)},
    )
    app.state.sessions = sessions
    app.state.limits = limits
    app.state.env_cls = env_cls
    app.state.metrics = metrics
    app.add_middleware(_RequestGuard, limits=limits)
    errors: dict[int | str, dict[str, Any]] = {c: {"model": ErrorResponse} for c in (400, 409, 413, 422, 500, 504)}

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # the offending input is not echoed: it may hold what no strict JSON reply can carry (lone surrogates)
        errs = [
            {k: v for k, v in e.items() if k not in ("input", "ctx", "url")}
            for e in json.loads(json.dumps(exc.errors(), default=str))
        ]
        first = errs[0] if errs else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        metrics.error("VALIDATION_ERROR")
        return JSONResponse(
            {
                "code": "VALIDATION_ERROR",
                "message": f"invalid request: {where}: {first.get('msg', '')}",
                "detail": errs,
            },
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "INVALID_JSON" if exc.status_code == 400 else f"HTTP_{exc.status_code}"
        metrics.error(code)
        return JSONResponse(
            {"code": code, "message": str(exc.detail), "detail": exc.detail},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        metrics.error("EXECUTION_ERROR")
        return JSONResponse(
            {"code": "EXECUTION_ERROR", "message": f"{type(exc).__name__}: {exc}", "detail": None}, status_code=500
        )

    @app.get("/health", response_model=HealthResponse, tags=["health"])
    async def health() -> HealthResponse:
        return HealthResponse()

    @app.get("/metrics", tags=["health"], response_class=Response)
    async def get_metrics() -> Response:
        """Prometheus text exposition of this server's metrics (``openenv_echo_*``)."""
        return Response(metrics.exposition(), media_type=metrics.content_type)

    @app.get("/metadata", response_model=EnvironmentMetadata, tags=["environment"])
    async def metadata() -> EnvironmentMetadata:
        return meta

    observation_schema = driver.observation_type.model_json_schema()
    schema = SchemaResponse(
        action=env_cls.action_type.model_json_schema(),
        observation=observation_schema,
        state=env_cls.state_type.model_json_schema(),
        reset_observation=observation_schema,
    )

    @app.get("/schema", response_model=SchemaResponse, tags=["environment"])
    async def get_schema() -> SchemaResponse:
        return schema

    @app.post("/mcp", tags=["mcp"])
    async def mcp_http(request: Request) -> JSONResponse:
        return JSONResponse(await mcp.handle(parse_body(await request.body())))

    @app.websocket("/mcp")
    async def mcp_ws(websocket: WebSocket) -> None:
        await _serve_mcp_ws(websocket, mcp, limits, metrics)

    if mode == "simulation":
        add_stateless_routes(app, driver, errors, _error_response)
    add_task_routes(app, env_cls)
    if web if web is not None else os.environ.get("ENABLE_WEB_INTERFACE", "").lower() in ENABLE_VALUES:
        add_web_routes(app, driver, _error_response, _example_action(env_cls))

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await _serve_ws(websocket, sessions, driver, mcp, limits, metrics)

    return app


def _example_action(env_cls: type[Environment[Any, Any]]) -> dict[str, Any]:
    """A starting point for the web page's action box: the action's first text field, empty."""
    props = env_cls.action_type.model_json_schema().get("properties", {})
    for name, prop in props.items():
        if name != "metadata" and "string" in json.dumps(prop):
            return {name: ""}
    return {}


# -- WebSocket ------------------------------------------------------------------------------------------


async def _send_error(ws: WebSocket, code: ErrorCode, message: str, **extra: Any) -> None:
    await ws.send_text(json.dumps({"type": "error", "data": {"code": code.value, "message": message, **extra}}))


def _decode(message: Message, max_bytes: int, max_depth: int) -> Any:
    """The JSON frame in a WS message, or a ``ProtocolError`` (size, encoding, syntax, shape)."""
    text = message.get("text")
    if text is None:
        raw = message.get("bytes") or b""
        if len(raw) > max_bytes:
            raise ProtocolError(ErrorCode.MESSAGE_TOO_LARGE, f"frame of {len(raw)} bytes exceeds {max_bytes}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(ErrorCode.INVALID_JSON, f"frame is not valid UTF-8 (byte {e.start})") from None
    elif len(text) > max_bytes or (
        4 * len(text) > max_bytes and len(text.encode("utf-8", "surrogatepass")) > max_bytes
    ):
        raise ProtocolError(ErrorCode.MESSAGE_TOO_LARGE, f"frame exceeds {max_bytes} bytes")
    try:
        frame = strict_json.loads(text, max_depth)
    except strict_json.BadJson as e:
        raise ProtocolError(ErrorCode.INVALID_JSON, f"frame is {e}") from None
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise ProtocolError(ErrorCode.VALIDATION_ERROR, "a frame is a JSON object with a string 'type'")
    allowed = _FRAME_KEYS.get(frame["type"])
    if allowed is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_TYPE, f"unknown frame type {frame['type']!r}; expected one of {sorted(_FRAME_KEYS)}"
        )
    extra = set(frame) - allowed
    if extra:
        raise ProtocolError(
            ErrorCode.VALIDATION_ERROR, f"unexpected key(s) {sorted(extra)} in a {frame['type']!r} frame"
        )
    if frame["type"] in ("step", "mcp") and "data" not in frame:
        raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"a {frame['type']!r} frame needs 'data'")
    return frame


async def _serve_ws(
    ws: WebSocket,
    sessions: SessionManager,
    driver: EnvDriver,
    mcp: McpEndpoint,
    limits: ServerLimits,
    metrics: ServerMetrics,
) -> None:
    await ws.accept()
    attach_id = ws.query_params.get("session_id")
    try:
        if attach_id is not None:
            session = _attach(sessions, attach_id)
        else:
            session = await sessions.open()
    except _AttachError as e:
        await _send_error(ws, ErrorCode.SESSION_ERROR, str(e))
        await ws.close(code=1008)
        return
    except CapacityReached as e:
        metrics.capacity_refusals.inc()
        await _send_error(ws, ErrorCode.CAPACITY_REACHED, str(e), active_sessions=e.active, max_sessions=e.limit)
        await ws.close(code=1013)
        return
    except Exception as e:
        metrics.error(ErrorCode.FACTORY_ERROR.value)
        why = str(e) if isinstance(e, WorkerFactoryError) else f"{type(e).__name__}: {e}"
        await _send_error(
            ws,
            ErrorCode.FACTORY_ERROR,
            f"could not create the environment: {why}",
            factory_name=driver.env_cls.__name__,
        )
        await ws.close(code=1011)
        return

    async def expire() -> None:
        if ws.client_state is WebSocketState.CONNECTED:
            await _send_error(ws, ErrorCode.SESSION_ERROR, f"session closed after {limits.idle_timeout_s}s idle")
            await ws.close(code=1001)

    session.on_expire = expire
    metrics.sessions.inc()
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            metrics.received_bytes.inc(len(message.get("text") or message.get("bytes") or ""))
            session.busy = True
            try:
                async with session.lock:
                    reply = await _handle_frame(message, session, sessions, driver, mcp, limits, metrics)
            except ProtocolError as e:
                metrics.error(e.code.value)
                reply = json.dumps({"type": "error", "data": e.payload()})
                if e.code is ErrorCode.STEP_TIMEOUT and session.env is not None:
                    sessions.discard_env(session)  # its worker was killed (or its call may still be running)
            except Exception as e:  # a server bug must cost one reply, not the session
                metrics.error("EXECUTION_ERROR")
                reply = json.dumps(
                    {"type": "error", "data": {"code": "EXECUTION_ERROR", "message": f"{type(e).__name__}: {e}"}}
                )
            finally:
                session.busy = False
                session.touch()
            if reply is None:  # close frame: no reply
                await ws.close(code=1000)
                break
            metrics.sent_bytes.inc(len(reply))
            await ws.send_text(reply)
    except WebSocketDisconnect:
        pass  # the client went away
    except RuntimeError:
        if ws.client_state is WebSocketState.CONNECTED and ws.application_state is WebSocketState.CONNECTED:
            raise
        # the socket was closed under us (reaper, or a send racing a disconnect)
    finally:
        if session.http and not session.closing:
            session.attached = False  # an attached HTTP session outlives its socket until session/close
            session.on_expire = None
        else:
            sessions.close(session)


class _AttachError(Exception):
    pass


def _attach(sessions: SessionManager, session_id: str) -> Session:
    """The HTTP-created session ``/ws?session_id=`` attaches to (one socket at a time)."""
    session = sessions.get(session_id)
    if session is None or not session.http:
        raise _AttachError(f"Unknown session_id: {session_id}")
    if session.attached:
        raise _AttachError(f"Session {session_id} already has an attached WebSocket")
    session.attached = True
    session.touch()
    return session


async def _serve_mcp_ws(ws: WebSocket, mcp: McpEndpoint, limits: ServerLimits, metrics: ServerMetrics) -> None:
    """WS ``/mcp``: raw JSON-RPC frames, one session per connection (OpenEnv's)."""
    await ws.accept()
    try:
        session = await mcp.sessions.open()
    except CapacityReached as e:
        metrics.capacity_refusals.inc()
        await ws.send_text(
            json.dumps(rpc_error(None, SERVER_ERROR, str(e), {"active_sessions": e.active, "max_sessions": e.limit}))
        )
        await ws.close(code=1013)
        return
    except Exception as e:
        reason = f"could not create the environment: {type(e).__name__}: {e}"
        await ws.send_text(
            json.dumps(rpc_error(None, SERVER_ERROR, reason, {"factory_name": mcp.driver.env_cls.__name__}))
        )
        await ws.close(code=1011)
        return
    metrics.sessions.inc()
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            if len(raw) > limits.max_message_bytes:
                reply = rpc_error(None, -32600, f"Invalid Request: frame exceeds {limits.max_message_bytes} bytes")
            else:
                session.busy = True
                try:
                    try:
                        request = strict_json.loads(raw, limits.max_json_depth)
                    except strict_json.BadJson as e:
                        reply = rpc_error(None, PARSE_ERROR, f"Parse error: {e}")
                    else:
                        async with session.lock:
                            reply = await mcp.handle(request, bound=session)
                finally:
                    session.busy = False
                    session.touch()
            await ws.send_text(json.dumps(reply))
    except WebSocketDisconnect:
        pass
    except RuntimeError:
        if ws.client_state is WebSocketState.CONNECTED and ws.application_state is WebSocketState.CONNECTED:
            raise
    finally:
        mcp.sessions.close(session)


async def _handle_frame(
    message: Message,
    session: Session,
    sessions: SessionManager,
    driver: EnvDriver,
    mcp: McpEndpoint,
    limits: ServerLimits,
    metrics: ServerMetrics,
) -> str | None:
    frame = _decode(message, limits.max_message_bytes, limits.max_json_depth)
    kind = frame["type"]
    if kind == "close":
        return None
    if kind == "reset":
        if session.env is None or (isinstance(session.env, WorkerEnv) and not session.env.alive):
            sessions.discard_env(session)
            session.env = await sessions.new_env()
        began = time.perf_counter()
        obs, session.return_tokens = await driver.reset(session.env, frame.get("data"))
        metrics.reset_seconds.observe(time.perf_counter() - began)
        return _observation_frame(driver, obs, session.return_tokens, metrics)
    if kind == "mcp":
        return json.dumps({"type": "mcp", "data": await mcp.handle(frame["data"], bound=session)})
    if session.env is None:
        raise ProtocolError(ErrorCode.EPISODE_NOT_STARTED, "no episode in this session: send a reset first")
    if kind == "step":
        began = time.perf_counter()
        try:
            obs = await driver.step(session.env, frame["data"])
        except ProtocolError:
            metrics.step_failed()
            raise
        metrics.step(time.perf_counter() - began, done=obs.done)
        return _observation_frame(driver, obs, session.return_tokens, metrics)
    return json.dumps({"type": "state", "data": await driver.state(session.env)})


def _observation_frame(driver: EnvDriver, obs: Any, with_tokens: bool, metrics: ServerMetrics) -> str:
    text = driver.envelope_json(obs, with_tokens)
    if with_tokens and obs.tokens is not None:
        metrics.tokens_attached.inc(len(obs.tokens.ids))
    return '{"type":"observation","data":' + text + "}"

"""JSON-RPC 2.0 for ``POST /mcp``, WS ``/mcp`` and WS ``mcp`` frames, the way OpenEnv serves it.

Methods: ``tools/list``, ``tools/call`` and OpenEnv's session methods ``openenv/session/create`` /
``openenv/session/close`` (a created session takes a capacity slot; ``/ws?session_id=`` attaches to it). Every
request gets a JSON-RPC answer (HTTP 200), errors included. A tool call is the env step of its native action, so
its result carries the observation's role segments, reward and done beside the tool's ``data``.
"""

from __future__ import annotations

import json
from typing import Any

from ..wire import ErrorCode, Observation
from .protocol import EnvDriver, ProtocolError
from .sessions import CapacityReached, Session, SessionManager

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
SERVER_ERROR = -32000
_REQUEST_KEYS = frozenset({"jsonrpc", "method", "params", "id"})


def rpc_error(id_: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message, "data": data}}


def rpc_result(id_: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def parse_body(body: bytes | str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return _PARSE_FAILED


_PARSE_FAILED = object()


class McpEndpoint:
    """Answers JSON-RPC requests for one app: against a bound session (WS), a ``session_id`` param, or a
    temporary env (HTTP without a session; a tool call then runs on a freshly reset episode, like OpenEnv's
    stateless ``/step``)."""

    def __init__(self, driver: EnvDriver, sessions: SessionManager) -> None:
        self.driver = driver
        self.sessions = sessions

    async def handle(self, request: Any, bound: Session | None = None) -> dict[str, Any]:
        if request is _PARSE_FAILED:
            return rpc_error(None, PARSE_ERROR, "Parse error: body is not JSON")
        if not isinstance(request, dict):
            return rpc_error(None, INVALID_REQUEST, "Invalid Request: expected a JSON object")
        id_ = request.get("id")
        if not (id_ is None or isinstance(id_, (str, int))) or isinstance(id_, bool):
            return rpc_error(None, INVALID_REQUEST, "Invalid Request: id must be a string, an integer or null")
        if request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
            return rpc_error(id_, INVALID_REQUEST, "Invalid Request: need jsonrpc '2.0' and a string method")
        extra = set(request) - _REQUEST_KEYS
        if extra:
            return rpc_error(id_, INVALID_REQUEST, f"Invalid Request: unexpected key(s) {sorted(extra)}")
        params = request.get("params", {})
        if not isinstance(params, dict):
            return rpc_error(id_, INVALID_PARAMS, "Invalid params: params must be an object")
        method = request["method"]
        handler = self._methods.get(method)
        if handler is None:
            return rpc_error(id_, METHOD_NOT_FOUND, f"Method not found: {method}")
        try:
            return rpc_result(id_, await handler(self, params, bound))
        except _RpcError as e:
            return rpc_error(id_, e.code, e.message, e.data)
        except ProtocolError as e:
            code = INVALID_PARAMS if e.code is ErrorCode.VALIDATION_ERROR else SERVER_ERROR
            return rpc_error(id_, code, e.message, e.payload())
        except Exception as e:  # a server or env bug: one error answer, the server keeps serving
            return rpc_error(id_, INTERNAL_ERROR, f"Internal error: {type(e).__name__}: {e}")

    # -- methods -----------------------------------------------------------------------------------------
    async def _session_create(self, params: dict[str, Any], bound: Session | None) -> dict[str, Any]:
        if bound is not None:
            return {"session_id": bound.id}
        try:
            session = await self.sessions.open(http=True)
        except CapacityReached as e:
            raise _RpcError(SERVER_ERROR, str(e), {"active_sessions": e.active, "max_sessions": e.limit}) from None
        except Exception as e:
            raise _RpcError(
                SERVER_ERROR,
                f"could not create the environment: {type(e).__name__}: {e}",
                {"factory_name": self.driver.env_cls.__name__},
            ) from None
        return {"session_id": session.id}

    async def _session_close(self, params: dict[str, Any], bound: Session | None) -> dict[str, Any]:
        target = params.get("session_id")
        if not isinstance(target, str) or not target:
            raise _RpcError(INVALID_PARAMS, "Invalid params: 'session_id' (string) is required")
        if bound is not None and target == bound.id:
            raise _RpcError(INVALID_REQUEST, "Cannot close this connection's own session via MCP; close the socket")
        session = self.sessions.get(target)
        if session is None:
            raise _RpcError(INVALID_PARAMS, f"Unknown session_id: {target}")
        if session.attached:
            session.closing = True  # closed when its WebSocket detaches
            return {"session_id": target, "closed": False, "closing": True}
        self.sessions.close(session)
        return {"session_id": target, "closed": True}

    async def _tools_list(self, params: dict[str, Any], bound: Session | None) -> dict[str, Any]:
        if "session_id" in params:
            self._session(params)  # an unknown session is an error even though listing needs no env
        tools = [
            {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
            for t in self.driver.tool_specs
        ]
        return {"tools": tools}

    async def _tools_call(self, params: dict[str, Any], bound: Session | None) -> dict[str, Any]:
        name, arguments = params.get("name"), params.get("arguments", {})
        if not isinstance(name, str) or not name:
            raise _RpcError(INVALID_PARAMS, "Invalid params: missing 'name' (string)")
        if not isinstance(arguments, dict):
            raise _RpcError(INVALID_PARAMS, "Invalid params: 'arguments' must be an object")
        session = bound if bound is not None else self._session(params)
        if session is bound and bound is not None:  # the caller (a socket's loop) holds the session's lock
            obs = await self._call_in(bound, name, arguments)
            with_tokens = bound.return_tokens
        elif session is not None:
            async with session.lock:
                obs = await self._call_in(session, name, arguments)
                session.touch()
            with_tokens = session.return_tokens
        else:
            env = await self.sessions.new_env()
            try:
                await self.driver.reset(env, {})
                obs = await self.driver.call_tool(env, name, arguments)
            finally:
                env.close()
            with_tokens = False
        envelope = self.driver.envelope(obs, with_tokens)
        result = obs.__dict__["result"]
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
        return {
            **envelope["observation"],
            "reward": envelope["reward"],
            "done": envelope["done"],
            "content": [{"type": "text", "text": text}],
            "isError": False,
            "data": result,
        }

    async def _call_in(self, session: Session, name: str, arguments: dict[str, Any]) -> Observation:
        if session.env is None:
            raise ProtocolError(ErrorCode.EPISODE_NOT_STARTED, "no episode in this session: send a reset first")
        return await self.driver.call_tool(session.env, name, arguments)

    def _session(self, params: dict[str, Any]) -> Session | None:
        sid = params.get("session_id")
        if sid is None:
            return None
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            raise _RpcError(INVALID_PARAMS, f"Unknown session_id: {sid}")
        return session

    _methods = {
        "openenv/session/create": _session_create,
        "openenv/session/close": _session_close,
        "tools/list": _tools_list,
        "tools/call": _tools_call,
    }


class _RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

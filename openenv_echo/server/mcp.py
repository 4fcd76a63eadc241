"""JSON-RPC 2.0 for ``POST /mcp`` and WS ``mcp`` frames: ``tools/list`` and ``tools/call``.

Every request gets a JSON-RPC answer (HTTP 200), errors included, as OpenEnv's validator expects.
"""

from __future__ import annotations

import json
from typing import Any

from .environment import EnvError, Environment

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603


def rpc_error(id_: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message, "data": None}}


def parse_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return _PARSE_FAILED


_PARSE_FAILED = object()


def handle(request: Any, env: Environment) -> dict[str, Any]:
    """Answer one JSON-RPC request against ``env``."""
    if request is _PARSE_FAILED:
        return rpc_error(None, PARSE_ERROR, "Parse error: body is not JSON")
    if not isinstance(request, dict):
        return rpc_error(None, INVALID_REQUEST, "Invalid Request: expected a JSON object")
    id_ = request.get("id")
    if isinstance(id_, (dict, list, bool)):
        id_ = None
    if request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
        return rpc_error(id_, INVALID_REQUEST, "Invalid Request: need jsonrpc '2.0' and a string method")
    params = request.get("params", {})
    if not isinstance(params, dict):
        return rpc_error(id_, INVALID_PARAMS, "Invalid params: params must be an object")
    method = request["method"]
    try:
        if method == "tools/list":
            tools = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in env.tools()]
            return {"jsonrpc": "2.0", "id": id_, "result": {"tools": tools}}
        if method == "tools/call":
            name = params.get("name")
            arguments = params.get("arguments", {})
            if not isinstance(name, str) or not isinstance(arguments, dict):
                return rpc_error(id_, INVALID_PARAMS, "Invalid params: need 'name' (string) and 'arguments' (object)")
            if name not in {t.name for t in env.tools()}:
                return rpc_error(id_, INVALID_PARAMS, f"Invalid params: tool {name!r} not found")
            result = env.call_tool(name, arguments)
            return {"jsonrpc": "2.0", "id": id_, "result": result}
    except EnvError as e:
        return rpc_error(id_, INVALID_PARAMS, str(e))
    except Exception as e:
        return rpc_error(id_, INTERNAL_ERROR, f"Internal error: {type(e).__name__}: {e}")
    return rpc_error(id_, METHOD_NOT_FOUND, f"Method not found: {method}")

"""``/mcp`` JSON-RPC the way OpenEnv serves it: session methods, tools, and a JSON-RPC error (HTTP 200, never a
5xx) for every bad request, on HTTP ``POST /mcp``, WS ``/mcp`` and WS ``mcp`` frames."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect


def rpc(url: str, body: Any, **kwargs: Any) -> dict[str, Any]:
    if isinstance(body, (bytes, str)):
        r = httpx.post(url + "/mcp", content=body, trust_env=False, **kwargs)
    else:
        r = httpx.post(url + "/mcp", json=body, trust_env=False, **kwargs)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["jsonrpc"] == "2.0"
    return data


BAD_REQUESTS: list[tuple[Any, int]] = [
    (b"{not json", -32700),
    (b"\xff\xfe", -32700),
    ("[" * 100_000, -32700),
    ({}, -32600),
    ([], -32600),
    ([{"jsonrpc": "2.0", "method": "tools/list", "id": 1}], -32600),
    ("3", -32600),
    ({"jsonrpc": "1.0", "method": "tools/list", "id": 1}, -32600),
    ({"jsonrpc": "2.0", "method": 5, "id": 1}, -32600),
    ({"jsonrpc": "2.0", "method": "tools/list", "id": {"x": 1}}, -32600),
    ({"jsonrpc": "2.0", "method": "tools/list", "id": 1, "extra": True}, -32600),
    ({"jsonrpc": "2.0", "method": "tools/list", "params": [1], "id": 1}, -32602),
    ({"jsonrpc": "2.0", "method": "nope", "id": 1}, -32601),
    ({"jsonrpc": "2.0", "method": "tools/call", "params": {}, "id": 1}, -32602),
    ({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo_message", "arguments": 3}, "id": 1}, -32602),
    ({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "nope"}, "id": 1}, -32602),
    ({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo_message", "arguments": {}}, "id": 1}, -32602),
    (
        {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo_message", "arguments": {"message": 3}}},
        -32602,
    ),
    (
        {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo_message", "session_id": "x"}, "id": 1},
        -32602,
    ),
    ({"jsonrpc": "2.0", "method": "tools/list", "params": {"session_id": "nope"}, "id": 1}, -32602),
    ({"jsonrpc": "2.0", "method": "openenv/session/close", "params": {}, "id": 1}, -32602),
    ({"jsonrpc": "2.0", "method": "openenv/session/close", "params": {"session_id": "nope"}, "id": 1}, -32602),
]


@pytest.mark.parametrize(("body", "code"), BAD_REQUESTS)
def test_bad_requests_get_jsonrpc_errors(env_urls: dict[str, str], body: Any, code: int) -> None:
    data = rpc(env_urls["echo"], body)
    assert data["error"]["code"] == code and data["error"]["message"], data
    assert "result" not in data
    assert rpc(env_urls["echo"], {"jsonrpc": "2.0", "method": "tools/list", "id": 2})["result"]["tools"]


def test_stateless_tool_call_carries_role_segments(env_urls: dict[str, str]) -> None:
    """Without a session a tool call runs on a fresh episode; its result is MCP content + data + the observation."""
    call = {"name": "echo_with_length", "arguments": {"message": "hey"}}
    data = rpc(env_urls["echo"], {"jsonrpc": "2.0", "method": "tools/call", "params": call, "id": "a"})
    result = data["result"]
    assert data["id"] == "a"
    assert result["data"] == {"message": "hey", "length": 3} and result["isError"] is False
    assert json.loads(result["content"][0]["text"]) == result["data"]
    assert result["segments"] == [{"role": "warning", "text": "[echo] "}, {"role": "env_output", "text": "hey\n"}]
    assert (result["echoed_message"], result["reward"], result["done"]) == ("hey", 0.03, False)


def test_session_lifecycle_and_capacity(env_urls: dict[str, str]) -> None:
    """A created session takes a slot (4 here), keeps its episode across requests, and frees it on close."""
    url = env_urls["echo"]
    create = {"jsonrpc": "2.0", "method": "openenv/session/create", "id": 1}
    ids = [rpc(url, create)["result"]["session_id"] for _ in range(4)]
    assert len(set(ids)) == 4
    full = rpc(url, create)
    assert full["error"]["code"] == -32000 and full["error"]["data"] == {"active_sessions": 4, "max_sessions": 4}
    with connect(url.replace("http", "ws") + "/ws", proxy=None) as ws:  # /ws is refused at capacity too
        error = json.loads(ws.recv())
        assert error["type"] == "error" and error["data"]["code"] == "CAPACITY_REACHED"
    sid = ids[0]
    call = {"name": "echo_message", "arguments": {"message": "x"}, "session_id": sid}
    not_started = rpc(url, {"jsonrpc": "2.0", "method": "tools/call", "params": call, "id": 2})
    assert not_started["error"]["code"] == -32000 and not_started["error"]["data"]["code"] == "EPISODE_NOT_STARTED"
    with connect(url.replace("http", "ws") + f"/ws?session_id={sid}", proxy=None) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"episode_id": "shared"}}))
        assert json.loads(ws.recv())["type"] == "observation"
        assert rpc(url, {"jsonrpc": "2.0", "method": "tools/call", "params": call, "id": 3})["result"]["data"] == "x"
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv())["data"] == {"episode_id": "shared", "step_count": 1}
        with connect(url.replace("http", "ws") + f"/ws?session_id={sid}", proxy=None) as second:
            refused = json.loads(second.recv())
            assert refused["data"]["code"] == "SESSION_ERROR" and "already has" in refused["data"]["message"]
        closing = rpc(url, {"jsonrpc": "2.0", "method": "openenv/session/close", "params": {"session_id": sid}})
        assert closing["result"] == {"session_id": sid, "closed": False, "closing": True}
    for other in ids[1:]:
        closed = rpc(url, {"jsonrpc": "2.0", "method": "openenv/session/close", "params": {"session_id": other}})
        assert closed["result"] == {"session_id": other, "closed": True}
    gone = rpc(url, {"jsonrpc": "2.0", "method": "tools/call", "params": call, "id": 4})
    assert gone["error"]["code"] == -32602 and "Unknown session_id" in gone["error"]["message"]
    for _ in range(4):  # every slot came back
        sid = rpc(url, create)["result"]["session_id"]
        rpc(url, {"jsonrpc": "2.0", "method": "openenv/session/close", "params": {"session_id": sid}})


def test_ws_mcp_endpoint_and_mcp_frames(env_urls: dict[str, str]) -> None:
    """WS ``/mcp`` speaks raw JSON-RPC on its own session; ``mcp`` frames on ``/ws`` use the socket's session."""
    url = env_urls["echo"].replace("http", "ws")
    with connect(url + "/mcp", proxy=None) as ws:
        ws.send("{broken")
        assert json.loads(ws.recv())["error"]["code"] == -32700
        ws.send(json.dumps({"jsonrpc": "2.0", "method": "openenv/session/create", "id": 1}))
        own = json.loads(ws.recv())["result"]["session_id"]
        ws.send(
            json.dumps({"jsonrpc": "2.0", "method": "openenv/session/close", "params": {"session_id": own}, "id": 2})
        )
        assert json.loads(ws.recv())["error"]["code"] == -32600
        ws.send(json.dumps({"jsonrpc": "2.0", "method": "tools/list", "id": 3}))
        assert len(json.loads(ws.recv())["result"]["tools"]) == 2
    with connect(url + "/ws", proxy=None) as ws:
        ws.send(json.dumps({"type": "reset", "data": {}}))
        ws.recv()
        call = {"name": "echo_message", "arguments": {"message": "via frame"}}
        ws.send(
            json.dumps({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/call", "params": call, "id": 9}})
        )
        reply = json.loads(ws.recv())
        assert reply["type"] == "mcp" and reply["data"]["result"]["data"] == "via frame"
        ws.send(json.dumps({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "bogus", "id": 10}}))
        assert json.loads(ws.recv())["data"]["error"]["code"] == -32601
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv())["data"]["step_count"] == 1

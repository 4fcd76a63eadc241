"""Every bad input gets a clear error with a code and a message, and the server keeps serving."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from openenv_echo.client import (
    ActionValidationError,
    CapacityReachedError,
    EnvClient,
    EpisodeDoneError,
    EpisodeNotStartedError,
    ExecutionError,
    FactoryError,
    MessageTooLargeError,
)
from tests.server.faulty_envs import BrokenFactoryEnvironment, CrashEnvironment


def ws(url: str):
    return connect(url.replace("http://", "ws://") + "/ws", proxy=None, compression=None, max_size=None)


def call(sock, frame: object) -> dict:
    sock.send(frame if isinstance(frame, (str, bytes)) else json.dumps(frame))
    return json.loads(sock.recv(timeout=10))


def assert_error(reply: dict, code: str) -> dict:
    assert reply["type"] == "error", reply
    assert reply["data"]["code"] == code, reply
    assert isinstance(reply["data"]["message"], str) and reply["data"]["message"]
    return reply["data"]


def still_serving(sock) -> None:
    """The same session still works after an error."""
    assert call(sock, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
    assert call(sock, {"type": "step", "data": {"message": "ok"}})["data"]["observation"]["text"] == "[echo] ok\n"


@pytest.fixture
def echo_url(running_server) -> str:
    return running_server("echo", max_sessions=4, max_message_bytes=4096)


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("this is not json", "INVALID_JSON"),
        ('{"type": "reset", "data": ', "INVALID_JSON"),
        ("[1, 2, 3]", "VALIDATION_ERROR"),
        ('{"data": {}}', "VALIDATION_ERROR"),
        ({"type": "teleport"}, "UNKNOWN_TYPE"),
        ({"type": "state", "data": {}}, "VALIDATION_ERROR"),
        ({"type": "step"}, "VALIDATION_ERROR"),
        ({"type": "reset", "data": {}, "extra": 1}, "VALIDATION_ERROR"),
        ({"type": "step", "data": {"message": "hi", "volume": 11}}, "VALIDATION_ERROR"),
        ({"type": "step", "data": {"message": 42}}, "VALIDATION_ERROR"),
        ({"type": "step", "data": {}}, "VALIDATION_ERROR"),
        ({"type": "step", "data": "hello"}, "VALIDATION_ERROR"),
        ({"type": "reset", "data": {"seed": -5}}, "VALIDATION_ERROR"),
        ({"type": "reset", "data": {"seed": "7"}}, "VALIDATION_ERROR"),
        ({"type": "reset", "data": {"seed": 2**64}}, "VALIDATION_ERROR"),
        ({"type": "reset", "data": {"episode_id": ""}}, "VALIDATION_ERROR"),
        ({"type": "reset", "data": {"max_steps": 0}}, "VALIDATION_ERROR"),
        ({"type": "reset", "data": {"difficulty": "hard"}}, "VALIDATION_ERROR"),
        ({"type": "reset", "data": {"return_tokens": True}}, "TOKENIZER_UNAVAILABLE"),
        ({"type": "reset", "data": {"return_tokens": "yes"}}, "VALIDATION_ERROR"),
    ],
)
def test_bad_frames_get_error_frames_and_session_survives(echo_url: str, frame: object, code: str) -> None:
    with ws(echo_url) as sock:
        assert_error(call(sock, frame), code)
        still_serving(sock)


def test_validation_error_lists_pydantic_errors(echo_url: str) -> None:
    with ws(echo_url) as sock:
        call(sock, {"type": "reset"})
        data = assert_error(call(sock, {"type": "step", "data": {"mesage": "typo"}}), "VALIDATION_ERROR")
        kinds = {(tuple(e["loc"]), e["type"]) for e in data["errors"]}
        assert (("mesage",), "extra_forbidden") in kinds and (("message",), "missing") in kinds


def test_step_before_reset_and_after_done(echo_url: str) -> None:
    with ws(echo_url) as sock:
        assert_error(call(sock, {"type": "step", "data": {"message": "early"}}), "EPISODE_NOT_STARTED")
        call(sock, {"type": "reset", "data": {"max_steps": 1}})
        assert call(sock, {"type": "step", "data": {"message": "one"}})["data"]["done"] is True
        assert_error(call(sock, {"type": "step", "data": {"message": "late"}}), "EPISODE_DONE")
        still_serving(sock)


def test_oversize_frame_is_refused_and_session_survives(echo_url: str) -> None:
    with ws(echo_url) as sock:
        call(sock, {"type": "reset"})
        assert_error(call(sock, {"type": "step", "data": {"message": "x" * 5000}}), "MESSAGE_TOO_LARGE")
        assert_error(call(sock, {"type": "step", "data": {"message": "é" * 2100}}), "MESSAGE_TOO_LARGE")
        still_serving(sock)


def test_far_oversize_frame_closes_only_that_connection(echo_url: str) -> None:
    with ws(echo_url) as big:
        big.send(json.dumps({"type": "step", "data": {"message": "x" * 100_000}}))
        with pytest.raises(ConnectionClosed) as info:
            big.recv(timeout=10)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009  # message too big
    with ws(echo_url) as sock:
        still_serving(sock)


def test_invalid_utf8(echo_url: str) -> None:
    with ws(echo_url) as sock:
        data = assert_error(call(sock, b'{"type": "reset", "data": {"x": "\xff\xfe"}}'), "INVALID_JSON")
        assert "UTF-8" in data["message"]
        assert call(sock, b'{"type": "reset"}')["type"] == "observation"  # valid UTF-8 in a binary frame is fine
        still_serving(sock)


def test_capacity_refused_then_recovers(running_server) -> None:
    url = running_server("echo", max_sessions=2)
    with EnvClient(url) as a, EnvClient(url) as b:
        a.reset()
        b.reset()
        with EnvClient(url) as c:
            with pytest.raises(CapacityReachedError) as info:
                c.reset()
            assert info.value.data["max_sessions"] == 2 and info.value.data["active_sessions"] == 2
        assert a.step({"message": "still here"}).text == "[echo] still here\n"
    with EnvClient(url) as d:  # both closed: capacity is free again
        assert d.reset().segments


def test_env_exception_becomes_execution_error(running_server) -> None:
    url = running_server(CrashEnvironment)
    with EnvClient(url) as env:
        env.reset()
        with pytest.raises(ExecutionError, match="tool exploded"):
            env.step({"mode": "raise"})
        assert env.step({"mode": "ok"}).text == "ok\n"  # same session, same episode
        assert [s.action for s in env.trajectory.steps] == [{"mode": "ok"}]  # the failed step is not recorded


def test_factory_error(running_server) -> None:
    url = running_server(BrokenFactoryEnvironment)
    with EnvClient(url) as env, pytest.raises(FactoryError, match="no database file"):
        env.reset()
    assert httpx.get(url + "/health", trust_env=False).json() == {"status": "healthy"}


def test_typed_client_errors(echo_url: str) -> None:
    with EnvClient(echo_url) as env:
        with pytest.raises(EpisodeNotStartedError):
            env.step({"message": "early"})
        env.reset(max_steps=1)
        with pytest.raises(ActionValidationError) as info:
            env.step({"message": 5})
        assert info.value.errors[0]["loc"] == ["message"]
        with pytest.raises(MessageTooLargeError):
            env.step({"message": "x" * 5000})
        env.step({"message": "done"})
        with pytest.raises(EpisodeDoneError):
            env.step({"message": "after"})


# -- HTTP ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        (
            "post",
            "/reset",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            400,
            "INVALID_JSON",
        ),
        ("post", "/reset", {"json": {"seed": -1}}, 422, "VALIDATION_ERROR"),
        ("post", "/reset", {"json": {"seed": 1, "difficulty": "hard"}}, 422, "VALIDATION_ERROR"),
        (
            "post",
            "/reset",
            {"content": b'{"seed": "\xff"}', "headers": {"content-type": "application/json"}},
            400,
            "INVALID_JSON",
        ),
        ("post", "/step", {"json": {}}, 422, "VALIDATION_ERROR"),
        ("get", "/no-such-route", {}, 404, "HTTP_404"),
        ("get", "/reset", {}, 405, "HTTP_405"),
        ("post", "/step", {"json": {"action": {"message": 3}}}, 422, "VALIDATION_ERROR"),
        ("post", "/step", {"json": {"action": {"message": "x" * 5000}}}, 413, "MESSAGE_TOO_LARGE"),
    ],
)
def test_http_errors_are_json_with_code(
    echo_url: str, method: str, path: str, kwargs: dict, status: int, code: str
) -> None:
    response = getattr(httpx, method)(echo_url + path, trust_env=False, **kwargs)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code and body["message"]
    assert httpx.get(echo_url + "/health", trust_env=False).status_code == 200


def test_http_reset_works_statelessly(echo_url: str) -> None:
    body = httpx.post(echo_url + "/reset", json={"seed": 3, "episode_id": "h1"}, trust_env=False).json()
    assert body["observation"]["segments"][0]["role"] == "context"
    assert body["reward"] is None and body["done"] is False
    state = httpx.get(echo_url + "/state", trust_env=False).json()
    assert state == {"episode_id": None, "step_count": 0}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"garbage", -32700),
        (b"{}", -32600),
        (b"[]", -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "nope"}', -32601),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "missing"}}', -32602),
    ],
)
def test_mcp_always_answers_jsonrpc(echo_url: str, body: bytes, code: int) -> None:
    response = httpx.post(echo_url + "/mcp", content=body, trust_env=False)
    assert response.status_code == 200
    data = response.json()
    assert data["jsonrpc"] == "2.0" and data["error"]["code"] == code and data["error"]["message"]


def test_mcp_tools_list(echo_url: str) -> None:
    data = httpx.post(
        echo_url + "/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, trust_env=False
    ).json()
    message = {"type": "string", "description": "The message to echo back.", "maxLength": 65536, "title": "Message"}
    schema = {"type": "object", "properties": {"message": message}, "required": ["message"]}
    assert data == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "tools": [
                {"name": "echo_message", "description": "Echo back the provided message.", "inputSchema": schema},
                {
                    "name": "echo_with_length",
                    "description": "Echo back the message with its length.",
                    "inputSchema": schema,
                },
            ]
        },
    }

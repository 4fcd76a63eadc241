"""A WebSocket fuzzer: every reply is a well-formed error frame or a valid observation, and the server stays up."""

from __future__ import annotations

import json
import random
import string

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from openenv_echo.wire import ErrorCode

CODES = {c.value for c in ErrorCode}
FRAME_TYPES = ["reset", "step", "state", "close", "mcp", "", "RESET", "observation", "error", None, 3, [], {}]


def _random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 2**53, 2**70, 1.5, -0.0, 1e308])
    if kind == 3:
        return "".join(rng.choice(string.printable + "é✓\u0000\u202e") for _ in range(rng.randrange(20)))
    if kind == 4:
        return rng.choice(["message", "seed", "episode_id", "return_tokens", "max_steps", "type", "data"])
    if kind == 5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {
        _random_json(rng, 4)
        if rng.random() < 0.3
        else rng.choice(["message", "seed", "type", "data", "x"]): _random_json(rng, depth + 1)
        for _ in range(rng.randrange(4))
    }


def _random_frame(rng: random.Random) -> str | bytes:
    r = rng.random()
    if r < 0.1:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))  # binary garbage
    if r < 0.2:
        return "".join(rng.choice(string.printable) for _ in range(rng.randrange(1, 64)))  # text garbage
    if r < 0.25:
        depth = rng.choice([50, 5000, 50000])
        return "[" * depth + "]" * depth  # deeply nested
    if r < 0.3:
        return json.dumps({"type": "step", "data": {"message": "x" * rng.choice([10, 3000, 9000])}})  # around the limit
    frame: dict = {"type": rng.choice(FRAME_TYPES)}
    if rng.random() < 0.8:
        frame["data"] = _random_json(rng)
    if rng.random() < 0.1:
        frame[rng.choice(["extra", "id", "data2"])] = 1
    if frame["type"] == "step" and rng.random() < 0.5:
        frame["data"] = {"message": _random_json(rng) if rng.random() < 0.3 else "hi"}
    return json.dumps(frame)


def _check_reply(raw: str | bytes) -> dict:
    reply = json.loads(raw)
    assert isinstance(reply, dict) and set(reply) == {"type", "data"}, reply
    if reply["type"] == "error":
        assert reply["data"]["code"] in CODES and isinstance(reply["data"]["message"], str), reply
    elif reply["type"] == "observation":
        data = reply["data"]
        assert isinstance(data["observation"], dict) and isinstance(data["done"], bool)
        assert data["observation"]["text"] == "".join(s["text"] for s in data["observation"]["segments"])
    else:
        assert reply["type"] in ("state", "mcp"), reply
    return reply


@pytest.mark.parametrize("seed", range(6))
def test_random_frames(running_server, seed: int) -> None:
    url = running_server("echo", max_sessions=8, max_message_bytes=4096)
    ws_url = url.replace("http://", "ws://") + "/ws"
    rng = random.Random(seed)
    sock = connect(ws_url, proxy=None, compression=None, max_size=None)
    closes = 0
    try:
        for _ in range(150):
            frame = _random_frame(rng)
            try:
                sock.send(frame)
                if isinstance(frame, str) and frame == '{"type": "close"}':
                    with pytest.raises(ConnectionClosed):
                        sock.recv(timeout=5)  # close gets no reply, the server closes
                    raise ConnectionClosed(None, None)
                _check_reply(sock.recv(timeout=10))
            except ConnectionClosed:
                closes += 1
                sock = connect(ws_url, proxy=None, compression=None, max_size=None)
        sock.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        assert _check_reply(sock.recv(timeout=10))["type"] == "observation"
    finally:
        sock.close()
    assert httpx.get(url + "/health", trust_env=False).json() == {"status": "healthy"}


def test_frames_after_close_and_interleaved_sessions(running_server) -> None:
    url = running_server("echo", max_sessions=4)
    ws_url = url.replace("http://", "ws://") + "/ws"
    a = connect(ws_url, proxy=None)
    b = connect(ws_url, proxy=None)
    a.send(json.dumps({"type": "reset", "data": {"episode_id": "A"}}))
    b.send(json.dumps({"type": "reset", "data": {"episode_id": "B"}}))
    assert _check_reply(a.recv(timeout=5))["type"] == "observation"
    assert _check_reply(b.recv(timeout=5))["type"] == "observation"
    for i in range(5):  # interleave: each session sees only its own episode
        a.send(json.dumps({"type": "step", "data": {"message": f"a{i}"}}))
        b.send(json.dumps({"type": "step", "data": {"message": f"b{i}"}}))
        assert _check_reply(b.recv(timeout=5))["data"]["observation"]["text"] == f"[echo] b{i}\n"
        assert _check_reply(a.recv(timeout=5))["data"]["observation"]["text"] == f"[echo] a{i}\n"
    a.send(json.dumps({"type": "close"}))
    with pytest.raises(ConnectionClosed) as info:
        a.recv(timeout=5)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1000
    with pytest.raises(ConnectionClosed):
        a.send(json.dumps({"type": "state"}))  # after close: the socket is gone, nothing is processed
        a.recv(timeout=5)
    b.send(json.dumps({"type": "state"}))
    assert _check_reply(b.recv(timeout=5))["data"] == {"episode_id": "B", "step_count": 5}
    b.close()

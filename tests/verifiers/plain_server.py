"""A plain OpenEnv server: OpenEnv's HTTP/WebSocket protocol (``/health``, ``/schema``, WS ``/ws`` with
reset/step/state/close frames and the observation envelope) around a counter env whose observations carry their
own fields only, no role segments; the client's ``PlainTextRule`` must give them roles.

OpenEnv's own server (``openenv.core``) cannot be installed beside verifiers 0.4 (openenv 0.10 needs fastmcp 3,
which needs mcp < 2; verifiers pins mcp 2.0.0), so the tests of ``tests/verifiers`` serve the protocol with this
app; ``tests/client`` checks ``PlainTextRule`` against OpenEnv's own server in the main environment."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect  # module level: the routes' annotations name them


def plain_openenv_app(required: tuple[str, ...] = ("message",)) -> Any:
    """The app; ``required``: the action schema's required fields (two make a plain-text reply unparseable)."""
    from openenv_echo.server import ServerLimits

    app = FastAPI(title="plain OpenEnv env", version="1.0.0")
    app.state.limits = ServerLimits()
    action = {
        "type": "object",
        "properties": {"message": {"type": "string"}, "metadata": {"type": "object"}},
        "required": list(required),
        "additionalProperties": False,
    }
    observation = {
        "type": "object",
        "properties": {
            "done": {"type": "boolean"},
            "reward": {"type": ["number", "null"]},
            "metadata": {"type": "object"},
            "echoed_message": {"type": "string"},
            "message_length": {"type": "integer"},
        },
    }

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.get("/schema")
    def schema() -> dict[str, Any]:
        return {"action": action, "observation": observation, "state": {"type": "object"}}

    @app.websocket("/ws")
    async def ws(sock: WebSocket) -> None:
        await sock.accept()
        state: dict[str, Any] = {"episode_id": None, "step_count": 0}
        try:
            while True:
                frame = json.loads(await sock.receive_text())
                kind, data = frame.get("type"), frame.get("data") or {}
                if kind == "close":
                    await sock.close()
                    return
                if kind == "state":
                    await sock.send_text(json.dumps({"type": "state", "data": state}))
                    continue
                if kind == "reset":
                    state = {"episode_id": data.get("episode_id"), "step_count": 0}
                    obs: dict[str, Any] = {"echoed_message": "say something", "message_length": 0, "metadata": {}}
                    reward, done = None, False
                elif kind == "step" and isinstance(data.get("message"), str):
                    state["step_count"] += 1
                    text = data["message"]
                    obs = {"echoed_message": text, "message_length": len(text), "metadata": {}}
                    reward, done = float(len(text) % 3), state["step_count"] >= 2
                else:
                    error = {"code": "VALIDATION_ERROR", "message": f"bad {kind} frame"}
                    await sock.send_text(json.dumps({"type": "error", "data": error}))
                    continue
                reply = {"observation": obs, "reward": reward, "done": done}
                await sock.send_text(json.dumps({"type": "observation", "data": reply}))
        except WebSocketDisconnect:
            return

    return app

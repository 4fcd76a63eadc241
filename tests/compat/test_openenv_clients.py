"""OpenEnv's own client classes drive every reference env: typed ``EnvClient`` subclasses, ``GenericEnvClient``
and the MCP tool client (``MCPToolClient``, production mode: HTTP ``openenv/session/create`` then WS attach)."""

from __future__ import annotations

import httpx
import pytest
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation, ListToolsAction
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

from openenv_echo.envs import ENVIRONMENTS, load_env

from .typed_clients import TYPED_CLIENTS, EchoAction, SqlAction, TerminalAction

ENVS = sorted(name for name, spec in ENVIRONMENTS.items() if not spec.needs_docker)  # shell: tests/containers
NATIVE_ACTIONS = {
    "echo": EchoAction(message="hello world"),
    "terminal": TerminalAction(command="hostname"),
    "sql": SqlAction(query="SELECT 1 AS one, 'x' AS two"),
}
TOOL_CALLS = {
    "echo": ("echo_message", {"message": "Hello"}),
    "terminal": ("run_command", {"command": "hostname"}),
    "sql": ("query", {"sql": "SELECT 1 AS one, 'x' AS two"}),
}


def test_every_registered_env_is_covered() -> None:
    assert set(NATIVE_ACTIONS) == set(TOOL_CALLS) == set(ENVS)
    assert set(TYPED_CLIENTS) == set(ENVIRONMENTS)  # the shell env's typed client runs in the container tier


@pytest.mark.parametrize("env", ENVS)
def test_typed_client_reads_native_fields(env_urls: dict[str, str], env: str) -> None:
    """A role-unaware typed client gets every native field, strictly typed, and the state contract holds."""
    with TYPED_CLIENTS[env](base_url=env_urls[env]).sync() as client:
        first = client.reset(seed=3, episode_id="compat-1")
        result = client.step(NATIVE_ACTIONS[env])
        state = client.state()
    assert first.done is False and result.done is False
    assert state.episode_id == "compat-1" and state.step_count == 1
    obs = result.observation
    if env == "echo":
        assert (obs.echoed_message, obs.message_length, result.reward) == ("hello world", 11, 0.11)
    elif env == "terminal":
        assert obs.exit_code == 0 and obs.output.strip() and obs.output.strip() in obs.model_dump_json()
    else:
        assert (obs.columns, obs.rows, obs.row_count, obs.failed) == (["one", "two"], [[1, "x"]], 1, False)


def test_typed_echo_client_sees_the_echoed_message_on_a_plain_step(env_urls: dict[str, str]) -> None:
    """The previous generation of OpenEnv's echo client read ``echoed_message``; it must not come back empty."""
    with TYPED_CLIENTS["echo"](base_url=env_urls["echo"]).sync() as client:
        client.reset()
        assert client.step(EchoAction(message="Hello!")).observation.echoed_message == "Hello!"


@pytest.mark.parametrize("env", ENVS)
def test_generic_client_native_and_mcp_actions(env_urls: dict[str, str], env: str) -> None:
    """``GenericEnvClient`` (dicts in, dicts out): native action, ``list_tools`` and ``call_tool`` on one session."""
    tool, arguments = TOOL_CALLS[env]
    with GenericEnvClient(base_url=env_urls[env]).sync() as client:
        client.reset(seed=5)
        tools = client.step({"type": "list_tools"})
        native = client.step(NATIVE_ACTIONS[env].model_dump(exclude={"metadata"}, exclude_none=True))
        called = client.step({"type": "call_tool", "tool_name": tool, "arguments": arguments})
        state = client.state()
    names = [t["name"] for t in tools.observation["tools"]]
    assert names == [t.name for t in load_env(env).TOOLS] and "tool_name" not in tools.observation
    assert state["step_count"] == 2, "list_tools is not an episode step; a tool call is"
    assert called.observation["tool_name"] == tool and "tools" not in called.observation
    assert called.observation["segments"], "a tool call's observation carries its role segments"
    # the tool call is the same transition as its native action: same role segments
    assert [s["role"] for s in called.observation["segments"]] == [s["role"] for s in native.observation["segments"]]


@pytest.mark.parametrize("env", ENVS)
def test_mcp_tool_client(env_urls: dict[str, str], env: str) -> None:
    """``MCPToolClient`` in its default production mode: session create over HTTP ``/mcp``, WS attach, tools."""
    tool, arguments = TOOL_CALLS[env]
    with MCPToolClient(base_url=env_urls[env]).sync() as client:
        client.reset(seed=2)
        tools = client.list_tools()
        result = client.call_tool(tool, **arguments)
        stepped = client.step(CallToolAction(tool_name=tool, arguments=arguments))
        listed = client.step(ListToolsAction())
        state = client.state()
    assert [t.name for t in tools] == [t.name for t in load_env(env).TOOLS]
    assert all(t.input_schema["type"] == "object" for t in tools)
    assert isinstance(stepped.observation, CallToolObservation) and stepped.observation.error is None
    assert stepped.observation.result == result
    assert [t.name for t in listed.observation.tools] == [t.name for t in tools]
    assert state.step_count == 2, "the HTTP tool call and the WS tool call are both steps of the attached session"
    if env == "echo":
        assert result == "Hello"
    elif env == "terminal":
        assert result["exit_code"] == 0 and result["output"].strip()
    else:
        assert result["rows"] == [[1, "x"]] and result["error"] is None


def test_mcp_tool_client_echo_with_length_and_episodes(env_urls: dict[str, str]) -> None:
    with MCPToolClient(base_url=env_urls["echo"]).sync() as client:
        client.reset()
        assert client.call_tool("echo_with_length", message="Hello World!") == {"message": "Hello World!", "length": 12}
        client.call_tool("echo_message", message="E1S2")
        assert client.state().step_count == 2
        client.reset()
        assert client.state().step_count == 0
        client.call_tool("echo_message", message="E2S1")
        assert client.state().step_count == 1


def test_mcp_tool_client_bad_tool_raises(env_urls: dict[str, str]) -> None:
    with MCPToolClient(base_url=env_urls["echo"]).sync() as client:
        client.reset()
        with pytest.raises(RuntimeError, match="not found"):
            client.call_tool("no_such_tool", message="x")
        with pytest.raises(RuntimeError, match="message"):
            client.call_tool("echo_message")
        assert client.call_tool("echo_message", message="still serving") == "still serving"


def test_mcp_sessions_are_released(env_urls: dict[str, str]) -> None:
    """Closing the MCP client closes its HTTP-created session: the slots come back (4 per server here)."""
    for _ in range(6):
        with MCPToolClient(base_url=env_urls["echo"]).sync() as client:
            client.reset()
            client.call_tool("echo_message", message="x")
    health = httpx.get(env_urls["echo"] + "/health", trust_env=False)
    assert health.status_code == 200

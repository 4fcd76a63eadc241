"""MCP tools of an environment: each is a named, typed front for one native action (OpenEnv RFC 003).

A tool call is the same transition as the native action it stands for (same role segments, reward, step count),
so a trainer sees one episode whichever way the agent spoke. ``tool_observation_type`` is the env's observation
model plus OpenEnv's ``CallToolObservation`` / ``ListToolsObservation`` fields; ``/schema`` publishes it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from ..wire import RESERVED_TOOL_NAMES, Action, CallToolAction, Observation, Tool, ToolError

TOOL_CALL_FIELDS = frozenset({"tool_name", "result", "error"})
TOOL_LIST_FIELDS = frozenset({"tools"})


@dataclass(frozen=True)
class EnvTool:
    """One MCP tool: its ``arguments`` model is the input schema; ``action`` builds the native action from
    validated arguments; ``result`` picks the tool's JSON result out of the native observation."""

    name: str
    description: str
    arguments: type[BaseModel]
    action: Callable[[Any], Action]
    result: Callable[[Any], Any]

    def __post_init__(self) -> None:
        if self.name in RESERVED_TOOL_NAMES:
            raise ValueError(f"tool name {self.name!r} is reserved ({sorted(RESERVED_TOOL_NAMES)})")

    def spec(self) -> Tool:
        schema = self.arguments.model_json_schema()
        schema.pop("title", None)
        schema.pop("description", None)
        return Tool(name=self.name, description=self.description, input_schema=schema)


def call_action_types(tools: tuple[EnvTool, ...]) -> list[type[CallToolAction]]:
    """One exact ``CallToolAction`` model per tool (its name as a literal, its arguments model), so an OpenAPI
    document lists precisely the tool calls the server accepts."""
    return [_call_action_type(t) for t in tools]


def _call_action_type(t: EnvTool) -> type[CallToolAction]:
    name_type: Any = Literal[t.name]  # a literal built at run time, which a static checker cannot follow
    return create_model(
        f"Call{''.join(w.capitalize() for w in t.name.split('_'))}",
        __base__=CallToolAction,
        tool_name=(name_type, Field(description=t.description)),
        arguments=(t.arguments, ...),
    )


@functools.cache
def tool_observation_type(obs_type: type[Observation]) -> type[Observation]:
    """``obs_type`` plus the optional MCP fields; a tool-call observation leaves out ``tools``, a tool list
    leaves out ``tool_name``/``result``/``error`` (OpenEnv's clients tell the two apart by those keys)."""
    return create_model(
        obs_type.__name__,
        __base__=obs_type,
        __module__=obs_type.__module__,
        tool_name=(str | None, Field(default=None, description="The tool called (tool-call observations only).")),
        result=(Any, Field(default=None, description="The tool's result (tool-call observations only).")),
        error=(ToolError | None, Field(default=None, description="Transport/framework error of a tool call.")),
        tools=(list[Tool] | None, Field(default=None, description="The tools (tool-list observations only).")),
    )

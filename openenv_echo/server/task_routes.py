"""OpenEnv's task routes (ORS-compatible): ``/list_environments`` and ``/{env_name}/splits|tasks|num_tasks|task|task_range``.

A task is the reset options of one episode, ``{"seed": s}``, taken from the env's ``TASK_SEEDS`` splits. An env
without splits has only ``/list_environments`` (its other task routes are 404, where OpenEnv answers 501: a
server error code for a route that does not apply); an unknown env name or split is 404, an index outside the
split 400.

(No ``from __future__ import annotations`` here: FastAPI must see the request models as real annotations.)
"""

from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from .environment import Environment


class _TaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    split: str = Field(description="Task split name.")


class TaskRequest(_TaskRequest):
    index: int = Field(description="Index of the task in the split.")


class TaskRangeRequest(_TaskRequest):
    start: int | None = Field(default=None, description="Inclusive start index.")
    stop: int | None = Field(default=None, description="Exclusive stop index.")


MAX_TASKS_PER_ANSWER = 10_000


class TaskError(BaseModel):
    code: str
    message: str
    detail: Any = None


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": TaskError, "description": "index outside the split, or too many tasks for one answer"},
    404: {"model": TaskError, "description": "unknown environment name or split"},
}


def add_task_routes(app: FastAPI, env_cls: type[Environment[Any, Any]]) -> None:
    name = env_cls.env_name()
    splits = env_cls.TASK_SEEDS

    def split_of(env_name: str, split: str | None = None) -> range:
        if env_name.lower() != name.lower():
            raise HTTPException(404, f"unknown environment {env_name!r}; this server serves {name!r}")
        if split is None:
            return range(0)
        if split not in splits:
            raise HTTPException(404, f"unknown split {split!r}; splits: {sorted(splits)}")
        return splits[split]

    def tasks(seeds: range) -> list[dict[str, Any]]:
        if len(seeds) > MAX_TASKS_PER_ANSWER:
            raise HTTPException(
                400, f"{len(seeds)} tasks are too many for one answer (at most {MAX_TASKS_PER_ANSWER}): use task_range"
            )
        return [{"seed": s} for s in seeds]

    @app.get("/list_environments", tags=["tasks"])
    async def list_environments() -> list[str]:
        return [name]

    if not splits:
        return

    @app.get("/{env_name}/splits", tags=["tasks"], responses=_ERRORS)
    async def list_splits(env_name: str) -> list[dict[str, str]]:
        split_of(env_name)
        return [{"name": s, "type": s if s in ("train", "validation", "test") else "validation"} for s in splits]

    @app.post("/{env_name}/tasks", tags=["tasks"], responses=_ERRORS)
    async def list_tasks(env_name: str, request: _TaskRequest) -> dict[str, Any]:
        return {"tasks": tasks(split_of(env_name, request.split)), "env_name": name}

    @app.post("/{env_name}/num_tasks", tags=["tasks"], responses=_ERRORS)
    async def num_tasks(env_name: str, request: _TaskRequest) -> dict[str, int]:
        return {"num_tasks": len(split_of(env_name, request.split))}

    @app.post("/{env_name}/task", tags=["tasks"], responses=_ERRORS)
    async def get_task(env_name: str, request: TaskRequest) -> dict[str, Any]:
        seeds = split_of(env_name, request.split)
        if not 0 <= request.index < len(seeds):
            raise HTTPException(400, f"Invalid task index {request.index}: the split has {len(seeds)} tasks")
        return {"task": {"seed": seeds[request.index]}}

    @app.post("/{env_name}/task_range", tags=["tasks"], responses=_ERRORS)
    async def get_task_range(env_name: str, request: TaskRangeRequest) -> dict[str, Any]:
        seeds = split_of(env_name, request.split)
        return {"tasks": tasks(seeds[request.start : request.stop])}

"""The one implementation behind every OpenEnv package under ``envs/``: app, ``server`` entry point, oracle, client.

Each ``envs/<name>_env`` holds OpenEnv's layout (``openenv.yaml``, ``pyproject.toml``, ``README.md``,
``server/Dockerfile``, ``validation/runtime.json``) and its ``server/app.py``, ``client.py`` and oracle call these
with its registry name, so every package serves the same way; the env's own logic lives in its ``server/``.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..client import EnvClient, StepResult
from ..server import create_app, serve
from . import ENVIRONMENTS


def package_app(name: str) -> Any:
    """The ASGI app of env ``name`` (limits from ``OPENENV_ECHO_*`` / ``MAX_CONCURRENT_ENVS``)."""
    return create_app(ENVIRONMENTS[name].load())


def package_main(name: str, app: Any) -> None:
    """``server [--host H] [--port P]``: serve ``app`` (OpenEnv's defaults 0.0.0.0:8000)."""
    parser = argparse.ArgumentParser(description=f"Serve the openenv-echo `{name}` environment.")
    parser.add_argument("--host", default="0.0.0.0", help="Interface to bind (default 0.0.0.0).")
    parser.add_argument("--port", type=int, default=8000, help="Port (default 8000).")
    args = parser.parse_args()
    serve(app, host=args.host, port=args.port)


def oracle_main(name: str) -> None:
    """Play the env's scripted expert against a running server and print the final reward."""
    parser = argparse.ArgumentParser(description=f"Oracle of the `{name}` environment: the scripted expert.")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with EnvClient(args.url, env_name=name) as client:
        result = client.reset(seed=args.seed)
        for action in ENVIRONMENTS[name].expert_actions(args.seed):
            result = client.step(action)
            if result.done:
                break
    print(result.reward)


class PackageClient(EnvClient):
    """``EnvClient`` of one registered env (``env`` names it), with ``act(**fields)`` for its typed action."""

    env: str

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        kwargs.setdefault("env_name", self.env)
        super().__init__(base_url, **kwargs)

    def act(self, *, step_kwargs: dict[str, Any] | None = None, **fields: Any) -> StepResult:
        """Send the env's action built from ``fields`` (validated client-side); ``step_kwargs`` go to ``step``."""
        return self.step(ENVIRONMENTS[self.env].load().action_type(**fields), **(step_kwargs or {}))

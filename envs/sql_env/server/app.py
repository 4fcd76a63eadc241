"""ASGI app of the `sql` environment: ``uvicorn server.app:app`` (OpenEnv layout) or ``server --port 8000``.

Limits (sessions, idle timeout, message size, step timeout) come from the ``OPENENV_ECHO_*`` environment variables
read by ``ServerLimits.from_env()``.
"""

from __future__ import annotations

import argparse

from openenv_echo.envs.sql import SqlEnvironment
from openenv_echo.server import create_app, serve

app = create_app(SqlEnvironment)


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the openenv-echo `sql` environment.")
    parser.add_argument("--host", default="0.0.0.0", help="Interface to bind (default 0.0.0.0).")
    parser.add_argument("--port", type=int, default=8000, help="Port (default 8000).")
    args = parser.parse_args()
    serve(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()

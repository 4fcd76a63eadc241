"""ASGI app of the `shell` environment: ``uvicorn server.app:app`` (OpenEnv layout) or ``server --port 8000``."""

from openenv_echo.envs.package import package_app, package_main

app = package_app("shell")


def main() -> None:
    package_main("shell", app)


if __name__ == "__main__":
    main()

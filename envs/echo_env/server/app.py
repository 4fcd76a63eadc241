"""ASGI app of the `echo` environment: ``uvicorn server.app:app`` (OpenEnv layout) or ``server --port 8000``."""

from openenv_echo.envs.package import package_app, package_main

app = package_app("echo")


def main() -> None:
    package_main("echo", app)


if __name__ == "__main__":
    main()

"""ASGI app of the `terminal` environment: ``uvicorn server.app:app`` (OpenEnv layout) or ``server --port 8000``."""

from openenv_echo.envs.package import package_app, package_main

app = package_app("terminal")


def main() -> None:
    package_main("terminal", app)


if __name__ == "__main__":
    main()

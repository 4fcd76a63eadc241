"""Oracle of the `shell` environment: ``python validation/oracle.py --url http://127.0.0.1:8000 --seed 7``."""

from openenv_echo.envs.package import oracle_main

if __name__ == "__main__":
    oracle_main("shell")

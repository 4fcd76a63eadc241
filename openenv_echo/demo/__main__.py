"""``python -m openenv_echo.demo [--quick] [--out DIR] ...`` (same options as ``openenv-echo demo``)."""

from .cli import main

main()

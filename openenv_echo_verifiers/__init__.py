"""The verifiers plugin of openenv-echo: taskset, env and harness id ``openenv-echo-verifiers``.

verifiers resolves a plugin id to an importable top-level module that exports its ``Taskset``, ``Env`` and
``Harness`` subclasses in ``__all__``; this package is that module for ``openenv_echo.adapters.verifiers``
(``[env.taskset] id = "openenv-echo-verifiers"``). Needs ``pip install openenv-echo[verifiers]``.
"""

from openenv_echo.adapters.verifiers import EchoEnv, EchoTaskset, InProcessChatHarness

__all__ = ["EchoEnv", "EchoTaskset", "InProcessChatHarness"]

"""The CPU reference demo (``openenv-echo demo``): a small LM trained on real rollouts of the terminal env, three
RL arms (GRPO, GRPO + ECHO, verifier-free ECHO), held-out env CE and success, ``report.json`` + PNG.

Read top to bottom: ``config`` -> ``model`` -> ``rollout`` -> ``train`` -> ``evaluate`` -> ``plots`` -> ``run``.
Needs the ``train`` extra (torch, transformers, tokenizers, matplotlib); importing this package imports none of
them until used.
"""

from .config import ARMS, DemoConfig, Seeds

__all__ = ["ARMS", "DemoConfig", "Seeds", "run_demo"]


def __getattr__(name: str):  # lazy: keep `import openenv_echo.demo` free of torch
    if name == "run_demo":
        from .run import run_demo

        return run_demo
    raise AttributeError(name)

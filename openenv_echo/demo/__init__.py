"""The CPU reference demo (``openenv-echo demo``): a small LM pretrained on generic text and SFT'd on expert actions
only (how agents are usually trained), then three RL arms (GRPO, GRPO + ECHO with λ chosen on validation, direct env
CE) on its own rollouts over several seeds; held-out env CE against n-gram references, success with intervals,
``report.json`` + PNG + tables.

Read top to bottom: ``config`` -> ``envs`` -> ``corpus`` -> ``model`` -> ``rollout`` -> ``train`` -> ``ngram`` ->
``evaluate`` -> ``stats`` -> ``summarize`` -> ``tables`` -> ``plots`` -> ``run`` -> ``experiment``.
Needs the ``train`` extra (torch, transformers, tokenizers, matplotlib); importing this package imports none of
them until used.
"""

from typing import Any

from .config import ARMS, DemoConfig, Seeds

__all__ = ["ARMS", "DemoConfig", "Seeds", "run_demo"]


def __getattr__(name: str) -> Any:  # lazy: keep `import openenv_echo.demo` free of torch
    if name == "run_demo":
        from .run import run_demo

        return run_demo
    raise AttributeError(name)

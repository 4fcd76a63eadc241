"""Run the CPU reference demo (same as ``openenv-echo demo``): ``python examples/echo_world_model/run.py --quick``.

The implementation lives in ``openenv_echo/demo/`` (config, model, rollout, train, evaluate, plots, run).
"""

from openenv_echo.demo.cli import main

if __name__ == "__main__":
    main()

"""Oracle of the `terminal` environment: plays the scripted expert against a running server and prints the reward.

python validation/oracle.py --url http://127.0.0.1:8000 --seed 7
"""

from __future__ import annotations

import argparse

from openenv_echo.client import EnvClient
from openenv_echo.envs.terminal import expert_actions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with EnvClient(args.url, env_name="terminal") as client:
        result = client.reset(seed=args.seed)
        for action in expert_actions(args.seed):
            result = client.step(action)
            if result.done:
                break
    print(result.reward)


if __name__ == "__main__":
    main()

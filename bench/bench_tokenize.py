"""Benchmark: trajectory -> token ids + role masks, against plain ``tokenizer(text)`` on the same text.

Measured side by side in one run (the machine's 2 cores are shared, so only ratios are meaningful):

1. throughput: ``tokenize_trajectory`` (TITO, recorded ``action_token_ids``) and ``tokenize_offline`` over a
   set of synthetic terminal episodes, versus ``tokenizer(text)`` on each episode's full chat-template
   rendering (the same text; no masks). Target: TITO >= 0.7x the plain tokenizer.
2. scaling: time for a 100-turn episode / time for a 10-turn episode. Target: <= 11x (linear).

Run: ``python bench/bench_tokenize.py [--family qwen] [--episodes 40] [--turns 20] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

from openenv_echo.tokenize import build_tokenizer, tokenize_offline, tokenize_trajectory
from openenv_echo.tokenize.corpus import _json, _shell
from openenv_echo.tokenize.fragment import fragment_codec
from openenv_echo.tokenize.offline import conversation_from_trajectory
from openenv_echo.tokenize.template import probe_template
from openenv_echo.trajectory import ChatMessage, ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import env_output, warning

COMMANDS = ["ls -la", "cat config.json", "grep -rn TODO src", "python run.py --fast", "wc -l data.csv", "git status"]


def episode(tok: Any, turns: int, seed: int) -> Trajectory:
    """A terminal-like episode with sampler ids recorded (as a live rollout would)."""
    r = random.Random(seed)
    codec = fragment_codec(tok)
    eot = list(probe_template(tok).eot_ids)
    steps = []
    for _ in range(turns):
        cmd = r.choice(COMMANDS)
        out = "".join((_shell if r.random() < 0.7 else _json)(r) for _ in range(r.randint(1, 3)))
        steps.append(
            StepRecord(
                action={"command": cmd},
                action_text=cmd,
                action_token_ids=codec.encode_content(cmd) + eot,
                observation=ObservationRecord(segments=[warning(f"$ {cmd}\n"), env_output(out)], reward=0.0),
            )
        )
    return Trajectory(
        messages=[ChatMessage(role="system", content="You are a shell agent. Find the failing test.")],
        reset=ObservationRecord(segments=[env_output("Welcome to the sandbox.\n")]),
        steps=steps,
    )


def rendered(tok: Any, traj: Trajectory) -> str:
    msgs = [{"role": m.role, "content": m.content} for m in conversation_from_trajectory(traj)]
    return tok.apply_chat_template(msgs, tokenize=False)


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen", choices=["qwen", "llama"])
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    tok = build_tokenizer(args.family)
    trajs = [episode(tok, args.turns, seed) for seed in range(args.episodes)]
    texts = [rendered(tok, t) for t in trajs]
    for t in trajs[:2]:  # warm caches (template probe, fragment codec, fingerprint)
        tokenize_trajectory(t, tok)
        tokenize_offline(t, tok)
    n_tokens = sum(len(tokenize_trajectory(t, tok)) for t in trajs)
    n_chars = sum(map(len, texts))

    t_plain = best(lambda: [tok(x) for x in texts], args.repeat)
    t_tito = best(lambda: [tokenize_trajectory(t, tok) for t in trajs], args.repeat)
    t_off = best(lambda: [tokenize_offline(t, tok) for t in trajs], args.repeat)

    short, long_ = episode(tok, 10, 1000), episode(tok, 100, 1000)
    reps = max(args.repeat, 7)
    s_tito = best(lambda: tokenize_trajectory(long_, tok), reps) / best(lambda: tokenize_trajectory(short, tok), reps)
    s_off = best(lambda: tokenize_offline(long_, tok), reps) / best(lambda: tokenize_offline(short, tok), reps)
    s_plain = best(lambda: tok(rendered(tok, long_)), reps) / best(lambda: tok(rendered(tok, short)), reps)

    print(
        f"family={args.family} episodes={args.episodes} turns={args.turns} tokens={n_tokens} chars={n_chars} "
        f"(best of {args.repeat})"
    )
    print(f"{'method':<34}{'seconds':>9}{'tokens/s':>12}{'vs plain':>10}")
    for name, t in [
        ("tokenizer(text)  [plain, no masks]", t_plain),
        ("tokenize_trajectory  [TITO]", t_tito),
        ("tokenize_offline  [full render]", t_off),
    ]:
        print(f"{name:<34}{t:>9.4f}{n_tokens / t:>12,.0f}{t_plain / t:>9.2f}x")
    print(f"100 vs 10 turns: TITO {s_tito:.2f}x, offline {s_off:.2f}x, plain tokenizer {s_plain:.2f}x (target <= 11x)")
    ok = t_plain / t_tito >= 0.7 and s_tito <= 11
    print(
        f"targets: TITO throughput >= 0.7x plain: {t_plain / t_tito:.2f}x; 100/10 turns <= 11x: {s_tito:.2f}x "
        f"-> {'MET' if ok else 'NOT MET'}"
    )


if __name__ == "__main__":
    main()

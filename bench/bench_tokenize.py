"""Benchmark: trajectory -> token ids + role masks, against plain ``tokenizer(text)`` on the same text.

Everything is measured in one run, side by side and interleaved (plain, TITO, offline in turn within each
repeat; best of the repeats), as **CPU time of this process** (all its threads: the tokenizers library may
encode a batch on several), because the machine's cores are shared and wall time measures the neighbours:

1. throughput, per local family: ``tokenize_trajectory`` (TITO, recorded ``action_token_ids``) and
   ``tokenize_offline`` over synthetic terminal episodes, versus ``tokenizer(text)`` on each episode's chat-template
   rendering (exactly the text offline assembly renders; same tokenizer object). Targets: TITO >= 1.0x and
   offline >= 0.9x plain, for every family (``qwen3``'s template is not prefix-stable: offline only). Offline
   assembly renders the conversation with the chat template too, which the plain side is not charged for.
2. scaling: time for a 100-turn episode / time for a 10-turn episode, TITO and offline. Target: <= 11x.

It prints the load average at start and end (the neighbours' share of the cores moves every figure), one line
per target (met or MISSED) and a verdict line that checks every target printed above it.

Both sides run single-threaded: the bench sets ``TOKENIZERS_PARALLELISM=false`` unless it is set already. Plain
``tokenizer(text)`` encodes one text and never uses the tokenizers library's thread pool; the batch calls of TITO
and offline would, and the pool's idle threads spin-wait, which this process is billed for as CPU time by an
amount that depends on the neighbours' load (runs spread by +-20 % with the pool on). With it off, both sides
are the work done. ``TOKENIZERS_PARALLELISM=true python bench/bench_tokenize.py`` measures the pool's setting.

Run: ``python bench/bench_tokenize.py [--episodes 40] [--turns 20] [--repeat 11]``
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from typing import Any

from openenv_echo.tokenization import FAMILIES, build_tokenizer, template_mode, tokenize_offline, tokenize_trajectory
from openenv_echo.tokenization.corpus import _json, _shell
from openenv_echo.tokenization.fragment_encoding import fragment_codec
from openenv_echo.tokenization.offline import conversation_from_trajectory
from openenv_echo.tokenization.template import assistant_eot_text
from openenv_echo.trajectory import ChatMessage, ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import env_output, warning

COMMANDS = ["ls -la", "cat config.json", "grep -rn TODO src", "python run.py --fast", "wc -l data.csv", "git status"]


def episode(tok: Any, turns: int, seed: int) -> Trajectory:
    """A terminal-like episode with sampler ids recorded (as a live rollout would)."""
    r = random.Random(seed)
    codec = fragment_codec(tok)
    eot = codec.encode_scaffold(assistant_eot_text(tok))
    steps = []
    for _ in range(turns):
        cmd = r.choice(COMMANDS)
        out = "".join((_shell if r.random() < 0.7 else _json)(r) for _ in range(r.randint(1, 3)))
        steps.append(
            StepRecord(
                action={"command": cmd},
                action_text=cmd,
                action_token_ids=codec.encode_action(cmd) + eot,
                observation=ObservationRecord(segments=[warning(f"$ {cmd}\n"), env_output(out)], reward=0.0),
            )
        )
    return Trajectory(
        messages=[ChatMessage(role="system", content="You are a shell agent. Find the failing test.")],
        reset=ObservationRecord(segments=[env_output("Welcome to the sandbox.\n")]),
        steps=steps,
    )


def rendered(tok: Any, traj: Trajectory) -> str:
    """The text offline assembly renders for ``traj`` (same messages, same template)."""
    msgs = [{"role": m.role, "content": m.content} for m in conversation_from_trajectory(traj, tokenizer=tok)]
    return str(tok.apply_chat_template(msgs, tokenize=False))


def interleaved(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Best CPU time of each function over ``repeat`` rounds, the functions taking turns within each round."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t = time.process_time()
            fn()
            times[name].append(time.process_time() - t)
    return {k: min(v) for k, v in times.items()}


def bench_family(family: str, episodes: int, turns: int, repeat: int) -> list[tuple[str, float, float]]:
    """Print the family's table; return ``(target name, value, limit)`` rows (value >= limit unless a ratio of
    costs, which is checked as value <= limit)."""
    tok = build_tokenizer(family)
    tito_ok = template_mode(tok).mode == "tito"
    trajs = [episode(tok, turns, seed) for seed in range(episodes)]
    texts = [rendered(tok, t) for t in trajs]
    for t in trajs[:2]:  # warm caches (template probe, fragment codec, fingerprint)
        tokenize_offline(t, tok)
        if tito_ok:
            tokenize_trajectory(t, tok)
    n_tokens = sum(len(tok(x).input_ids) for x in texts)
    fns: dict[str, Callable[[], Any]] = {"plain": lambda: [tok(x) for x in texts]}
    if tito_ok:
        fns["tito"] = lambda: [tokenize_trajectory(t, tok) for t in trajs]
    fns["offline"] = lambda: [tokenize_offline(t, tok) for t in trajs]
    best = interleaved(fns, repeat)

    short, long_ = episode(tok, 10, 1000), episode(tok, 100, 1000)
    s_text, l_text = rendered(tok, short), rendered(tok, long_)
    scale_fns: dict[str, Callable[[], Any]] = {
        "plain10": lambda: tok(s_text),
        "plain100": lambda: tok(l_text),
        "off10": lambda: tokenize_offline(short, tok),
        "off100": lambda: tokenize_offline(long_, tok),
    }
    if tito_ok:
        scale_fns |= {
            "tito10": lambda: tokenize_trajectory(short, tok),
            "tito100": lambda: tokenize_trajectory(long_, tok),
        }
    sc = interleaved(scale_fns, max(3 * repeat, 15))

    print(f"\nfamily={family} episodes={episodes} turns={turns} tokens={n_tokens} (best of {repeat}, interleaved)")
    print(f"{'method':<34}{'CPU s':>9}{'tokens/s':>12}{'vs plain':>10}{'100/10 turns':>14}")
    rows = [
        ("plain", "tokenizer(text)  [plain, no masks]"),
        ("tito", "tokenize_trajectory  [TITO]"),
        ("offline", "tokenize_offline  [full render]"),
    ]
    scale_key = {"plain": "plain", "tito": "tito", "offline": "off"}
    for key, label in rows:
        if key not in best:
            print(f"{label:<34}{'n/a (template not prefix-stable)':>45}")
            continue
        cpu = best[key]
        k = scale_key[key]
        print(
            f"{label:<34}{cpu:>9.4f}{n_tokens / cpu:>12,.0f}{best['plain'] / cpu:>9.2f}x"
            f"{sc[k + '100'] / sc[k + '10']:>13.2f}x"
        )
    targets = [
        (f"{family} offline vs plain", best["plain"] / best["offline"], 0.9),
        (f"{family} offline 100/10", sc["off100"] / sc["off10"], -11.0),
    ]
    if tito_ok:
        targets += [
            (f"{family} TITO vs plain", best["plain"] / best["tito"], 1.0),
            (f"{family} TITO 100/10", sc["tito100"] / sc["tito10"], -11.0),
        ]
    return targets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated local families")
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=11)
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # read by the library at each call: see the docstring
    print(f"TOKENIZERS_PARALLELISM={os.environ['TOKENIZERS_PARALLELISM']}")
    print(f"load average at start: {_load()}")
    targets = []
    for family in args.families.split(","):
        targets += bench_family(family, args.episodes, args.turns, args.repeat)
    # a negative limit means "at most |limit|" (a cost ratio); a positive one "at least"
    met = [(v >= lim) if lim > 0 else (v <= -lim) for _, v, lim in targets]
    print("\ntargets:")
    for (name, v, lim), ok in zip(targets, met):
        print(f"  {name:<28}{v:>6.2f}x {'>=' if lim > 0 else '<='} {abs(lim):g}x  {'met' if ok else 'MISSED'}")
    print(f"load average at end: {_load()}")
    print(f"verdict: {'ALL MET' if all(met) else 'NOT MET'} ({sum(met)}/{len(met)} targets)")


def _load() -> str:
    """The 1, 5 and 15 minute load averages (the neighbours' share of the cores moves every figure)."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()

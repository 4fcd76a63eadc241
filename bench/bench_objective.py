"""Benchmark: cost of the ECHO env term in a train step, against the same step without it.

Measured side by side in one run, on the same model, batch and optimizer settings (the 2 cores are shared, so
only ratios are meaningful). Each round times one train step (zero_grad, forward, log-probs, loss, backward,
AdamW step) of three variants, in rotating order; the medians of the per-round ratios to ``vanilla`` are reported,
for wall time and for this process's CPU time (the verdict uses CPU time, which other processes on a shared
machine cannot inflate):

* ``vanilla``       – ``echo_loss`` with ``world_model_coeff = 0`` (the policy loss alone, bit-identical to it);
* ``echo``          – ``world_model_coeff = 0.05``: the env CE from the same forward's log-probs.
                      Target: <= 1.03x vanilla;
* ``second_forward``– the policy loss from one forward plus the env CE from a *second* forward of the same batch
                      (what trainers without a log-prob seam do), for comparison.

The batch is real: echo-environment episodes tokenized token-in-token-out by the project's tokenizer with its chat
template (roles context/action/env_output/warning), collated with right padding.

Run: ``python bench/bench_objective.py [--rounds 15] [--batch 8] [--turns 6] [--hidden 256] [--layers 4]
[--plot out/bench_objective.png]``
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from tqdm import tqdm

from openenv_echo.envs.echo.environment import EchoEnvironment
from openenv_echo.envs.echo.models import EchoAction
from openenv_echo.objective import (
    EchoBatch,
    EchoConfig,
    echo_loss,
    group_advantages,
    token_logps,
)
from openenv_echo.tokenization import TitoBuilder, build_tokenizer, collate

WORDS = [
    "ls",
    "cat",
    "grep",
    "error",
    "warning",
    "file",
    "data",
    "config",
    "server",
    "port",
    "user",
    "retry",
    "disk",
    "full",
    "ok",
    "done",
    "log",
    "line",
]


def make_batch(tok: Any, n: int, turns: int, seed: int) -> tuple[dict[str, torch.Tensor], EchoBatch]:
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        env = EchoEnvironment()
        b = TitoBuilder(tok, observation_role="tool")
        b.start([{"role": "user", "content": "Talk to the echo server."}], env.reset(seed=0, max_steps=turns + 2))
        for _ in range(turns):
            msg = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
            b.add_action(text=msg)
            b.add_observation(env.step(EchoAction(message=msg)))
        b.add_action(text="bye")
        items.append(b.finish())
    coll = collate(items, tokenizer=tok)
    rewards = torch.tensor([rng.random() for _ in range(n)])
    adv = group_advantages(rewards, n // 2 if n % 2 == 0 and n > 1 else n)
    batch = EchoBatch(coll["role_ids"], advantages=adv, obs_count=coll["obs_count"])
    return coll, batch


def build_model(vocab: int, hidden: int, layers: int) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(cfg).float().train()


def step_fn(
    kind: str,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    coll: dict[str, torch.Tensor],
    batch: EchoBatch,
    lam: float,
) -> Callable[[], float]:
    ids, attn = coll["input_ids"], coll["attention_mask"]
    cfg = EchoConfig(world_model_coeff=lam if kind != "vanilla" else 0.0)

    def forward_logps() -> torch.Tensor:
        return token_logps(model(input_ids=ids, attention_mask=attn).logits, ids)

    def run() -> tuple[float, float]:
        opt.zero_grad(set_to_none=True)
        t0, c0 = time.perf_counter(), time.process_time()
        lp = forward_logps()
        if kind == "second_forward":
            policy = echo_loss(lp, batch, cfg.model_copy(update={"world_model_coeff": 0.0})).loss
            loss = echo_loss(forward_logps(), batch, cfg, policy_loss=policy).loss
        else:
            loss = echo_loss(lp, batch, cfg).loss
        loss.backward()
        opt.step()
        return time.perf_counter() - t0, time.process_time() - c0

    return run


def loss_ms(batch: EchoBatch, coll: dict[str, torch.Tensor], lam: float, n: int = 50) -> float:
    """Median time of ``echo_loss`` + its backward on fixed log-probs (no model): the objective's own cost."""
    lp = torch.randn(coll["input_ids"].shape, requires_grad=True)
    cfg = EchoConfig(world_model_coeff=lam)
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        echo_loss(lp, batch, cfg).loss.backward()
        ts.append(time.perf_counter() - t0)
    return 1000 * statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--coeff", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plot", default=None, help="write a PNG bar chart of the per-step times here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    tok = build_tokenizer("qwen")
    coll, batch = make_batch(tok, args.batch, args.turns, seed=0)
    counts = {
        r: int((coll["role_ids"] == c).sum())
        for r, c in (("context", 0), ("action", 1), ("env_output", 2), ("warning", 3))
    }
    base = build_model(len(tok), args.hidden, args.layers)
    kinds = ["vanilla", "echo", "second_forward"]
    steps = {}
    for k in kinds:
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        steps[k] = step_fn(k, model, opt, coll, batch, args.coeff)
    times: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    for r in tqdm(range(args.warmup + args.rounds), desc="rounds"):
        order = kinds[r % 3 :] + kinds[: r % 3]  # rotate so no variant always runs first
        for k in order:
            dt, dc = steps[k]()
            if r >= args.warmup:
                times[k].append(dt)
                cpu[k].append(dc)
    med = {k: statistics.median(v) for k, v in times.items()}
    # paired ratios (same round, back to back) are robust to slow drifts of a shared machine; CPU time (all threads
    # of this process) is robust to other processes competing for the cores
    paired = {k: statistics.median(a / b for a, b in zip(times[k], times["vanilla"])) for k in kinds}
    cpu_ratio = {k: statistics.median(a / b for a, b in zip(cpu[k], cpu["vanilla"])) for k in kinds}
    print(
        f"\nbatch {tuple(coll['input_ids'].shape)}  tokens per role {counts}  model Qwen2 hidden={args.hidden} "
        f"layers={args.layers} vocab={len(tok)}  threads={args.threads}  rounds={args.rounds}"
    )
    print(
        f"{'variant':<16}{'median step (s)':>16}{'ratio of medians':>18}{'paired wall ratio':>19}{'paired CPU ratio':>18}"
    )
    for k in kinds:
        print(f"{k:<16}{med[k]:>16.4f}{med[k] / med['vanilla']:>17.3f}x{paired[k]:>18.3f}x{cpu_ratio[k]:>17.3f}x")
    ratio = cpu_ratio["echo"]
    print(
        f"\nECHO (same forward) / vanilla = {ratio:.3f}x CPU, {paired['echo']:.3f}x wall "
        f"(target <= 1.03x: {'PASS' if ratio <= 1.03 else 'FAIL'})"
    )
    print(
        f"second forward      / vanilla = {cpu_ratio['second_forward']:.3f}x CPU, {paired['second_forward']:.3f}x wall"
    )
    print(
        f"loss function alone: {loss_ms(batch, coll, 0.0):.2f} ms (λ=0) vs {loss_ms(batch, coll, args.coeff):.2f} ms (λ>0)"
    )
    if args.plot:
        import os

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
        ax.bar(kinds, [med[k] for k in kinds], color=["#888888", "#2b7bba", "#d95f02"])
        for i, k in enumerate(kinds):
            ax.text(i, med[k], f"{cpu_ratio[k]:.3f}x CPU", ha="center", va="bottom")
        ax.set_ylabel("median train-step time (s)")
        ax.set_title(f"ECHO env term: same forward vs second forward ({args.threads} thread(s))")
        fig.tight_layout()
        fig.savefig(args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()

"""Benchmark: a turn's prefill in the demo's sampler, as one padded batch and episode by episode at the batch layout.

A turn of ``openenv_echo.demo.rollout.PolicyRunner`` feeds each live episode the ids it has not seen yet (the last
sampled id and the observation, or the whole prompt at the first turn) on top of its cached positions. ``padded``
runs them as one batch, each episode's new ids right-aligned in a chunk as wide as the longest: what the sampler did
before, with the batch's logits from the full model. ``rows`` is the sampler's ``rollout.prefill``: each episode
alone at its place in the same layout (no pad is computed), twin fresh episodes once, the head once over the
batch. Shapes are the demo's (its ``micro`` model; 64 episodes in groups of 8): ``--turn first`` is a GRPO batch's
first turn (8 prompts of 600-631 ids, each 8 times, nothing cached), ``--turn later`` the widest later turn the
recorded runs show (about 850 cached positions, some fewer; new ids from 20 to 860, skewed short, as observations
are). Both are timed in the same run, alternating, over ``--rounds`` rounds (CPU time of this process, one thread:
the ratio is what to read). Every round compares the two: the logits and the keys and values at every position the
mask keeps must agree to 1e-5 (the same computation; products with fewer rows may round the last bit otherwise),
and the rounds where they are bit-identical are counted.

Target (printed with its verdict; the exit status is 1 if it fails): ``rows`` time / ``padded`` time ≤ 0.7 on the
turn asked for.

Run: ``python bench/bench_prefill.py [--turn first|later] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from typing import Any

import torch
from _ratio import ratio_verdict
from transformers import Cache

from openenv_echo.demo.kvcache import ReservedLayer
from openenv_echo.demo.model import build_scratch_model
from openenv_echo.demo.rollout import prefill
from openenv_echo.tokenization import build_tokenizer

TARGET = 0.7
BATCH, GROUP, DECODE = 64, 8, 32


def shapes(turn: str, rng: random.Random) -> tuple[list[int], list[int]]:
    """Cached positions and new ids per episode for a turn."""
    if turn == "first":
        prompts = [rng.randint(600, 631) for _ in range(BATCH // GROUP)]
        return [0] * BATCH, [n for n in prompts for _ in range(GROUP)]
    cached = [rng.randint(640, 855) for _ in range(BATCH)]
    new = [int(20 * 43 ** (rng.random() ** 2)) for _ in range(BATCH)]  # 20 to 860, skewed short
    cached[0], new[1] = 855, 860
    return cached, new


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--turn", choices=("first", "later"), default="later")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"device: cpu, 1 thread | torch {torch.__version__} | load average {load}")
    tok = build_tokenizer("qwen")
    model = build_scratch_model("micro", tok, max_positions=2048, seed=0).eval()
    config: Any = model.config
    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    cached, new = shapes(args.turn, rng)
    past, chunk = max(cached), max(new)
    prompts = {n: torch.randint(0, len(tok), (n,), generator=gen).tolist() for n in set(new)}
    pending = [
        prompts[n] if args.turn == "first" else torch.randint(0, len(tok), (n,), generator=gen).tolist() for n in new
    ]
    heads, dim = config.num_key_value_heads, config.hidden_size // config.num_attention_heads
    kv = [
        (torch.randn(BATCH, heads, past, dim, generator=gen), torch.randn(BATCH, heads, past, dim, generator=gen))
        for _ in range(config.num_hidden_layers)
    ]
    valid = torch.zeros((BATCH, past + chunk), dtype=torch.long)
    ids = torch.full((BATCH, chunk), int(tok.pad_token_id or 0), dtype=torch.long)
    pos = torch.zeros((BATCH, chunk), dtype=torch.long)
    for i, (c, n) in enumerate(zip(cached, new, strict=True)):
        valid[i, past - c : past] = 1
        valid[i, past + chunk - n :] = 1
        ids[i, chunk - n :] = torch.tensor(pending[i])
        pos[i, chunk - n :] = torch.arange(c, c + n)

    def cache() -> list[ReservedLayer]:
        layers = []
        for k, v in kv:
            layer = ReservedLayer(past + chunk + DECODE)
            rk, rv = layer.reserve((k, v), tuple(k.shape))
            rk[:], rv[:] = k, v
            for i, c in enumerate(cached):  # holes on the left are zeros, as the sampler's
                rk[i, :, : past - c] = 0
                rv[i, :, : past - c] = 0
            layers.append(layer)
        return layers

    def run(name: str) -> tuple[float, torch.Tensor, list[ReservedLayer]]:
        layers = cache()
        t = time.process_time()
        with torch.no_grad():
            if name == "padded":
                out = model(input_ids=ids, attention_mask=valid, position_ids=pos, past_key_values=Cache(layers=layers))
                logits = out.logits[:, -1, :]
            else:
                last = prefill(model, layers, valid, pending, cached)
                logits = model.get_output_embeddings()(last[:, None, :])[:, -1, :]
                for layer in layers:
                    layer.fill(past + chunk)
        return time.process_time() - t, logits, layers

    keep = valid.bool()
    times: dict[str, list[float]] = {"padded": [], "rows": []}
    identical, worst = 0, 0.0
    for r in range(args.rounds):
        got = {}
        for name in ("padded", "rows") if r % 2 == 0 else ("rows", "padded"):
            t, logits, layers = run(name)
            times[name].append(t)
            got[name] = (logits, layers)
        (la, ca), (lb, cb) = got["padded"], got["rows"]
        pairs = [(la, lb)] + [
            (getattr(a, x).transpose(1, 2)[keep], getattr(b, x).transpose(1, 2)[keep])
            for a, b in zip(ca, cb, strict=True)
            for x in ("keys", "values")
        ]
        diff = max(float((a - b).abs().max()) for a, b in pairs)
        identical += diff == 0.0
        worst = max(worst, diff)
        if diff > 1e-5:
            print(f"FAIL: the two prefills differ by {diff:.2e} (more than rounding)")
            return 1
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{args.turn} turn: {BATCH} episodes, {past} cached positions at most, new ids {min(new)}-{chunk} "
        f"({sum(new)} in all, {BATCH * chunk} padded), {args.rounds} rounds (median CPU seconds); logits, keys "
        f"and values bit-identical in {identical} of {args.rounds} rounds, at most {worst:.1e} apart"
    )
    return ratio_verdict(med, "rows", "padded", TARGET)


if __name__ == "__main__":
    raise SystemExit(main())

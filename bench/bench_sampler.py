"""Benchmark: one turn of the demo's batched sampler, with transformers' appending KV cache and with the in-place one.

A turn of ``openenv_echo.demo.rollout.PolicyRunner`` at the demo's shapes: the demo's ``nano`` model, 64 episodes
whose cached positions (about 1,500, some shorter: holes on the left) are assembled into one batch cache, a prefill
of the new chunk, then ``--decode`` greedy decode steps. ``dynamic`` is ``DynamicCache`` (each step's
``torch.cat`` copies the whole cache); ``reserved`` is ``Cache`` over ``openenv_echo.demo.kvcache.ReservedLayer``
(the sampler's: positions written in place into a buffer reserved for the turn). Both are timed in the same run,
alternating, over ``--rounds`` rounds (CPU time of this process, one thread: the ratio is what to read). Every
round also checks that both produce bit-identical logits at every step.

Target (printed with its verdict; the exit status is 1 if it fails): ``reserved`` time / ``dynamic`` time ≤ 0.9.

Run: ``python bench/bench_sampler.py [--rounds 5] [--batch 64] [--past 1500] [--decode 32]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import torch
from _ratio import ratio_verdict
from transformers import Cache, DynamicCache

from openenv_echo.demo.kvcache import ReservedLayer
from openenv_echo.demo.model import build_scratch_model
from openenv_echo.tokenization import build_tokenizer

TARGET = 0.9


def turn(
    model: Any, cache: Any, mask: torch.Tensor, ids: torch.Tensor, decode: int
) -> tuple[float, list[torch.Tensor]]:
    """CPU seconds of a prefill of ``ids`` then ``decode`` greedy steps on ``cache``, and the logits of each step."""
    b = ids.shape[0]
    out: list[torch.Tensor] = []
    t = time.process_time()
    with torch.no_grad():
        o = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        for _ in range(decode):
            out.append(o.logits[:, -1])
            mask = torch.cat([mask, torch.ones((b, 1), dtype=torch.long)], dim=1)
            o = model(
                input_ids=o.logits[:, -1].argmax(-1, keepdim=True),
                attention_mask=mask,
                past_key_values=o.past_key_values,
                use_cache=True,
            )
        out.append(o.logits[:, -1])
    return time.process_time() - t, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--past", type=int, default=1500, help="cached positions of the longest episode")
    ap.add_argument("--chunk", type=int, default=40, help="new ids fed at the turn's start")
    ap.add_argument("--decode", type=int, default=32, help="decode steps (the demo's max_action_tokens)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"device: cpu, 1 thread | torch {torch.__version__} | load average {load}")
    tok = build_tokenizer("qwen")
    model = build_scratch_model("nano", tok, max_positions=args.past + args.chunk + args.decode + 8, seed=0).eval()
    gen = torch.Generator().manual_seed(0)
    b, past, chunk = args.batch, args.past, args.chunk
    mask = torch.ones((b, past + chunk), dtype=torch.long)
    for i in range(b):  # episodes of different lengths: holes on the left of the shorter ones
        mask[i, : int(torch.randint(0, past // 3, (1,), generator=gen))] = 0
    with torch.no_grad():
        kv = model(input_ids=torch.randint(0, len(tok), (b, past), generator=gen), attention_mask=mask[:, :past])
    layers = [(layer.keys, layer.values) for layer in kv.past_key_values.layers]
    ids = torch.randint(0, len(tok), (b, chunk), generator=gen)

    def reserved() -> Cache:
        out: list[Any] = []
        for k, v in layers:
            layer = ReservedLayer(past + chunk + args.decode)
            rk, rv = layer.reserve((k, v), tuple(k.shape))
            rk[:], rv[:] = k, v
            out.append(layer)
        return Cache(layers=out)

    times: dict[str, list[float]] = {"dynamic": [], "reserved": []}
    for r in range(args.rounds):
        logits = {}
        order = ("dynamic", "reserved") if r % 2 == 0 else ("reserved", "dynamic")
        for name in order:
            cache = DynamicCache(ddp_cache_data=layers) if name == "dynamic" else reserved()
            t, logits[name] = turn(model, cache, mask, ids, args.decode)
            times[name].append(t)
        if not all(torch.equal(a, c) for a, c in zip(logits["dynamic"], logits["reserved"], strict=True)):
            print("FAIL: the two caches gave different logits")
            return 1
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"batch {b}, {past} cached positions, chunk {chunk}, {args.decode} decode steps, {args.rounds} rounds "
        "(median CPU seconds of one turn; logits bit-identical in every round)"
    )
    return ratio_verdict(med, "reserved", "dynamic", TARGET)


if __name__ == "__main__":
    raise SystemExit(main())

"""GPU check of the ECHO objective: conformance on the device, gradients against float64, and a real train step.

Needs torch and transformers only: the objective is imported from this checkout without the project's server
dependencies (``scripts/gpu/standalone.py``). Three sections, each printed with its verdicts:

1. ``conformance``: RFC 0004's 14 cases (``rfcs/0004-conformance.json``) recomputed on the device in float64 and
   float32; every loss term, metric and per-token weight must equal the committed value at its 7 significant
   digits (float64) or to 1e-6 relative (float32).
2. ``gradients``: random logits (B, T, V) with bf16-exact values and realistic role masks; ``token_logps`` ->
   ``echo_loss`` (λ = 0.05; ``token_mean``, and the paper's ``sequence_mean`` + ``full_observation``) -> backward,
   on the device in float32 and with bf16 logits, against the same on CPU in float64. Max |Δ∂L/∂logits| over
   max |∂L/∂logits| must be <= 1e-5 (float32) and <= 8e-3 (bf16: one rounding, half of bf16's 2^-7 ulp, and
   float32 noise); ``hidden_logps`` likewise for ∂L/∂hidden and ∂L/∂W from hidden states and an LM head.
3. ``train``: a Qwen2.5-0.5B-shaped ``Qwen2ForCausalLM`` built from its config (random weights, bf16, no
   download), B × T tokens in micro-batches with global denominators, one AdamW step per variant in rotating
   order: ``vanilla`` (λ = 0), ``echo`` (λ = 0.05, the env CE from the same forward's ``token_logps``),
   ``echo_fused`` (the same from ``hidden_logps``: no (B, T, V) logits), ``second_forward`` (the env CE from a
   second forward). Reported: median step time, its ratio to vanilla (median of per-round ratios) and the peak
   memory (``torch.cuda.max_memory_allocated``); targets: echo <= 1.03x vanilla and no more peak memory than
   vanilla (+1 %).

    python scripts/gpu/check_objective.py                    # CUDA, full sizes (well under 5 minutes on one H100)
    python scripts/gpu/check_objective.py --device cpu --tiny  # the same code at toy sizes (CI runs it)

Exit status 0 when every printed verdict is OK. ``--json PATH`` writes the records too.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch
from standalone import ROOT, load_objective

objective, PYDANTIC = load_objective()
from openenv_echo.objective import (  # noqa: E402
    Denominators,
    EchoBatch,
    EchoConfig,
    conformance,
    echo_loss,
    group_advantages,
    hidden_logps,
    local_denominators,
    token_logps,
    token_weights,
)
from openenv_echo.roles import PAD_ROLE_CODE, Role  # noqa: E402

C, A, E, W, P = Role.CONTEXT.code, Role.ACTION.code, Role.ENV_OUTPUT.code, Role.WARNING.code, PAD_ROLE_CODE
QWEN25_05B = {  # Qwen2.5-0.5B's config.json shape (its weights are never needed: random init)
    "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
    "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
}  # fmt: skip
TINY_MODEL = {**QWEN25_05B, "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512}  # fmt: skip
FULL = {"grad_shape": (2, 512, 151936), "grad_hidden": 896, "batch": 8, "seq": 4096, "micro": 2, "rounds": 5}
TINY = {"grad_shape": (3, 40, 97), "grad_hidden": 16, "batch": 4, "seq": 64, "micro": 2, "rounds": 2}
TOL = {torch.float32: 1e-5, torch.bfloat16: 8e-3}
GiB = 2**30


class Verdicts:
    """Every check printed with OK / FAIL as it is made; the exit status is 1 if one failed."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def check(self, name: str, ok: bool, detail: str, **data: Any) -> None:
        self.records.append({"check": name, "ok": ok, "detail": detail, **data})
        print(f"  [{'OK' if ok else 'FAIL'}] {name}: {detail}", flush=True)

    @property
    def ok(self) -> bool:
        return all(r["ok"] for r in self.records)


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# -- 1. conformance --------------------------------------------------------------------------------------------
def _r7(x: float) -> float | None:
    return None if math.isnan(x) else float(f"{x:.7g}") + 0.0


def _equal(a: Any, b: Any) -> bool:
    return bool(a == b)


def _close(a: Any, b: Any) -> bool:
    """Equal up to float32 rounding (1e-6 relative): float32 sums may round the 7th digit the other way."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-6 * max(1.0, abs(b))
    return bool(a == b)


def section_conformance(v: Verdicts, dev: torch.device) -> None:
    committed = {c["name"]: c for c in json.loads((ROOT / "rfcs" / "0004-conformance.json").read_text())["cases"]}
    for dtype in (torch.float64, torch.float32):
        bad = []
        for case in conformance.CASES:
            width = max(len(r) for r in case.rows)
            rid = torch.tensor([[conformance._LETTERS[c] for c in r.ljust(width, ".")] for r in case.rows])
            b, t = rid.shape
            lp = torch.tensor([[conformance.logp(i, j) for j in range(t)] for i in range(b)], dtype=dtype)

            def opt(x: Any, kind: torch.dtype) -> torch.Tensor | None:
                return None if x is None else torch.tensor(x, dtype=kind, device=dev)

            batch = EchoBatch(
                rid.to(dev),
                advantages=opt(case.advantages, dtype),
                obs_count=opt(case.obs_count, dtype),
                verifier_free=opt(case.verifier_free, torch.bool),
                includes_sequence_start=case.includes_sequence_start,
            )
            cfg = EchoConfig(**case.config)
            m = echo_loss(lp.to(dev), batch, cfg).metrics_as_floats()
            tw = token_weights(batch, cfg)
            got = {
                "policy_loss": _r7(m["echo/policy_loss"]),
                "world_loss": _r7(m["echo/world_loss"]),
                "loss": _r7(m["echo/loss"]),
                "env_ce_per_token": _r7(m["echo/env_ce_per_token"]),
                "selected_per_row": [int(x) for x in tw.world_mask.sum(dim=1).tolist()],
                "policy_weights": [[_r7(x) for x in row] for row in tw.policy.double().tolist()],
                "world_weights": [[_r7(x) for x in row] for row in tw.world.double().tolist()],
            }
            want = committed[case.name]["expected"]
            same = _equal if dtype == torch.float64 else _close
            if any(not same(got[k], want[k]) for k in got):
                bad.append(case.name)
        v.check(
            f"conformance {dev.type} {str(dtype).removeprefix('torch.')}",
            not bad,
            f"{len(conformance.CASES) - len(bad)}/{len(conformance.CASES)} RFC 0004 cases "
            + ("equal to 7 digits" if dtype == torch.float64 else "equal to float32 rounding (1e-6 relative)")
            + (f"; differ: {bad}" if bad else ""),
        )


# -- 2. gradients against float64 -------------------------------------------------------------------------------
def make_role_ids(b: int, t: int, seed: int, env_frac: float = 0.4) -> torch.Tensor:
    """(b, t) multi-turn rows: prompt, reset observation, then [action, scaffold, env_output, warning?, scaffold]
    turns; rows after the first are 60-100 % long and right-padded; about ``env_frac`` env_output tokens."""
    rng = random.Random(seed)
    scale = max(t / 4096, 1 / 64)

    def seg(median: float) -> int:
        return max(1, round(rng.lognormvariate(math.log(median * scale), 0.5)))

    env_median = 1.1 * env_frac / (1 - env_frac) * 146
    rows = []
    for i in range(b):
        length = t if i == 0 else rng.randint(int(0.6 * t), t)
        r = [C] * seg(250) + [E] * seg(150) + [C] * seg(8)
        while len(r) < length:
            r += [A] * seg(120) + [C] * seg(10) + [E] * seg(env_median)
            r += [W] * seg(20) if rng.random() < 0.3 else []
            r += [C] * seg(10)
        rows.append(r[:length] + [P] * (t - length))
    return torch.tensor(rows)


CONFIGS = {
    "token_mean": {"world_model_coeff": 0.05},
    "paper": {"world_model_coeff": 0.05, "normalization": "sequence_mean", "sequence_denominator": "full_observation"},
}


def _loss(lp: torch.Tensor, rid: torch.Tensor, adv: torch.Tensor, cfg: EchoConfig) -> torch.Tensor:
    batch = EchoBatch(rid.to(lp.device), advantages=adv.to(lp.device, lp.dtype), old_logps=lp.detach())
    loss: torch.Tensor = echo_loss(lp, batch, cfg).loss
    return loss


def _rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.double().cpu() - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


def section_gradients(v: Verdicts, dev: torch.device, sizes: dict[str, Any]) -> None:
    b, t, vocab = sizes["grad_shape"]
    gen = torch.Generator().manual_seed(1)
    logits = (torch.randn(b, t, vocab, generator=gen) * 2).to(torch.bfloat16).double()  # bf16-exact values
    ids = torch.randint(0, vocab, (b, t), generator=gen)
    rid = make_role_ids(b, t, seed=1)
    adv = group_advantages(torch.rand(b, generator=gen, dtype=torch.float64), b)
    hdim, th = sizes["grad_hidden"], min(t, 128)  # the fused path on the first 128 positions (CPU float64 matmuls)
    hidden = (torch.randn(b, th, hdim, generator=gen)).to(torch.bfloat16).double()
    weight = (torch.randn(vocab, hdim, generator=gen) * 0.05).to(torch.bfloat16).double()
    for name, raw in CONFIGS.items():
        cfg = EchoConfig(**raw)
        x64 = logits.clone().requires_grad_(True)
        _loss(token_logps(x64, ids), rid, adv, cfg).backward()
        h64, w64 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
        _loss(hidden_logps(h64, w64, ids[:, :th]), rid[:, :th], adv, cfg).backward()
        for dtype in (torch.float32, torch.bfloat16):
            x = logits.to(dev, dtype).requires_grad_(True)
            _loss(token_logps(x, ids.to(dev)), rid, adv, cfg).backward()
            assert x.grad is not None and x64.grad is not None
            err = _rel(x.grad, x64.grad)
            v.check(
                f"∂L/∂logits {name} {dev.type} {str(dtype).removeprefix('torch.')}",
                err <= TOL[dtype],
                f"max|Δ| / max|ref| = {err:.2e} (<= {TOL[dtype]:g}) vs CPU float64, logits {[b, t, vocab]}",
                rel=err,
            )
            h, w = hidden.to(dev, dtype).requires_grad_(True), weight.to(dev, dtype).requires_grad_(True)
            _loss(hidden_logps(h, w, ids[:, :th].to(dev)), rid[:, :th], adv, cfg).backward()
            assert h.grad is not None and w.grad is not None and h64.grad is not None and w64.grad is not None
            # bf16: the logits themselves are rounded to bf16 by the head's matmul (as in the model), so the
            # reference is float64 of bf16-exact inputs and the bound is the logits' bound times a few roundings
            tol = TOL[dtype] if dtype == torch.float32 else 4 * TOL[dtype]
            eh, ew = _rel(h.grad, h64.grad), _rel(w.grad, w64.grad)
            v.check(
                f"hidden_logps ∂L/∂hidden, ∂L/∂W {name} {dev.type} {str(dtype).removeprefix('torch.')}",
                max(eh, ew) <= tol,
                f"{eh:.2e}, {ew:.2e} (<= {tol:g}) vs CPU float64, hidden {[b, th, hdim]}",
                rel_hidden=eh,
                rel_weight=ew,
            )


# -- 3. train step ---------------------------------------------------------------------------------------------
def build_model(dev: torch.device, tiny: bool) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(**(TINY_MODEL if tiny else QWEN25_05B))
    dtype = torch.float32 if dev.type == "cpu" else torch.bfloat16
    return Qwen2ForCausalLM(cfg).to(dev, dtype).train()


def section_train(v: Verdicts, dev: torch.device, sizes: dict[str, Any], tiny: bool) -> None:
    b, t, micro = sizes["batch"], sizes["seq"], sizes["micro"]
    t0 = time.perf_counter()
    model = build_model(dev, tiny)
    vocab = model.config.vocab_size
    params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, vocab, (b, t), generator=gen).to(dev)
    rid = make_role_ids(b, t, seed=2).to(dev)
    attn = (rid != P).long()
    adv = group_advantages(torch.rand(b, generator=gen), b).to(dev)
    full = EchoBatch(rid, advantages=adv)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-7)
    shares = {r.value: float((rid == r.code).float().mean()) for r in Role}
    print(f"  model: Qwen2 {params / 1e6:.0f}M params ({model.config.hidden_size}h x {model.config.num_hidden_layers}L, "
          f"vocab {vocab}), {next(model.parameters()).dtype}, built in {time.perf_counter() - t0:.1f}s; batch {b}x{t} "
          f"in micro-batches of {micro}; roles {', '.join(f'{k} {x:.0%}' for k, x in shares.items())}")  # fmt: skip

    def lp_logits(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return token_logps(model(input_ids=x, attention_mask=mask).logits, x)

    def lp_hidden(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = model.base_model(input_ids=x, attention_mask=mask).last_hidden_state
        return hidden_logps(hidden, model.get_output_embeddings().weight, x)

    def step(kind: str) -> None:
        cfg = EchoConfig(world_model_coeff=0.0 if kind == "vanilla" else 0.05)
        policy_cfg = EchoConfig()
        chunks = [slice(s, s + micro) for s in range(0, b, micro)]
        dens = Denominators.total(local_denominators(full.rows(c), cfg) for c in chunks)
        for c in chunks:
            x, mask, mb = ids[c], attn[c], full.rows(c)
            lp = (lp_hidden if kind == "echo_fused" else lp_logits)(x, mask)
            if kind == "second_forward":
                policy = echo_loss(lp, mb, policy_cfg, denominators=dens).loss
                loss = echo_loss(lp_logits(x, mask), mb, cfg, denominators=dens, policy_loss=policy).loss
            else:
                loss = echo_loss(lp, mb, cfg, denominators=dens).loss
            loss.backward()
        opt.step()

    kinds = ["vanilla", "echo", "echo_fused", "second_forward"]
    times: dict[str, list[float]] = {k: [] for k in kinds}
    peaks: dict[str, int] = dict.fromkeys(kinds, 0)
    base = 0
    for r in range(1 + sizes["rounds"]):  # round 0 is a warmup (allocator, kernels, AdamW state)
        for k in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
            opt.zero_grad(set_to_none=True)
            sync(dev)
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
                base = torch.cuda.memory_allocated(dev)
            t1 = time.perf_counter()
            step(k)
            sync(dev)
            if r > 0:
                times[k].append(time.perf_counter() - t1)
                if dev.type == "cuda":
                    peaks[k] = max(peaks[k], torch.cuda.max_memory_allocated(dev) - base)
    med = {k: statistics.median(x) for k, x in times.items()}
    ratio = {k: statistics.median(a / c for a, c in zip(times[k], times["vanilla"])) for k in kinds}
    print(f"  {'variant':<16}{'median ms':>11}{'x vanilla':>11}{'peak GiB':>10}  (peak: above weights + AdamW state)")
    for k in kinds:
        peak = f"{peaks[k] / GiB:>10.2f}" if dev.type == "cuda" else f"{'-':>10}"
        print(f"  {k:<16}{1000 * med[k]:>11.1f}{ratio[k]:>11.3f}{peak}")
    if dev.type != "cuda":
        print("  (CPU: time and memory at toy size say nothing; --tiny checks that the step runs)")
        v.check("train step runs", all(math.isfinite(x) for x in med.values()), "4 variants, finite step times")
        return
    v.check("echo step time", ratio["echo"] <= 1.03, f"{ratio['echo']:.3f}x vanilla (<= 1.03x)", ratios=ratio)
    for k in ("echo", "echo_fused"):
        v.check(
            f"{k} peak memory",
            peaks[k] <= 1.01 * peaks["vanilla"],
            f"{peaks[k] / GiB:.2f} GiB vs vanilla {peaks['vanilla'] / GiB:.2f} GiB (<= +1 %)",
            peaks={x: y / GiB for x, y in peaks.items()},
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:1, cpu")
    ap.add_argument("--tiny", action="store_true", help="toy sizes: a 2-layer model, logits (3, 40, 97)")
    ap.add_argument("--sections", default="conformance,gradients,train")
    ap.add_argument("--json", default=None, help="also write the verdicts here")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu --tiny for the CPU check", file=sys.stderr)
        return 2
    sizes = TINY if args.tiny else FULL
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu"
    print(f"ECHO objective check on {name} | torch {torch.__version__} (CUDA {torch.version.cuda}) | pydantic: "
          f"{PYDANTIC} | objective from {Path(objective.__file__).parent}")  # fmt: skip
    v = Verdicts()
    sections: dict[str, Callable[[], None]] = {
        "conformance": lambda: section_conformance(v, dev),
        "gradients": lambda: section_gradients(v, dev, sizes),
        "train": lambda: section_train(v, dev, sizes, args.tiny),
    }
    t0 = time.perf_counter()
    for s in args.sections.split(","):
        print(f"{s}:", flush=True)
        t1 = time.perf_counter()
        sections[s]()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        print(f"  ({time.perf_counter() - t1:.1f}s)")
    n_ok = sum(r["ok"] for r in v.records)
    print(f"verdict: {n_ok}/{len(v.records)} checks OK in {time.perf_counter() - t0:.1f}s")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": name, "pydantic": PYDANTIC, "checks": v.records}, indent=1))
    return 0 if v.ok else 1


if __name__ == "__main__":
    sys.exit(main())

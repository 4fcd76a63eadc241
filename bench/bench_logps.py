"""Benchmark: per-token log-probs (forward + backward) from bf16 logits or hidden states, time and peak memory.

Implementations, all giving the (B, T-1) log-probs of ``ids[:, 1:]`` and backpropagated with the same random
upstream gradient:

* from bf16 logits (B, T, V): ``token_logps`` (the project's, chunked, custom backward); ``gather_fp32`` (the
  plain ``gather(log_softmax(logits.float()))``, the strongest simple baseline); ``gather_bf16`` (the same in bf16:
  cheap, 0.06 nats off); ``unchunked_fp32`` (the previous ``token_logps``: a float32 copy and ``logsumexp``);
* from bf16 hidden states (B, T, H) and an LM head (V, H): ``hidden_logps`` (fused, never materialises the logits);
  ``head_gather_fp32`` (``hidden @ W.T`` then ``gather_fp32``, what a model's forward + the plain helper does).

Memory is the peak above the inputs during forward + backward, gradients included, in units of the bf16 logits'
bytes (B·T·V·2; the logits' gradient alone is 1×). On CPU each implementation runs in a fresh subprocess and its
peak is its own RSS high-water mark (``VmHWM``; ``getrusage``'s carries the parent's across exec) minus the RSS once its inputs exist (after one call on
tiny inputs, so that the kernels' code pages are not counted, and minus file-backed pages faulted in since; glibc's mmap threshold is fixed at 1 MiB with
``MALLOC_MMAP_THRESHOLD_`` so that a freed block leaves the RSS as it leaves the allocator); on CUDA it is
``torch.cuda.max_memory_allocated`` minus the memory allocated before. Time is the median of ``--reps`` timed
forward + backward passes after one warmup (wall time: on a shared CPU it includes the neighbours' load, so read
the ratios, which are measured in the same run). Accuracy: max |error| in nats against float64 on the first 256
positions of row 0 (for the hidden-state paths the reference is float64 of the same bf16 head output).

CPU runs use one thread by default (``--threads``): on a shared, loaded machine a parallel kernel waits for its
slowest thread, whose core another process holds, which costs the many small kernels of the chunked paths most
(10x for ``hidden_logps`` at ``--small`` under a load average of 13).

Targets (each printed with its verdict; the exit status is 1 if one fails):

* ``token_logps`` peak <= 1.5x the logits' bytes; error <= 1e-4 nats; on CUDA also time <= ``gather_fp32``'s;
* ``hidden_logps`` peak < 1x the logits' bytes, and <= 0.25x without the gradients of hidden and weight (which any
  path allocates).

Run: ``python bench/bench_logps.py [--device cuda] [--small] [--reps 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from openenv_echo.objective import hidden_logps, token_logps

LOGITS_IMPLS = ("token_logps", "gather_fp32", "gather_bf16", "unchunked_fp32")
HIDDEN_IMPLS = ("hidden_logps", "head_gather_fp32")
FULL = {"batch": 2, "seq": 1024, "vocab": 151936, "hidden": 896}  # Qwen2.5-0.5B's vocabulary and hidden size
SMALL = {"batch": 2, "seq": 512, "vocab": 32000, "hidden": 64}  # a narrow head: its gradient stays small
REF_POSITIONS = 256


def _gather_fp32(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return torch.gather(x[:, :-1].float().log_softmax(-1), -1, ids[:, 1:, None]).squeeze(-1)


def _gather_bf16(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return torch.gather(x[:, :-1].log_softmax(-1), -1, ids[:, 1:, None]).squeeze(-1)


def _unchunked_fp32(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    scaled = x[:, :-1].float()
    return scaled.gather(-1, ids[:, 1:, None]).squeeze(-1) - torch.logsumexp(scaled, dim=-1)


LOGITS_FNS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "token_logps": lambda x, ids: token_logps(x, ids)[:, 1:],
    "gather_fp32": _gather_fp32,
    "gather_bf16": _gather_bf16,
    "unchunked_fp32": _unchunked_fp32,
}
HIDDEN_FNS: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "hidden_logps": lambda h, w, ids: hidden_logps(h, w, ids)[:, 1:],
    "head_gather_fp32": lambda h, w, ids: _gather_fp32(h @ w.T, ids),
}


def _rss_bytes() -> tuple[int, int]:
    """(resident, of which file-backed): code pages the kernel may evict under pressure and fault back in."""
    with open("/proc/self/status") as f:
        kb = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in f) if k in ("VmRSS", "RssFile")}
    return kb["VmRSS"] * 1024, kb["RssFile"] * 1024


def _peak_rss_bytes() -> int:
    """VmHWM, this process's own high-water mark (getrusage's ru_maxrss carries the parent's peak across exec)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _normal_bf16(shape: tuple[int, ...], dev: torch.device, gen: torch.Generator, std: float) -> torch.Tensor:
    """A bf16 tensor filled row block by row block (no float32 copy of it ever exists)."""
    x = torch.empty(shape, dtype=torch.bfloat16, device=dev)
    flat = x.view(-1, shape[-1])
    for s in range(0, flat.shape[0], 64):
        flat[s : s + 64].normal_(0.0, std, generator=gen)
    return x


def measure(impl: str, sizes: dict[str, int], dev: torch.device, reps: int, seed: int) -> dict[str, Any]:
    """Time, peak memory above the inputs and accuracy of one implementation (in this process)."""
    b, t, v, hdim = sizes["batch"], sizes["seq"], sizes["vocab"], sizes["hidden"]
    if dev.type == "cpu" and (b, t) != (1, 3):  # page in the kernels' code first: RSS counts it, it is no allocation
        measure(impl, {"batch": 1, "seq": 3, "vocab": 8, "hidden": 4}, dev, 1, seed)
    gen = torch.Generator(device=dev).manual_seed(seed)
    ids = torch.randint(0, v, (b, t), generator=gen, device=dev)
    upstream = torch.randn(b, t - 1, generator=gen, device=dev)
    if impl in LOGITS_FNS:
        x = _normal_bf16((b, t, v), dev, gen, 2.0).requires_grad_(True)
        inputs = [x]
        run: Callable[[], torch.Tensor] = lambda: LOGITS_FNS[impl](x, ids)  # noqa: E731
    else:
        h = _normal_bf16((b, t, hdim), dev, gen, 1.0).requires_grad_(True)
        w = _normal_bf16((v, hdim), dev, gen, 0.05).requires_grad_(True)
        inputs = [h, w]
        run = lambda: HIDDEN_FNS[impl](h, w, ids)  # noqa: E731
    _sync(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
    else:
        base, file_base = _rss_bytes()
    ms = []
    for i in range(1 + reps):
        for p in inputs:
            p.grad = None
        _sync(dev)
        t0 = time.perf_counter()
        run().backward(upstream)
        _sync(dev)
        if i > 0:
            ms.append(1000 * (time.perf_counter() - t0))
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated(dev) - base
    else:  # file pages faulted back in since the baseline are no allocation
        peak = _peak_rss_bytes() - base - max(0, _rss_bytes()[1] - file_base)
    grad_bytes = sum(p.numel() * p.element_size() for p in inputs)  # the gradients any implementation returns
    for p in inputs:
        p.grad = None
    err = _error(impl, inputs, ids)
    return {
        "impl": impl,
        "ms": statistics.median(ms),
        "peak_bytes": peak,
        "grad_bytes": grad_bytes,
        "logits_bytes": b * t * v * 2,
        "err": err,
    }


def _error(impl: str, inputs: list[torch.Tensor], ids: torch.Tensor) -> float:
    """Max |error| (nats) against float64 on the first REF_POSITIONS positions of row 0."""
    n = min(REF_POSITIONS, ids.shape[1] - 1)
    sub_ids = ids[0:1, : n + 1]
    with torch.no_grad():
        if impl in LOGITS_FNS:
            x = inputs[0][0:1, : n + 1]
            got = LOGITS_FNS[impl](x, sub_ids)
        else:
            h, w = inputs[0][0:1, : n + 1], inputs[1]
            x = h @ w.T
            got = HIDDEN_FNS[impl](h, w, sub_ids)
        ref = torch.gather(x[:, :-1].double().log_softmax(-1), -1, sub_ids[:, 1:, None]).squeeze(-1)
        return float((got.double() - ref).abs().max())


def run_all(args: argparse.Namespace, sizes: dict[str, int]) -> list[dict[str, Any]]:
    dev = torch.device(args.device)
    results = []
    for impl in (*LOGITS_IMPLS, *HIDDEN_IMPLS):
        if dev.type == "cuda":
            results.append(measure(impl, sizes, dev, args.reps, args.seed))
            torch.cuda.empty_cache()
            continue
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", impl, "--reps", str(args.reps)]
        cmd += ["--seed", str(args.seed), "--threads", str(args.threads), "--sizes", json.dumps(sizes)]
        env = {
            **os.environ,
            "MALLOC_MMAP_THRESHOLD_": str(2**20),
        }  # a fixed threshold: freed large blocks go back to the OS
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"worker {impl} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return results


def report(results: list[dict[str, Any]], sizes: dict[str, int], dev: torch.device) -> bool:
    by = {r["impl"]: r for r in results}
    gib = 2**30
    b, t, v, hdim = sizes["batch"], sizes["seq"], sizes["vocab"], sizes["hidden"]
    print(f"logits bf16 [{b}, {t}, {v}] = {by['token_logps']['logits_bytes'] / gib:.2f} GiB; hidden [{b}, {t}, {hdim}]")
    mem = "RSS high-water above the inputs (fresh process each)" if dev.type == "cpu" else "max_memory_allocated"
    print(f"peak: {mem}, gradients included; x logits: peak / bf16 logits' bytes; x time: vs gather_fp32")
    print(f"{'impl':<18}{'input':<8}{'f+b ms':>10}{'x time':>8}{'peak GiB':>10}{'x logits':>10}{'err vs f64':>12}")
    base_ms = by["gather_fp32"]["ms"]
    for r in results:
        src = "logits" if r["impl"] in LOGITS_FNS else "hidden"
        print(
            f"{r['impl']:<18}{src:<8}{r['ms']:>10.1f}{r['ms'] / base_ms:>8.2f}{r['peak_bytes'] / gib:>10.3f}"
            f"{r['peak_bytes'] / r['logits_bytes']:>10.2f}{r['err']:>12.1e}"
        )
    tl, hl = by["token_logps"], by["hidden_logps"]
    targets: list[tuple[str, float, str, float]] = [
        ("token_logps peak / logits", tl["peak_bytes"] / tl["logits_bytes"], "<=", 1.5),
        ("token_logps error vs float64 (nats)", tl["err"], "<=", 1e-4),
        ("hidden_logps peak / logits", hl["peak_bytes"] / hl["logits_bytes"], "<", 1.0),
        (
            "hidden_logps peak without its gradients / logits",
            (hl["peak_bytes"] - hl["grad_bytes"]) / hl["logits_bytes"],
            "<=",
            0.25,
        ),
    ]
    if dev.type == "cuda":
        targets.append(("token_logps time / gather_fp32 time", tl["ms"] / base_ms, "<=", 1.0))
    met = 0
    print("targets:")
    for name, value, op, bound in targets:
        ok = value <= bound if op == "<=" else value < bound
        met += ok
        print(f"  {name}: {value:.3g} (target {op} {bound:g}) -> {'MET' if ok else 'NOT MET'}")
    print(f"verdict: {met}/{len(targets)} targets met")
    return met == len(targets)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--device", default="cpu", help="cpu (a fresh process per implementation) or cuda")
    ap.add_argument("--small", action="store_true", help=f"quick check at {SMALL} instead of {FULL}")
    ap.add_argument("--reps", type=int, default=3, help="timed forward + backward passes after one warmup")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default); see above")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker is not None:
        print(json.dumps(measure(args.worker, json.loads(args.sizes), torch.device("cpu"), args.reps, args.seed)))
        return 0
    sizes = SMALL if args.small else FULL
    dev = torch.device(args.device)
    if dev.type == "cuda":
        print(f"device: {torch.cuda.get_device_name(dev)} | torch {torch.__version__} (CUDA {torch.version.cuda})")
    else:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"device: cpu, {torch.get_num_threads()} threads | torch {torch.__version__} | load average {load}")
    return 0 if report(run_all(args, sizes), sizes, dev) else 1


if __name__ == "__main__":
    sys.exit(main())

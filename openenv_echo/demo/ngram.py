"""Reference lines for held-out env CE: uniform, and the n-gram ladder (unigram to 4-gram) of the *training* env text.

Every reference scores exactly the env-CE targets the model is scored on (same tokenizer, same target positions),
so their nats/token sit on the same axis as the arms'. Counts come from the env targets of the training episodes;
an n-gram conditions on the n - 1 tokens just before the target (whatever their role, as the model sees them).
Smoothing is chosen on the validation targets from a fixed grid, one order at a time, then applied once to test:

* unigram: add-k, ``p1(w) = (c(w) + k) / (N + k V)``;
* n-gram (n = 2, 3, 4): interpolated with the (n-1)-gram below it,
  ``pn(w | h) = (c(h, w) + a_n p(n-1)(w | h')) / (c(h) + a_n)``, ``h'`` the last n - 2 tokens of ``h``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

UNIGRAM_K = (0.001, 0.01, 0.1, 0.5, 1.0)
INTERPOLATION_A = (0.01, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
BIGRAM_A = INTERPOLATION_A
ORDERS = ("unigram", "bigram", "trigram", "fourgram")
CONTEXT = len(ORDERS) - 1
REFERENCES = ("uniform", *ORDERS)
"""The reference lines of the report, weakest first."""


@dataclass(frozen=True)
class Targets:
    """A split's env-CE targets with the ``CONTEXT`` tokens before each (oldest first; -1 where the sequence
    starts later)."""

    context: torch.Tensor  # (N, CONTEXT) long
    target: torch.Tensor  # (N,) long

    @property
    def prev(self) -> torch.Tensor:
        return self.context[:, -1]

    def __len__(self) -> int:
        return int(self.target.numel())


def targets_of(input_ids: list[torch.Tensor], selected: list[torch.Tensor]) -> Targets:
    """Targets from per-sequence ids and a bool mask of target positions (a target at t has its context before t)."""
    ctx, tgt = [], []
    for ids, sel in zip(input_ids, selected, strict=True):
        pos = torch.nonzero(sel[: len(ids)]).flatten()
        if bool((pos < 1).any()):
            raise ValueError("a target at position 0 has no previous token")
        padded = torch.cat([torch.full((CONTEXT,), -1, dtype=torch.long), ids.long()])
        ctx.append(torch.stack([padded[pos + CONTEXT - k] for k in range(CONTEXT, 0, -1)], dim=1))
        tgt.append(ids[pos])
    if not tgt:
        return Targets(torch.zeros((0, CONTEXT), dtype=torch.long), torch.zeros(0, dtype=torch.long))
    return Targets(torch.cat(ctx).long(), torch.cat(tgt).long())


def unigram_logp(train: Targets, vocab: int, k: float) -> torch.Tensor:
    counts = torch.bincount(train.target, minlength=vocab).double()
    return torch.log((counts + k) / (counts.sum() + k * vocab))


def _keys(ctx: torch.Tensor, base: int) -> torch.Tensor:
    """One int64 key per row of context tokens (-1 padding included, hence ``base`` = V + 1)."""
    key = torch.zeros(ctx.shape[0], dtype=torch.long)
    for col in range(ctx.shape[1]):
        key = key * base + (ctx[:, col] + 1)
    return key


def _lookup(table: torch.Tensor, counts: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    if not len(table):
        return torch.zeros(len(keys), dtype=torch.float64)
    idx = torch.searchsorted(table, keys).clamp(max=len(table) - 1)
    return torch.where(table[idx] == keys, counts[idx].double(), torch.zeros((), dtype=torch.float64))


def interpolate(train: Targets, held: Targets, vocab: int, order: int, a: float, lower: torch.Tensor) -> torch.Tensor:
    """Per-target probability of ``held`` under the interpolated ``order``-gram (``order`` >= 2), given the
    (order-1)-gram's probabilities ``lower`` of the same targets."""
    n_ctx = order - 1
    base = vocab + 1
    ctx_tr, ctx_held = train.context[:, CONTEXT - n_ctx :], held.context[:, CONTEXT - n_ctx :]
    h_tr, h_held = _keys(ctx_tr, base), _keys(ctx_held, base)
    hw_tr = h_tr * base + train.target + 1
    hw_held = h_held * base + held.target + 1
    u_hw, c_hw = torch.unique(hw_tr, return_counts=True)
    u_h, c_h = torch.unique(h_tr, return_counts=True)
    return (_lookup(u_hw, c_hw, hw_held) + a * lower) / (_lookup(u_h, c_h, h_held) + a)


def bigram_nats(train: Targets, held: Targets, vocab: int, uni_logp: torch.Tensor, a: float) -> float:
    """Mean nats/token of ``held`` under the interpolated bigram."""
    return float(-interpolate(train, held, vocab, 2, a, uni_logp[held.target].exp()).log().mean())


def reference_lines(train: Targets, val: Targets, test: Targets, vocab: int) -> dict[str, Any]:
    """``uniform`` and the n-gram ladder (``unigram`` ... ``fourgram``) in nats/token on ``test``, each order's
    smoothing chosen on ``val`` (the lower orders fixed first)."""
    if min(len(train), len(val), len(test)) == 0:
        raise ValueError("every split needs env targets")
    uni_val = {k: float(-unigram_logp(train, vocab, k)[val.target].mean()) for k in UNIGRAM_K}
    k = min(uni_val, key=lambda x: (uni_val[x], x))
    uni = unigram_logp(train, vocab, k)
    p_val, p_test = uni[val.target].exp(), uni[test.target].exp()
    out: dict[str, Any] = {"uniform": math.log(vocab), "unigram": float(-p_test.log().mean())}
    smoothing: dict[str, Any] = {"split": "validation", "unigram_add_k": k}
    smoothing["unigram_validation_nats"] = {str(x): v for x, v in uni_val.items()}
    smoothing["unigram_validation_best"] = uni_val[k]
    for order, name in enumerate(ORDERS[1:], start=2):
        cand = {a: interpolate(train, val, vocab, order, a, p_val) for a in INTERPOLATION_A}
        nats = {a: float(-p.log().mean()) for a, p in cand.items()}
        a = min(nats, key=lambda x: (nats[x], x))
        p_val = cand[a]
        p_test = interpolate(train, test, vocab, order, a, p_test)
        out[name] = float(-p_test.log().mean())
        smoothing[f"{name}_interpolation_a"] = a
        smoothing[f"{name}_validation_nats"] = {str(x): v for x, v in nats.items()}
        smoothing[f"{name}_validation_best"] = nats[a]
    return {**out, "smoothing": smoothing, "train_env_tokens": len(train), "vocab": vocab}

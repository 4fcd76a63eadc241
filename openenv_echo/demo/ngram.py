"""Reference lines for held-out env CE: uniform, unigram and bigram models of the *training* env text.

All three score exactly the env-CE targets the model is scored on (same tokenizer, same target positions), so
their nats/token sit on the same axis as the arms'. Counts come from the env targets of the training episodes; the
bigram conditions on the token just before the target (whatever its role, as the model sees it). Smoothing is
chosen on the validation targets from a fixed grid and then applied once to test:

* unigram: add-k, ``p(w) = (c(w) + k) / (N + k V)``;
* bigram: interpolated with the unigram, ``p(w | v) = (c(v, w) + a p_uni(w)) / (c(v) + a)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

UNIGRAM_K = (0.001, 0.01, 0.1, 0.5, 1.0)
BIGRAM_A = (0.01, 0.1, 1.0, 3.0, 10.0, 30.0, 100.0)


@dataclass(frozen=True)
class Targets:
    """(previous token, target token) pairs of a split's env-CE targets."""

    prev: torch.Tensor  # (N,) long
    target: torch.Tensor  # (N,) long

    def __len__(self) -> int:
        return int(self.target.numel())


def targets_of(input_ids: list[torch.Tensor], selected: list[torch.Tensor]) -> Targets:
    """Pairs from per-sequence ids and a bool mask of target positions (a target at t has its context at t - 1)."""
    prev, tgt = [], []
    for ids, sel in zip(input_ids, selected, strict=True):
        pos = torch.nonzero(sel[: len(ids)]).flatten()
        if bool((pos < 1).any()):
            raise ValueError("a target at position 0 has no previous token")
        prev.append(ids[pos - 1])
        tgt.append(ids[pos])
    return Targets(torch.cat(prev).long(), torch.cat(tgt).long())


def unigram_logp(train: Targets, vocab: int, k: float) -> torch.Tensor:
    counts = torch.bincount(train.target, minlength=vocab).double()
    return torch.log((counts + k) / (counts.sum() + k * vocab))


def bigram_nats(train: Targets, held: Targets, vocab: int, uni_logp: torch.Tensor, a: float) -> float:
    """Mean nats/token of ``held`` under the interpolated bigram (sparse counts: keys v * V + w)."""
    keys = train.prev * vocab + train.target
    uniq, pair_counts = torch.unique(keys, return_counts=True)
    ctx_counts = torch.bincount(train.prev, minlength=vocab).double()
    held_keys = held.prev * vocab + held.target
    idx = torch.searchsorted(uniq, held_keys).clamp(max=max(len(uniq) - 1, 0))
    found = uniq[idx] == held_keys if len(uniq) else torch.zeros_like(held_keys, dtype=torch.bool)
    c_vw = torch.where(found, pair_counts[idx].double(), torch.zeros((), dtype=torch.float64))
    p = (c_vw + a * uni_logp[held.target].exp()) / (ctx_counts[held.prev] + a)
    return float(-p.log().mean())


def reference_lines(train: Targets, val: Targets, test: Targets, vocab: int) -> dict[str, Any]:
    """``uniform``, ``unigram`` and ``bigram`` nats/token on ``test``, smoothing chosen on ``val``."""
    if min(len(train), len(val), len(test)) == 0:
        raise ValueError("every split needs env targets")
    uni_val = {k: float(-unigram_logp(train, vocab, k)[val.target].mean()) for k in UNIGRAM_K}
    k = min(uni_val, key=lambda x: (uni_val[x], x))
    uni = unigram_logp(train, vocab, k)
    bi_val = {a: bigram_nats(train, val, vocab, uni, a) for a in BIGRAM_A}
    a = min(bi_val, key=lambda x: (bi_val[x], x))
    return {
        "uniform": math.log(vocab),
        "unigram": float(-uni[test.target].mean()),
        "bigram": bigram_nats(train, test, vocab, uni, a),
        "smoothing": {
            "split": "validation",
            "unigram_add_k": k,
            "unigram_validation_nats": {str(x): v for x, v in uni_val.items()},
            "bigram_interpolation_a": a,
            "bigram_validation_nats": {str(x): v for x, v in bi_val.items()},
        },
        "train_env_tokens": len(train),
        "vocab": vocab,
    }

"""Per-token log-probs in the shared target alignment, chunked so that they never multiply the logits' memory.

Three entry points, one scheme: blocks of rows are scored with ``log_softmax(x / T)`` in float32 (float64 for
float64 input) and only the target's value is kept; backward recomputes each block's softmax and writes
``(onehot - softmax) · g / T`` straight into the gradient, block by block (the anchors: TRL's row-wise
``selective_log_softmax`` and Liger-Kernel's fused linear cross-entropy).

* `target_logps`: logits ``(B, T, V)`` and targets ``(B, T)`` at the same positions (negative = ignored).
* `token_logps`: a causal LM's logits and its input ids (``logits[:, t]`` predicts ``ids[:, t + 1]``).
* `hidden_logps`: the same from the final hidden states and the LM head's weight; each block's logits are
  recomputed from the hidden states in forward and in backward, so the ``(B, T, V)`` logits never exist.

Memory (the logits' bytes = 1×): forward keeps nothing but its (B, T) result (autograd holds the input anyway);
backward allocates the input's gradient (1× for logits) plus a few blocks. A block holds at most ``chunk_bytes``
of compute-dtype logits (default `CHUNK_BYTES`, capped at 1/8 of the logits' bytes for logits and 1/32 for
hidden states), so the peak above the input stays under 1.5× (logits) or well under 1× (hidden states, gradients
of hidden and weight included) at every size. ``bench/bench_logps.py`` measures both against the plain
``gather(log_softmax(logits.float()))``. Values on CPU float64 are bit-identical to that plain formula.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

CHUNK_BYTES = 256 * 2**20
"""Upper bound of one block of compute-dtype logits (256 MiB: ~440 rows of a 151936-token vocabulary in float32):
large enough that a GPU runs few, large kernels. Smaller inputs get smaller blocks (see the module docstring)."""

IGNORE = -1
"""Any negative target is ignored: its log-prob is 0.0 and it gets no gradient."""


def _compute_dtype(*dtypes: torch.dtype) -> torch.dtype:
    out = torch.float32
    for d in dtypes:
        out = torch.promote_types(out, d)
    return out


def _rows_per_block(
    n_rows: int, vocab: int, compute: torch.dtype, logits_bytes: int, chunk_bytes: int | None, share: int
) -> int:
    """Rows per block: ``chunk_bytes`` of compute-dtype logits (default: CHUNK_BYTES, capped at
    ``logits_bytes / share``)."""
    if chunk_bytes is None:
        chunk_bytes = min(CHUNK_BYTES, logits_bytes // share)
    elif chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
    row_bytes = max(1, vocab) * compute.itemsize
    return max(1, min(n_rows, chunk_bytes // row_bytes))


def _flat(x: torch.Tensor) -> torch.Tensor | None:
    """``x`` (B, T, D) as a (B·T, D) view when its strides allow one, else None (no copy ever)."""
    b, t, d = x.shape
    if b <= 1 or x.stride(0) == t * x.stride(1):
        return x.as_strided((b * t, d), (x.stride(1), x.stride(2)))
    return None


def _blocks(x: torch.Tensor, rows: int) -> Iterator[tuple[int, int, torch.Tensor]]:
    """``(start, end, view)``: (n, D) views of ``x`` (B, T, D) covering its B·T rows in order, ``rows`` at a time."""
    b, t, _ = x.shape
    flat = _flat(x)
    if flat is not None:
        for s in range(0, b * t, rows):
            yield s, min(s + rows, b * t), flat[s : s + rows]
        return
    for i in range(b):
        for s in range(0, t, rows):
            yield i * t + s, i * t + min(s + rows, t), x[i, s : s + rows]


def _log_softmax(block: torch.Tensor, compute: torch.dtype, temperature: float) -> torch.Tensor:
    """``log_softmax(block / T)`` of a (n, V) block in the compute dtype (a new tensor; no copy of the block at
    T = 1: the kernel converts as it reads)."""
    if temperature != 1.0:
        return torch.log_softmax(block.to(compute) / temperature, dim=-1)
    return torch.log_softmax(block, dim=-1, dtype=compute)


def _logits_grad(
    block: torch.Tensor,
    compute: torch.dtype,
    temperature: float,
    tgt: torch.Tensor,
    coef: torch.Tensor,
    out: torch.Tensor,
) -> torch.Tensor:
    """Writes ``coef · (onehot(tgt) - softmax(block / T)) / T`` into ``out`` (n, V) (any floating dtype): the
    gradient of ``coef · log_softmax(block / T)[tgt]`` with respect to the block. The subtraction is done in the
    compute dtype, the one rounding to ``out``'s dtype at the end. ``coef`` is 0 on ignored rows."""
    if temperature != 1.0:
        p = torch.softmax(block.to(compute) / temperature, dim=-1)
        coef = coef / temperature
    else:
        p = torch.softmax(block, dim=-1, dtype=compute)
    p.scatter_add_(-1, tgt.unsqueeze(-1), p.new_full((p.shape[0], 1), -1.0))  # p - onehot
    return torch.mul(p, -coef.unsqueeze(-1), out=out)


class _LogitsLogps(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx, logits: torch.Tensor, targets: torch.Tensor, temperature: float, rows: int
    ) -> torch.Tensor:
        b, t, _ = logits.shape
        compute = _compute_dtype(logits.dtype)
        tgt = targets.reshape(-1)
        keep = tgt >= 0
        safe = tgt.clamp(min=0)
        out = torch.empty(b * t, dtype=compute, device=logits.device)
        for s, e, block in _blocks(logits, rows):
            out[s:e] = _log_softmax(block, compute, temperature).gather(-1, safe[s:e].unsqueeze(-1)).squeeze(-1)
        out.masked_fill_(~keep, 0.0)
        ctx.save_for_backward(logits, safe, keep)
        ctx.temperature = temperature  # type: ignore[attr-defined]
        ctx.rows = rows  # type: ignore[attr-defined]
        return out.view(b, t)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        logits, safe, keep = ctx.saved_tensors
        compute = _compute_dtype(logits.dtype)
        coef = grad_out.reshape(-1).to(compute) * keep
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        flat_grad = grad.view(-1, logits.shape[-1])
        for s, e, block in _blocks(logits, ctx.rows):
            _logits_grad(block, compute, ctx.temperature, safe[s:e], coef[s:e], out=flat_grad[s:e])
        return grad, None, None, None


class _HiddenLogps(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        temperature: float,
        rows: int,
    ) -> torch.Tensor:
        b, t, _ = hidden.shape
        compute = _compute_dtype(hidden.dtype, weight.dtype)
        tgt = targets.reshape(-1)
        keep = tgt >= 0
        safe = tgt.clamp(min=0)
        out = torch.empty(b * t, dtype=compute, device=hidden.device)
        for s, e, h in _blocks(hidden, rows):
            logits = h @ weight.T  # the LM head's own matmul, in the model's dtype
            out[s:e] = _log_softmax(logits, compute, temperature).gather(-1, safe[s:e].unsqueeze(-1)).squeeze(-1)
        out.masked_fill_(~keep, 0.0)
        ctx.save_for_backward(hidden, weight, safe, keep)
        ctx.temperature = temperature  # type: ignore[attr-defined]
        ctx.rows = rows  # type: ignore[attr-defined]
        return out.view(b, t)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None]:
        hidden, weight, safe, keep = ctx.saved_tensors
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (want_h or want_w):
            return None, None, None, None, None
        compute = _compute_dtype(hidden.dtype, weight.dtype)
        coef = grad_out.reshape(-1).to(compute) * keep
        grad_h = torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device) if want_h else None
        flat_h = grad_h.view(-1, hidden.shape[-1]) if grad_h is not None else None
        grad_w = torch.zeros_like(weight, memory_format=torch.contiguous_format) if want_w else None
        d_buf = torch.empty(ctx.rows, weight.shape[0], dtype=weight.dtype, device=weight.device)
        for s, e, h in _blocks(hidden, ctx.rows):
            d = _logits_grad(h @ weight.T, compute, ctx.temperature, safe[s:e], coef[s:e], out=d_buf[: e - s])
            if flat_h is not None:
                flat_h[s:e] = d @ weight
            if grad_w is not None:
                grad_w.addmm_(d.T, h)
        return grad_h, grad_w, None, None, None


def _check(what: str, x: torch.Tensor, ids: torch.Tensor, temperature: float) -> None:
    if x.dim() != 3 or x.shape[:2] != ids.shape:
        raise ValueError(f"{what} {tuple(x.shape)} do not match the ids/targets {tuple(ids.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{what} must be floating point, got {x.dtype}")
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"ids/targets must be integers, got {ids.dtype}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def _check_range(targets: torch.Tensor, vocab: int) -> None:
    if targets.numel() and int(targets.max()) >= vocab:
        raise ValueError(f"a target id is >= the vocabulary size {vocab}")


def _shifted(input_ids: torch.Tensor) -> torch.Tensor:
    """Targets aligned with the predicting positions: ``ids[:, t + 1]`` at t, ignored at the last position."""
    ignore = torch.full_like(input_ids[:, :1], IGNORE, dtype=torch.long)
    return torch.cat([input_ids[:, 1:].long(), ignore], dim=1)


def _unshift(lp: torch.Tensor) -> torch.Tensor:
    """From "log-prob of the next token at t" to the shared alignment ``logps[:, t] = log p(ids[t] | ids[:t])``."""
    if lp.shape[1] == 0:
        return lp
    return torch.cat([lp.new_zeros(lp.shape[0], 1), lp[:, :-1]], dim=1)


def target_logps(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, *, chunk_bytes: int | None = None
) -> torch.Tensor:
    """(B, T) ``log softmax(logits[:, t] / temperature)[targets[:, t]]``, chunked (see the module docstring).

    ``targets`` is aligned with ``logits`` (no shift); a negative target (e.g. -100) gives 0.0 and no gradient.
    The result is float32 (float64 for float64 logits) whatever the logits' dtype; ``logits`` may be any floating
    dtype and any strides (nothing is copied whole). ``chunk_bytes`` bounds one block of compute-dtype logits.
    """
    _check("logits", logits, targets, temperature)
    _check_range(targets, logits.shape[-1])
    rows = _rows_per_block(
        logits.shape[0] * logits.shape[1],
        logits.shape[-1],
        _compute_dtype(logits.dtype),
        logits.numel() * logits.element_size(),
        chunk_bytes,
        share=8,
    )
    out: torch.Tensor = _LogitsLogps.apply(  # type: ignore[no-untyped-call]
        logits, targets.long(), float(temperature), rows
    )
    return out


def token_logps(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0, *, chunk_bytes: int | None = None
) -> torch.Tensor:
    """(B, T) ``logps[:, t] = log p(ids[t] | ids[:t])`` from logits (B, T, V) of the same ids.

    ``logps[:, 0]`` has no predictor and is a 0.0 placeholder that no mask ever selects; a negative id (e.g. -100
    padding) gives 0.0 and no gradient. ``temperature`` divides the logits first (use the rollout temperature for
    the policy term, 1.0 for a T=1 world-model CE; pitfall P18). Float32-grade values from bf16/fp16 logits (each
    block is computed in float32); the forward + backward peak above the logits stays under 1.5× their bytes (the
    gradient itself is 1×): nothing is kept for backward, which recomputes each block's softmax. On CPU float64
    the values are bit-identical to ``gather(log_softmax(logits[:, :-1] / T), ids[:, 1:])``.
    """
    _check("logits", logits, input_ids, temperature)
    return _unshift(target_logps(logits, _shifted(input_ids), temperature, chunk_bytes=chunk_bytes))


def hidden_logps(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    input_ids: torch.Tensor,
    temperature: float = 1.0,
    *,
    chunk_bytes: int | None = None,
) -> torch.Tensor:
    """`token_logps` of ``hidden @ lm_head_weight.T`` without ever materialising those (B, T, V) logits.

    ``hidden`` (B, T, H) are the final hidden states (after the last norm) and ``lm_head_weight`` (V, H) the
    output embedding of a causal LM without head bias (an HF model: ``model.base_model(...).last_hidden_state``
    and ``model.get_output_embeddings().weight``). Blocks of rows are multiplied by the head in the model's dtype
    (as the LM head does), scored in float32 and dropped; backward recomputes each block's logits and gives
    gradients to ``hidden`` and to the weight (accumulated in the weight's dtype, block by block, as Liger-Kernel
    does). Peak memory: a few blocks of logits plus the gradients of ``hidden`` and of the weight.
    """
    _check("hidden", hidden, input_ids, temperature)
    if lm_head_weight.dim() != 2 or lm_head_weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"lm_head_weight {tuple(lm_head_weight.shape)} is not (V, {hidden.shape[-1]})")
    targets = _shifted(input_ids)
    vocab = lm_head_weight.shape[0]
    _check_range(targets, vocab)
    compute = _compute_dtype(hidden.dtype, lm_head_weight.dtype)
    n = hidden.shape[0] * hidden.shape[1]
    logits_bytes = n * vocab * torch.promote_types(hidden.dtype, lm_head_weight.dtype).itemsize
    rows = _rows_per_block(n, vocab, compute, logits_bytes, chunk_bytes, share=32)
    out: torch.Tensor = _HiddenLogps.apply(  # type: ignore[no-untyped-call]
        hidden, lm_head_weight, targets, float(temperature), rows
    )
    return _unshift(out)

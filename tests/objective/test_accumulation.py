"""Gradient accumulation and data parallelism give the full-batch gradient (pitfalls P6, P7).

A real (tiny) causal LM is trained through ``token_logps``; denominators are computed once over the whole optimizer
batch and handed to every micro-batch / rank. The data-parallel test runs two real gloo processes with DDP.
"""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from openenv_echo.objective import (
    Denominators,
    EchoBatch,
    EchoConfig,
    PolicyLossConfig,
    echo_loss,
    local_denominators,
    token_logps,
)

from .helpers import TinyLM, random_ids, sample_role_ids


def _batch() -> tuple[torch.Tensor, EchoBatch]:
    rid = sample_role_ids()
    ids = random_ids(rid)
    g = torch.Generator().manual_seed(7)
    adv = torch.randn(rid.shape[0], generator=g, dtype=torch.float64)
    old = torch.randn(rid.shape, generator=g, dtype=torch.float64) * 0.05 - 3.4
    return ids, EchoBatch(rid, advantages=adv, old_logps=old)


def _cfg(norm: str, pnorm: str) -> EchoConfig:
    return EchoConfig(
        world_model_coeff=0.2,
        world_loss_target="warning_plus_env",
        normalization=norm,
        sequence_denominator="full_observation" if norm == "sequence_mean" else "selected",
        constant_denominator=12,
        policy=PolicyLossConfig(normalization=pnorm, constant_denominator=12),
    )


def _grads(model: TinyLM) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def _full_batch_grads(cfg: EchoConfig) -> list[torch.Tensor]:
    ids, batch = _batch()
    model = TinyLM().double()
    echo_loss(token_logps(model(ids), ids), batch, cfg).loss.backward()
    return _grads(model)


@pytest.mark.parametrize(
    "norm, pnorm",
    list(itertools.product(["token_mean", "sequence_mean", "constant"], ["token_mean", "sequence_mean", "constant"])),
)
@pytest.mark.parametrize(
    "chunks", [[slice(0, 1), slice(1, 4)], [slice(0, 2), slice(2, 4)], [slice(i, i + 1) for i in range(4)]]
)
def test_gradient_accumulation_equals_full_batch(norm: str, pnorm: str, chunks: list[slice]) -> None:
    cfg = _cfg(norm, pnorm)
    full = _full_batch_grads(cfg)
    ids, batch = _batch()
    micro = [(ids[c], batch.rows(c)) for c in chunks]
    dens = Denominators.total(local_denominators(b, cfg) for _, b in micro)
    model = TinyLM().double()
    for mids, mb in micro:
        echo_loss(token_logps(model(mids), mids), mb, cfg, denominators=dens).loss.backward()
    for a, b in zip(full, _grads(model), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)


def test_local_denominators_would_be_wrong() -> None:
    # the control: normalizing each micro-batch by its own token count does not give the full-batch gradient
    cfg = _cfg("token_mean", "token_mean")
    full = _full_batch_grads(cfg)
    ids, batch = _batch()
    model = TinyLM().double()
    for c in (slice(0, 1), slice(1, 4)):
        out = echo_loss(token_logps(model(ids[c]), ids[c]), batch.rows(c), cfg)
        (out.loss / 2).backward()
    assert not all(torch.allclose(a, b, rtol=1e-6) for a, b in zip(full, _grads(model), strict=True))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DP_NORMS = ("token_mean", "sequence_mean", "constant")


def _dp_worker(rank: int, world: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        for norm in DP_NORMS:
            cfg = _cfg(norm, norm)
            ids, batch = _batch()
            # uneven shards: rank 0 gets 1 row, rank 1 gets 3 rows (different env token counts per rank)
            shard = slice(0, 1) if rank == 0 else slice(1, 4)
            ids, batch = ids[shard], batch.rows(shard)
            model = DDP(TinyLM().double())
            dens = local_denominators(batch, cfg).all_reduce().per_rank(world)
            echo_loss(token_logps(model(ids), ids), batch, cfg, denominators=dens).loss.backward()
            if rank == 0:
                torch.save(_grads(model.module), Path(out_dir) / f"grads_{norm}.pt")
            del model  # DDP's reducer holds gloo work: release it before the group goes
        dist.barrier()  # neither rank tears gloo down while the other still talks to it (else: SIGABRT)
    finally:
        dist.destroy_process_group()


def test_data_parallel_with_all_reduced_denominators_equals_single_process(tmp_path: Path) -> None:
    mp.spawn(_dp_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    for norm in DP_NORMS:
        dp = torch.load(tmp_path / f"grads_{norm}.pt")
        for a, b in zip(_full_batch_grads(_cfg(norm, norm)), dp, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)


def test_all_reduce_without_a_process_group_is_the_identity() -> None:
    _, batch = _batch()
    d = local_denominators(batch, _cfg("token_mean", "token_mean"))
    assert d.all_reduce() == d
    assert d.per_rank(2).world_tokens == d.world_tokens / 2
    with pytest.raises(ValueError):
        d.per_rank(0)
    with pytest.raises(ValueError):
        Denominators.total([])

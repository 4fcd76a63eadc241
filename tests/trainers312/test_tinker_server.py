"""λ acts on SkyRL's local Tinker-API server: the gradient it applies (its reported ``grad_norm``, learning rate 0 so
one adapter serves every λ) is ``g_policy + λ·g_world``, the RFC's proportion, with ``mean_per_datum`` datums; the
naive cross-entropy datums are what that server's per-datum mean makes λ-free. And the server dies with its
parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openenv_echo.roles import Role

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

from openenv_echo.adapters.tinker import EchoDatums, build_datums, echo_step  # noqa: E402
from openenv_echo.objective import EchoConfig  # noqa: E402
from openenv_echo.testing.tinker_server import LocalTinkerServer, tiny_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
C, A, E, W = Role.CONTEXT.code, Role.ACTION.code, Role.ENV_OUTPUT.code, Role.WARNING.code
ROLES = [
    [C] * 6 + [A] * 4 + [W] * 2 + [E] * 6 + [A] * 3,
    [C] * 6 + [A] * 2 + [E] * 9 + [A] * 4,
    [C] * 6 + [A] * 5 + [W] * 1 + [E] * 3,
]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any) -> Iterator[tuple[Any, str]]:
    """One server for the module: (its ServiceClient, the base model's name)."""
    model = tiny_checkpoint(tmp_path_factory.mktemp("tinker") / "model", qwen_tokenizer, seed=0)
    with LocalTinkerServer(model, startup_timeout_s=600) as server:
        yield tinker.ServiceClient(base_url=server.base_url, api_key="tml-local"), str(model)


@pytest.fixture(scope="module")
def training(service: tuple[Any, str]) -> Any:
    client, base_model = service
    return client.create_lora_training_client(base_model=base_model, rank=4, seed=0)


def _batch(seed: int = 0) -> tuple[list[list[int]], list[float], list[list[float]]]:
    g = np.random.default_rng(seed)
    ids = [g.integers(100, 4000, len(r)).tolist() for r in ROLES]
    sampled = [[-float(x) if r == A else 0.0 for x, r in zip(g.uniform(0.5, 3.0, len(rr)), rr)] for rr in ROLES]
    return ids, [1.0, -0.5, 0.25], sampled


def _grad_norm(training: Any, datums: EchoDatums, semantics: str) -> float:
    res = echo_step(training, datums, types.AdamParams(learning_rate=0.0), semantics=semantics)  # type: ignore[arg-type]
    return float(res["optim"].metrics["skyrl.ai/grad_norm"])


def _world_only(lam: float) -> EchoDatums:
    ids, _, _ = _batch()
    return build_datums(ids, ROLES, None, None, EchoConfig(world_model_coeff=lam), verifier_free=[True] * len(ids))


@pytest.mark.trainer
@pytest.mark.timeout(1200)  # the module's server start counts here: minutes on a loaded 2-core machine
def test_lambda_scales_the_gradient_the_server_applies(training: Any) -> None:
    world = {lam: _grad_norm(training, _world_only(lam), "mean_per_datum") for lam in (0.05, 1.0, 20.0)}
    for lam, norm in world.items():
        assert norm == pytest.approx(lam * world[1.0], rel=2e-3), world
    # the same datums as hosted Tinker takes them (cross_entropy, weights λ·w): this server divides λ away
    naive = {lam: _grad_norm(training, _world_only(lam), "sum") for lam in (0.05, 20.0)}
    assert naive[0.05] == pytest.approx(naive[20.0], rel=1e-4), naive

    # policy + world: |g_p + λ·g_w|² is a quadratic in λ; three measurements fix it, a fourth λ must sit on it
    ids, adv, sampled = _batch()

    def both(lam: float) -> float:
        datums = build_datums(ids, ROLES, adv, sampled, EchoConfig(world_model_coeff=lam))
        return _grad_norm(training, datums, "mean_per_datum")

    policy, combined = both(0.0), both(1.0)
    inner = (combined**2 - policy**2 - world[1.0] ** 2) / 2
    for lam in (0.05, 20.0):
        predicted = np.sqrt(policy**2 + 2 * lam * inner + lam**2 * world[1.0] ** 2)
        assert both(lam) == pytest.approx(predicted, rel=5e-3), (lam, policy, combined, world)


def _reference_world_loss(training: Any, unit: EchoDatums, lam: float) -> float:
    """λ·L_world computed here (RFC 0004's weights, float64) from the log-probs the server's model gives now."""
    out = training.forward(unit.env, "cross_entropy").result()
    total = 0.0
    for datum, o in zip(unit.env, out.loss_fn_outputs, strict=True):
        w = np.asarray(datum.loss_fn_inputs["weights"].to_numpy(), dtype=np.float64)
        total -= lam * float((w * np.asarray(o["logprobs"].tolist(), dtype=np.float64)).sum())
    return total


@pytest.mark.trainer
@pytest.mark.timeout(1200)
def test_the_servers_update_follows_the_local_reference_gradient(service: tuple[Any, str]) -> None:
    # One Adam step from a fresh adapter with eps ≫ |g|: the update is -lr·g/eps, so the reference loss (computed
    # here from the server's log-probs before and after) must drop by (lr/eps)·<g_ref, g> = (lr/eps)·|g|² when the
    # applied gradient g is the reference one. A λ-free gradient (the naive datums) misses it by a factor ≈ λ.
    client, base_model = service
    eps = 1e4
    unit = _world_only(1.0)
    for lam in (0.05, 20.0):
        lr = 4.0 / lam  # a drop of ≈ 1e-3 of the loss at both λ (g ∝ λ): first order, above float32 noise
        training = client.create_lora_training_client(base_model=base_model, rank=4, seed=0)
        before = _reference_world_loss(training, unit, lam)
        res = echo_step(
            training, _world_only(lam), types.AdamParams(learning_rate=lr, eps=eps), semantics="mean_per_datum"
        )
        g = float(res["optim"].metrics["skyrl.ai/grad_norm"])
        drop = before - _reference_world_loss(training, unit, lam)
        assert drop == pytest.approx(lr / eps * g**2, rel=0.05), (lam, drop, lr / eps * g**2)


PARENT = textwrap.dedent(
    """
    import sys, time
    from openenv_echo.testing.tinker_server import LocalTinkerServer
    server = LocalTinkerServer(sys.argv[1], startup_timeout_s=600)
    server.start()
    print(server._proc.pid, flush=True)
    time.sleep(900)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(name))
            except (FileNotFoundError, ValueError):
                continue
    return out


@pytest.mark.trainer
@pytest.mark.timeout(1200)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads processes from /proc")
def test_a_sigkilled_recipe_takes_the_server_and_its_engine_with_it(tmp_path: Path, qwen_tokenizer: Any) -> None:
    model = tiny_checkpoint(tmp_path / "model", qwen_tokenizer, seed=0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(model)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert parent.stdout is not None
        api = int(parent.stdout.readline())
        engines = _children(api)
        assert engines, "the API server has no engine process"
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and any(_alive(p) for p in [api, *engines]):
            time.sleep(0.2)
        assert not [p for p in [api, *engines] if _alive(p)], "the Tinker-API server outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()

"""ECHO through SkyRL's own code paths: the registered loss crosses SkyRL's registry actor into a Ray worker (local
Ray on CPU, both registration orders), λ and the role coefficients come from SkyRL's own CLI overrides, SkyRL's
name-keyed checks treat ``echo_<base>`` as ``<base>``."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

ray = pytest.importorskip("ray")
from skyrl.backends.skyrl_train.utils import ppo_utils  # noqa: E402
from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry, sync_registries  # noqa: E402

from openenv_echo.adapters.skyrl.entry import EchoSkyRLTrainConfig, validate_echo_cfg  # noqa: E402
from openenv_echo.adapters.skyrl.loss import (  # noqa: E402
    WORLD_LOSS_METRIC,
    EchoPolicyLoss,
    register_echo_policy_loss,
    world_weight_context,
)
from openenv_echo.roles import Role  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(2, 5, generator=g, dtype=torch.float64)
    adv = torch.randn(2, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0, 1], [0, 1, 1, 0, 0]], dtype=torch.float64)
    weights = torch.tensor([[0, 0, 0.2, 0.3, 0], [0, 0, 0, 0.5, 0]], dtype=torch.float64)
    return lp, adv, mask, weights


def _config() -> Any:
    from skyrl.train.config import AlgorithmConfig

    return AlgorithmConfig(policy_loss_type="echo_regular")


@ray.remote(num_cpus=0)
def _call_in_worker(name: str, lp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, w: torch.Tensor) -> Any:
    """In a Ray worker: the loss as SkyRL's worker gets it (``PolicyLossRegistry.get`` syncs from the registry actor),
    called inside the weight context that process's worker mixin would set."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry as Registry
    from skyrl.train.config import AlgorithmConfig

    from openenv_echo.adapters.skyrl.loss import world_weight_context as context

    fn = Registry.get(name)
    with context(w):
        loss, metrics = fn(lp, lp.detach(), adv, AlgorithmConfig(policy_loss_type=name), loss_mask=mask)
    return type(fn).__module__, type(fn).__qualname__, float(loss), metrics


@pytest.fixture
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=1, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        yield
    finally:
        ray.shutdown()
        PolicyLossRegistry._ray_actor = None


def _local_reference(lp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, w: torch.Tensor) -> float:
    with world_weight_context(w):
        loss, _ = PolicyLossRegistry.get("echo_regular")(lp, lp.detach(), adv, _config(), loss_mask=mask)
    return float(loss)


def test_the_loss_pickles_by_reference() -> None:
    register_echo_policy_loss("regular")
    fn = PolicyLossRegistry.get("echo_regular")
    assert isinstance(fn, EchoPolicyLoss)
    import cloudpickle

    blob = cloudpickle.dumps(fn)
    assert b"openenv_echo.adapters.skyrl.loss" in blob and b"EchoPolicyLoss" in blob  # a reference, not code
    assert isinstance(pickle.loads(blob), EchoPolicyLoss)


@pytest.mark.trainer
@pytest.mark.timeout(600)
@pytest.mark.parametrize("order", ["registered_before_ray", "registered_under_ray"])
def test_the_loss_survives_sync_registries_into_a_ray_worker(order: str, request: pytest.FixtureRequest) -> None:
    lp, adv, mask, w = _inputs()
    PolicyLossRegistry._functions.pop("echo_regular", None)
    if order == "registered_before_ray":
        register_echo_policy_loss("regular")
    request.getfixturevalue("local_ray")
    if order == "registered_under_ray":
        register_echo_policy_loss("regular")  # SkyRL cloudpickles it into its registry actor at once
    sync_registries()  # what initialize_ray runs right after ray.init
    module, qualname, loss, metrics = ray.get(_call_in_worker.remote("echo_regular", lp, adv, mask, w))
    assert (module, qualname) == ("openenv_echo.adapters.skyrl.loss", "EchoPolicyLoss")
    assert loss == pytest.approx(_local_reference(lp, adv, mask, w), rel=1e-12)
    assert metrics[WORLD_LOSS_METRIC] == pytest.approx(float(-(w * lp).sum()), rel=1e-12)  # the worker's weights
    from skyrl.train.config import AlgorithmConfig

    base, _ = PolicyLossRegistry.get("regular")(
        lp, lp.detach(), adv, AlgorithmConfig(policy_loss_type="regular"), loss_mask=mask
    )
    assert loss != pytest.approx(float(base))  # the world term was added over there


def test_lambda_and_role_coefficients_from_skyrl_cli_overrides() -> None:
    args = [
        "trainer.algorithm.policy_loss_type=echo_regular",
        "trainer.algorithm.world_model_coeff=0.05",
        "trainer.algorithm.world_loss_target=warning_plus_env",
        "trainer.algorithm.world_role_coeffs={env_output: 1.0, warning: 0.5}",
        "trainer.override_entrypoint=openenv_echo.adapters.skyrl.entry",
        "trainer.logger=console",
    ]
    cfg = EchoSkyRLTrainConfig.from_cli_overrides(args)
    echo = validate_echo_cfg(cfg)
    assert echo.world_model_coeff == 0.05 and echo.world_loss_target == "warning_plus_env"
    assert echo.role_coeffs == {Role.ENV_OUTPUT: 1.0, Role.WARNING: 0.5}
    assert cfg.trainer.algorithm.temperature is not None  # SkyRL's own post-init ran on the subclass
    negative = EchoSkyRLTrainConfig.from_cli_overrides([*args, "trainer.algorithm.world_model_coeff=-1"])
    with pytest.raises(ValueError, match="world_model_coeff"):
        validate_echo_cfg(negative)


def test_skyrl_name_keyed_checks_see_the_base_loss() -> None:
    register_echo_policy_loss("regular")
    register_echo_policy_loss("rollout_is")
    assert "echo_regular" in ppo_utils.LOSSES_WITH_OLD_LOGPROBS  # the fully-async trainer's assert reads it
    assert "echo_rollout_is" in ppo_utils.LOSSES_WITHOUT_OLD_LOGPROBS  # _skip_policy_forward reads it
    import skyrl.train.fully_async_trainer as fully_async
    import skyrl.train.trainer as trainer

    register_echo_policy_loss("regular")  # idempotent, and it reaches modules imported after the first call
    assert "echo_regular" in fully_async.LOSSES_WITH_OLD_LOGPROBS
    assert "echo_rollout_is" in trainer.LOSSES_WITHOUT_OLD_LOGPROBS
    cfg = EchoSkyRLTrainConfig.from_cli_overrides(
        ["trainer.algorithm.policy_loss_type=echo_clip_cov", "trainer.logger=console"]
    )
    validate_echo_cfg(copy.deepcopy(cfg))
    cfg.trainer.algorithm.off_policy_correction.tis_ratio_type = "token"
    with pytest.raises(NotImplementedError, match="clip_cov"):  # SkyRL refuses clip_cov there; echo_clip_cov too
        validate_echo_cfg(cfg)

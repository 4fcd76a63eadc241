"""ECHO's rollout filters on SkyRL's one seam: ``EchoPPOTrainer.convert_to_training_input`` decides the world-term
keep mask once per optimizer batch (the core ``env_keep_mask``, groups from SkyRL's ``uids``, rewards from the
generator output) and ``world_weights`` applies it as ``EchoBatch.env_keep``: a dropped row gets world weight 0 and
the normalizer counts the kept rows only. Settings SkyRL's output cannot feed are refused at config time. Real SkyRL
objects: its config parser, its ``RayPPOTrainer.convert_to_training_input`` (tensors, mini-batch boundaries, dp
padding)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from openenv_echo.roles import Role

pytest.importorskip("skyrl")
from openenv_echo.adapters.skyrl import ROLE_KEY
from openenv_echo.adapters.skyrl.config import EchoSkyRLTrainConfig, config_from_skyrl, echo_config
from openenv_echo.adapters.skyrl.loss import WORLD_WEIGHT_KEY
from openenv_echo.adapters.skyrl.trainer import EchoPPOTrainer

A, E, W = Role.ACTION.code, Role.ENV_OUTPUT.code, Role.WARNING.code
LAM = 0.05
ROLES = [[A, A, E, E, E, A], [A, W, E, A], [A, E, A], [A, A, E, E, A]]
UIDS = ["p0", "p0", "p1", "p1"]


class _Dispatch:
    """The one call ``convert_to_training_input`` makes on the worker dispatch: the data-parallel size to pad to."""

    def get_lcm_dp_size(self) -> int:
        return 3  # 4 rows -> 2 padding rows (SkyRL copies row 0 into them)


def _convert(overrides: list[str], rewards: list[float], qwen_tokenizer: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """SkyRL's training batch of the four ``ROLES`` responses (one policy mini-batch, per-token rewards as SkyRL's
    ``postprocess_generator_output`` leaves them): its world weights and the trainer's metrics."""
    cfg = EchoSkyRLTrainConfig.from_cli_overrides(
        [
            "trainer.algorithm.policy_loss_type=echo_regular",
            f"trainer.algorithm.world_model_coeff={LAM}",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "generator.n_samples_per_prompt=2",
            *overrides,
        ]
    )
    trainer = EchoPPOTrainer.__new__(EchoPPOTrainer)  # SkyRL's conversion needs only these of the trainer's state
    trainer.cfg, trainer.tokenizer, trainer.global_step, trainer.all_metrics = cfg, qwen_tokenizer, 0, {}
    trainer.dispatch = _Dispatch()
    out = {
        "prompt_token_ids": [[1, 2, 3], [1, 2, 3], [4, 5], [4, 5]],
        "response_ids": [[10 + j for j in range(len(r))] for r in ROLES],
        "rewards": [[0.0] * (len(r) - 1) + [x] for r, x in zip(ROLES, rewards, strict=True)],
        "loss_masks": [[int(x == A) for x in r] for r in ROLES],
        "rollout_logprobs": None,
        ROLE_KEY: ROLES,
    }
    batch = trainer.convert_to_training_input(out, UIDS)
    assert batch.metadata["policy_mini_batch_boundaries"] == [(0, 4)]
    return batch[WORLD_WEIGHT_KEY], trainer.all_metrics


def _row_weights(weights: torch.Tensor, i: int) -> torch.Tensor:
    """Row i's world weights on its env tokens (right-aligned responses)."""
    row = weights[i, weights.shape[1] - len(ROLES[i]) :]
    return row[torch.tensor(ROLES[i]) == E]


def _assert_kept(weights: torch.Tensor, kept: list[int], reduction: str) -> None:
    """Dropped rows carry nothing; kept rows carry the core's weights: ``token_mean`` λ/N_sel with N_sel the kept
    rows' env tokens (re-normalized), ``sequence_mean`` λ/(n_i·N_seq) with N_seq every real row (RFC 0004 §2: a
    dropped rollout adds 0 to the mean over the batch's rollouts, as SkyRL's own sequence mean)."""
    assert weights[[i for i in range(weights.shape[0]) if i not in kept]].eq(0).all()  # dropped + dp padding rows
    n_env = sum(ROLES[i].count(E) for i in kept)
    for i in kept:
        expected = LAM / n_env if reduction == "token_mean" else LAM / (ROLES[i].count(E) * len(ROLES))
        got = _row_weights(weights, i)
        torch.testing.assert_close(got, torch.full_like(got, expected), rtol=1e-6, atol=0)
    total = LAM if reduction == "token_mean" else LAM * len(kept) / len(ROLES)
    assert float(weights.sum()) == pytest.approx(total, rel=1e-5)


@pytest.mark.parametrize("reduction", ["token_mean", "sequence_mean"])
def test_a_filtered_row_gets_no_world_weight_and_the_kept_rows_are_renormalized(
    qwen_tokenizer: Any, reduction: str
) -> None:
    # θ = 1: keep only correct rollouts (reward > 0); row 1 is p0's incorrect one
    overrides = ["trainer.algorithm.wm_filter_min_correct_pct=1.0", f"trainer.algorithm.loss_reduction={reduction}"]
    weights, metrics = _convert(overrides, [1.0, 0.0, 1.0, 0.5], qwen_tokenizer)
    _assert_kept(weights, [0, 2, 3], reduction)
    assert metrics["echo/filter/dropped_correct"] == 1.0 and metrics["echo/filter/kept"] == 3.0
    # without the filter the same batch trains every row
    unfiltered, metrics = _convert(
        [f"trainer.algorithm.loss_reduction={reduction}"], [1.0, 0.0, 1.0, 0.5], qwen_tokenizer
    )
    _assert_kept(unfiltered, [0, 1, 2, 3], reduction)
    assert not any(k.startswith("echo/filter/") for k in metrics)


def test_zero_variance_groups_lose_their_world_term_when_asked(qwen_tokenizer: Any) -> None:
    rewards = [1.0, 1.0, 1.0, 0.0]  # p0: all equal (zero advantage), p1: not
    weights, metrics = _convert(["trainer.algorithm.keep_zero_variance_env=false"], rewards, qwen_tokenizer)
    _assert_kept(weights, [2, 3], "token_mean")
    assert metrics["echo/filter/dropped_zero_variance"] == 2.0 and metrics["echo/filter/kept"] == 2.0
    kept, _ = _convert([], rewards, qwen_tokenizer)  # the default keeps them (the world term needs no advantage)
    _assert_kept(kept, [0, 1, 2, 3], "token_mean")


@pytest.mark.parametrize("key", ["wm_filter_min_valid_tool_call_pct", "wm_filter_min_parse_clean_pct"])
def test_filters_skyrls_output_cannot_feed_are_refused(qwen_tokenizer: Any, key: str) -> None:
    cfg = EchoSkyRLTrainConfig.from_cli_overrides([f"trainer.algorithm.{key}=0.5"])
    with pytest.raises(ValueError, match=f"{key}=0.5 is not supported on SkyRL"):
        echo_config(cfg.trainer.algorithm)
    with pytest.raises(ValueError, match="not supported on SkyRL"):
        config_from_skyrl({key: 0.5})
    with pytest.raises(ValueError, match="not supported on SkyRL"):  # the trainer never runs it unfiltered
        _convert([f"trainer.algorithm.{key}=0.5"], [1.0, 0.0, 1.0, 0.0], qwen_tokenizer)

"""TRL adapter: real ``GRPOTrainer`` steps on a tiny Qwen2 built from a config, with rollouts from the project's
echo environment tokenized token-in-token-out (OpenEnv-style ``rollout_func`` runs, ``self.tools`` empty)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import trl
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from openenv_echo.adapters.trl import (
    ROLE_KEY,
    EchoGRPOTrainer,
    rollout_output,
    split_at_first_action,
)
from openenv_echo.objective import EchoBatch, EchoConfig, echo_loss, token_logps
from openenv_echo.roles import Role
from openenv_echo.testing.recipes import tiny_causal_lm

from .trl_rollouts import EchoRollouts, env_reward

PROMPT = [{"role": "user", "content": "Talk to the echo server."}]
TRL_MAJOR = int(trl.__version__.split(".")[0])
LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo"] + (["vespo"] if TRL_MAJOR >= 1 else [])


class GradCapture(TrainerCallback):
    """Keeps the gradients of the first optimizer step (before the update; grad clipping off in these tests)."""

    def __init__(self) -> None:
        self.model: torch.nn.Module | None = None
        self.grads: dict[str, torch.Tensor] | None = None

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.grads is None and self.model is not None:
            self.grads = {n: p.grad.detach().clone() for n, p in self.model.named_parameters() if p.grad is not None}


def _args(tmp_path: Any, loss_type: str = "dapo", gas: int = 1, steps: int = 1, **kw: Any) -> GRPOConfig:
    return GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4 // gas,
        gradient_accumulation_steps=gas,
        num_generations=4,
        max_completion_length=kw.pop("max_completion_length", 128),
        max_steps=steps,
        learning_rate=kw.pop("learning_rate", 1e-3),
        loss_type=loss_type,
        importance_sampling_level="sequence" if loss_type == "luspo" else "token",
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        bf16=False,
        max_grad_norm=0.0,
        seed=0,
        dataloader_num_workers=0,
        **kw,
    )


def _run(
    tmp_path: Any,
    tokenizer: Any,
    echo: EchoConfig | None,
    loss_type: str = "dapo",
    gas: int = 1,
    steps: int = 1,
    rollouts: EchoRollouts | None = None,
    **kw: Any,
) -> tuple[Any, GradCapture, EchoRollouts]:
    rollouts = rollouts or EchoRollouts(tokenizer)
    cb = GradCapture()
    common = {
        "model": tiny_causal_lm(tokenizer),
        "reward_funcs": [env_reward],
        "args": _args(tmp_path, loss_type, gas, steps, **kw),
        "train_dataset": Dataset.from_list([{"prompt": PROMPT}] * 32),
        "processing_class": tokenizer,
        "rollout_func": rollouts,
        "callbacks": [cb],
    }
    trainer = GRPOTrainer(**common) if echo is None else EchoGRPOTrainer(echo_config=echo, **common)
    cb.model = trainer.model
    trainer.train()
    return trainer, cb, rollouts


def _reference_env_grads(
    tokenizer: Any, history: dict[str, Any], lam: float, temperature: float = 1.0
) -> dict[str, torch.Tensor]:
    """λ · token-mean CE over the env bodies of the generation batch, computed directly on the init model."""
    model = tiny_causal_lm(tokenizer)
    rows = []
    for p, c, r in zip(history["prompt_ids"], history["completion_ids"], history["roles"], strict=True):
        ids = torch.tensor([p + c])
        roles = torch.tensor([[Role.CONTEXT.code] * len(p) + r])
        rows.append((ids, roles))
    total = sum(int((roles == Role.ENV_OUTPUT.code).sum()) for _, roles in rows)
    cfg = EchoConfig(world_model_coeff=lam)
    from openenv_echo.objective import Denominators

    dens = Denominators(0.0, 0.0, float(total), float(len(rows)))
    for ids, roles in rows:
        lp = token_logps(model(input_ids=ids).logits, ids, temperature=temperature)
        echo_loss(lp, EchoBatch(roles), cfg, denominators=dens, policy_loss=torch.zeros(())).world_loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


# -- pure helpers (no trainer) ------------------------------------------------------------------------------------
def test_split_at_first_action_and_rollout_output() -> None:
    ids = [5, 6, 7, 8, 9, 10, 11]
    roles = [0, 0, 1, 0, 2, 1, 0]
    p, c, r = split_at_first_action(ids, roles)
    assert (p, c, r) == ([5, 6], [7, 8, 9, 10], [1, 0, 2, 1])
    assert split_at_first_action(ids, roles, trim_trailing_context=False)[1] == [7, 8, 9, 10, 11]
    out = rollout_output([p], [c], [r], [[-0.5, 0.0, 0.0, -0.1]], env_keep=[True], obs_count=[3], tag=["x"])
    assert out["env_mask"] == [[1, 0, 0, 1]]
    assert out[ROLE_KEY] == [[1, 0, 2, 1]]
    assert out["tag"] == ["x"]
    assert rollout_output([p], [c], [["action", "context", Role.ENV_OUTPUT, 1]])[ROLE_KEY] == [[1, 0, 2, 1]]
    with pytest.raises(ValueError, match="no action"):
        split_at_first_action([1, 2], [0, 2])
    with pytest.raises(ValueError, match="non-empty prompt"):
        split_at_first_action([1, 2], [1, 2])
    with pytest.raises(ValueError, match="roles"):
        rollout_output([p], [c], [[1, 0]])
    with pytest.raises(ValueError, match="one entry per completion"):
        rollout_output([p, p], [c], [r])
    with pytest.raises(ValueError, match="unknown role code"):
        rollout_output([p], [c], [[1, 0, 9, 1]])
    with pytest.raises(ValueError, match="logprobs"):
        rollout_output([p], [c], [r], [[0.0]])


def test_rollout_func_output_reaches_trl_whole_and_obs_count_follows_the_rfc_rule() -> None:
    # RFC 0004 §1.2: |O_i| counts observation bodies after the first action; the adapter used to count every
    # observation token of a completion it cut (here 3 + 2 = 5, not 2) and to cut what TRL keeps
    from types import SimpleNamespace

    from openenv_echo.adapters.trl import OBS_COUNT_KEY
    from openenv_echo.roles import observation_count

    roles = [[2, 2, 3, 1, 1, 2, 3, 1]]  # env, env, warning before the first action
    out = {"completion_ids": [list(range(8))], ROLE_KEY: [list(r) for r in roles], "env_mask": [[0] * 8]}
    fake = SimpleNamespace(max_completion_length=4, mask_truncated_completions=False)
    EchoGRPOTrainer._echo_limit_lengths(fake, out)  # type: ignore[arg-type]
    assert out["completion_ids"] == [list(range(8))] and out[ROLE_KEY] == roles  # nothing cut
    assert OBS_COUNT_KEY not in out  # |O_i| is left to the objective's one definition
    assert int(observation_count(torch.tensor(roles))[0]) == 2  # what the objective counts for this row


# -- real trainer runs ----------------------------------------------------------------------------------------------
@pytest.mark.trainer
@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
@pytest.mark.parametrize("gas", [1, 2])
def test_coeff_zero_is_bit_identical_to_plain_grpo(
    tmp_path: Any, qwen_tokenizer: Any, loss_type: str, gas: int
) -> None:
    plain_trainer, plain, _ = _run(tmp_path, qwen_tokenizer, None, loss_type, gas, steps=2)
    zero_trainer, zero, _ = _run(tmp_path, qwen_tokenizer, EchoConfig(world_model_coeff=0.0), loss_type, gas, steps=2)
    assert plain.grads and set(plain.grads) == set(zero.grads)
    for name in plain.grads:
        assert torch.equal(plain.grads[name], zero.grads[name]), name
    for (n1, p1), (n2, p2) in zip(
        plain_trainer.model.named_parameters(), zero_trainer.model.named_parameters(), strict=True
    ):
        assert n1 == n2 and torch.equal(p1, p2), n1
    losses = [[h["loss"] for h in t.state.log_history if "loss" in h] for t in (plain_trainer, zero_trainer)]
    assert losses[0] == losses[1] and len(losses[0]) == 2
    assert "echo/env_ce_per_token" in zero_trainer.state.log_history[0]  # the env CE is still reported at λ = 0


@pytest.mark.trainer
def test_coeff_zero_is_bit_identical_to_plain_grpo_with_completions_over_the_limit(
    tmp_path: Any, qwen_tokenizer: Any
) -> None:
    # rollout_func completions longer than max_completion_length: TRL keeps them whole, and so must the adapter
    plain_trainer, plain, rollouts = _run(tmp_path, qwen_tokenizer, None, max_completion_length=12)
    assert max(len(c) for c in rollouts.history[0]["completion_ids"]) > 12  # the case under test happened
    zero_trainer, zero, _ = _run(tmp_path, qwen_tokenizer, EchoConfig(world_model_coeff=0.0), max_completion_length=12)
    assert plain.grads and set(plain.grads) == set(zero.grads)
    for name in plain.grads:
        assert torch.equal(plain.grads[name], zero.grads[name]), name
    losses = [[h["loss"] for h in t.state.log_history if "loss" in h] for t in (plain_trainer, zero_trainer)]
    assert losses[0] == losses[1]


@pytest.mark.trainer
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("gas", [1, 2])
def test_env_gradient_is_exact_for_every_loss_type_and_accumulation(
    tmp_path: Any, qwen_tokenizer: Any, loss_type: str, gas: int
) -> None:
    _, plain, _ = _run(tmp_path, qwen_tokenizer, None, loss_type, gas)
    lam = 0.5
    trainer, echo, rollouts = _run(tmp_path, qwen_tokenizer, EchoConfig(world_model_coeff=lam), loss_type, gas)
    assert plain.grads and echo.grads
    # the extra gradient is exactly λ·token-mean CE over the generation batch, whatever TRL's loss type and GA
    ref = _reference_env_grads(qwen_tokenizer, rollouts.history[0], lam)
    for name, g in ref.items():
        torch.testing.assert_close(echo.grads[name] - plain.grads[name], g, rtol=2e-4, atol=2e-7)
    logged = trainer.state.log_history[0]
    assert logged["echo/world_model_coeff"] == pytest.approx(lam)
    assert logged["echo/tokens/env_output"] > 0 and logged["echo/env_ce_per_token"] > 0
    assert logged["echo/tokens/warning"] > 0 and "echo/ce_per_token/warning" not in logged  # not selected: absent
    assert logged["echo/ce_per_token/env_output"] == pytest.approx(logged["echo/env_ce_per_token"])
    assert "echo/policy_loss" in logged and "echo/world_policy_loss_ratio" not in logged
    assert logged["echo/loss"] == pytest.approx(logged["echo/policy_loss"] + logged["echo/world_loss"], rel=1e-4)
    assert logged["echo/length/policy_tokens"] > 0 and logged["echo/length/turns"] >= 1


@pytest.mark.trainer
@pytest.mark.parametrize("env_temperature", ["one", "rollout"])
def test_env_temperature(tmp_path: Any, qwen_tokenizer: Any, env_temperature: str) -> None:
    # sampling temperature 0.7: TRL's log-probs are of logits/0.7; the env CE is at T=1 unless asked otherwise (P18)
    _, plain, _ = _run(tmp_path, qwen_tokenizer, None, temperature=0.7)
    lam = 0.5
    echo_trainer, echo, rollouts = _run(
        tmp_path, qwen_tokenizer, EchoConfig(world_model_coeff=lam, env_temperature=env_temperature), temperature=0.7
    )
    ref = _reference_env_grads(
        qwen_tokenizer, rollouts.history[0], lam, temperature=1.0 if env_temperature == "one" else 0.7
    )
    for name, g in ref.items():
        torch.testing.assert_close(echo.grads[name] - plain.grads[name], g, rtol=2e-4, atol=2e-7)
    # at λ = 0 the logged env CE follows the same temperature rule (same model, same rollouts, first step)
    zero_trainer, _, _ = _run(
        tmp_path, qwen_tokenizer, EchoConfig(world_model_coeff=0.0, env_temperature=env_temperature), temperature=0.7
    )
    ce = [t.state.log_history[0]["echo/env_ce_per_token"] for t in (echo_trainer, zero_trainer)]
    assert ce[0] == pytest.approx(ce[1], rel=1e-5)


@pytest.mark.trainer
@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_env_ce_falls_with_coeff(tmp_path: Any, qwen_tokenizer: Any, loss_type: str) -> None:
    trainer, _, _ = _run(
        tmp_path, qwen_tokenizer, EchoConfig(world_model_coeff=1.0), loss_type, steps=8, learning_rate=3e-3
    )
    ce = [h["echo/env_ce_per_token"] for h in trainer.state.log_history if "echo/env_ce_per_token" in h]
    assert len(ce) == 8
    assert ce[-1] < ce[0] - 0.5, ce


@pytest.mark.trainer
def test_env_mask_without_roles_is_refused_unless_target_all(tmp_path: Any, qwen_tokenizer: Any) -> None:
    rollouts = EchoRollouts(qwen_tokenizer, with_roles=False)
    with pytest.raises(ValueError, match="no per-token roles"):
        _run(tmp_path, qwen_tokenizer, EchoConfig(world_model_coeff=0.5), rollouts=rollouts)
    # target "full_observation": every non-model token (TRL's 1 - tool_mask) is a CE target
    trainer, _, _ = _run(
        tmp_path,
        qwen_tokenizer,
        EchoConfig(world_model_coeff=0.5, world_loss_target="full_observation"),
        rollouts=EchoRollouts(qwen_tokenizer, with_roles=False),
    )
    assert trainer.state.log_history[0]["echo/tokens/selected"] > trainer.state.log_history[0]["echo/tokens/env_output"]


@pytest.mark.trainer
def test_env_mask_leaking_observations_into_the_policy_is_refused(tmp_path: Any, qwen_tokenizer: Any) -> None:
    class Leaky(EchoRollouts):
        def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
            out = super().__call__(prompts, trainer)
            out["env_mask"] = [[1] * len(m) for m in out["env_mask"]]  # the classic bug: observations in the RL mask
            return out

    with pytest.raises(ValueError, match="non-action tokens as policy tokens"):
        _run(tmp_path, qwen_tokenizer, EchoConfig(world_model_coeff=0.5), rollouts=Leaky(qwen_tokenizer))


class Truncating(EchoRollouts):
    """Cuts the completions at even indices (``every=2``) or all of them (``every=1``) before their final EOS."""

    def __init__(self, tokenizer: Any, every: int) -> None:
        super().__init__(tokenizer)
        self.every = every
        self.kept_env_tokens = 0

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        out = super().__call__(prompts, trainer)
        for key in ("completion_ids", "env_mask", ROLE_KEY):
            out[key] = [row[:-1] if i % self.every == 0 else row for i, row in enumerate(out[key])]
        self.kept_env_tokens = sum(
            r == Role.ENV_OUTPUT.code for i, row in enumerate(out[ROLE_KEY]) if i % self.every for r in row
        )
        return out


@pytest.mark.trainer
def test_truncated_rows_carry_no_env_term(tmp_path: Any, qwen_tokenizer: Any) -> None:
    rollouts = Truncating(qwen_tokenizer, every=2)
    trainer, _, _ = _run(
        tmp_path, qwen_tokenizer, EchoConfig(world_model_coeff=0.5), rollouts=rollouts, mask_truncated_completions=True
    )
    logged = trainer.state.log_history[0]
    assert 0 < rollouts.kept_env_tokens == logged["echo/tokens/selected"]


@pytest.mark.trainer
def test_a_batch_that_truncation_masking_would_zero_is_refused(tmp_path: Any, qwen_tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="would zero every completion"):
        _run(
            tmp_path,
            qwen_tokenizer,
            EchoConfig(world_model_coeff=0.5),
            rollouts=Truncating(qwen_tokenizer, every=1),
            mask_truncated_completions=True,
        )


def test_liger_is_refused(tmp_path: Any, qwen_tokenizer: Any) -> None:
    args = _args(tmp_path)
    args.use_liger_kernel = True
    with pytest.raises(ValueError, match="liger"):
        EchoGRPOTrainer(
            model=tiny_causal_lm(qwen_tokenizer),
            reward_funcs=[env_reward],
            args=args,
            train_dataset=Dataset.from_list([{"prompt": PROMPT}] * 4),
            processing_class=qwen_tokenizer,
            rollout_func=EchoRollouts(qwen_tokenizer),
            echo_config=EchoConfig(world_model_coeff=0.1),
        )


# -- TRL's own tool loop (tools=...): only the sampler is scripted, TRL builds tool_mask ------------------------------
def echo_tool(message: str) -> str:
    """Echo a message back.

    Args:
        message: The text to echo.
    """
    return "[echo] " + message


@pytest.mark.trainer
def test_tool_loop_roles_are_body_only(tmp_path: Any, qwen_tokenizer: Any) -> None:
    import transformers

    if TRL_MAJOR < 1 and tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (5, 13):
        pytest.skip("TRL 0.29's own tool loop parses responses with the schema API transformers >= 5.13 dropped")
    from trl.chat_template_utils import qwen3_chat_template

    tok = copy.deepcopy(qwen_tokenizer)
    tok.add_special_tokens({"additional_special_tokens": ["<tool_call>", "</tool_call>"]})
    tok.chat_template = qwen3_chat_template  # TRL recognises it and installs its response parser
    call = '<tool_call>\n{"name": "echo_tool", "arguments": {"message": "hello world"}}\n</tool_call><|im_end|>'
    response_id = tok.convert_tokens_to_ids("<tool_response>")

    class ScriptedSampler(EchoGRPOTrainer):
        """A random tiny model never emits a tool call: script the sampler, keep TRL's tool loop."""

        def _generate_single_turn(self, prompt_ids: list, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
            texts = ["done<|im_end|>" if response_id in p else call for p in prompt_ids]
            ids = [tok.encode(t, add_special_tokens=False) for t in texts]
            return (ids, None) if TRL_MAJOR >= 1 else (ids, None, {})  # 0.29 also returns extra fields

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            self.captured = out
            return out

    trainer = ScriptedSampler(
        model=tiny_causal_lm(tok),
        reward_funcs=[lambda completions, **_: [float(i) for i in range(len(completions))]],
        args=_args(tmp_path),
        train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}]}] * 8),
        processing_class=tok,
        tools=[echo_tool],
        echo_config=EchoConfig(world_model_coeff=0.5),
    )
    trainer.train()
    out = trainer.captured
    assert "tool_mask" in out and not out["tool_mask"].all()  # TRL's tool loop ran
    specials = set(tok.all_special_ids) | {response_id, tok.convert_tokens_to_ids("</tool_response>")}
    for ids, roles, tool_mask in zip(out["completion_ids"].tolist(), out[ROLE_KEY].tolist(), out["tool_mask"].tolist()):
        env = [t for t, r in zip(ids, roles) if r == Role.ENV_OUTPUT.code]
        assert tok.decode(env) == "[echo] hello world"
        assert not specials & set(env)  # P11: no scaffold/special token in the env target
        scaffold = [t for t, r, m in zip(ids, roles, tool_mask) if m == 0 and r == Role.CONTEXT.code]
        assert "<tool_response>" in tok.decode(scaffold) and "<|im_start|>" in tok.decode(scaffold)
        assert all(r == Role.ACTION.code for r, m in zip(roles, tool_mask) if m == 1 and r != -1)
    logged = trainer.state.log_history[0]
    assert logged["tools/call_frequency"] == 1.0
    assert logged["echo/tokens/selected"] == logged["echo/tokens/env_output"] > 0


@pytest.mark.trainer
def test_rollout_filters_and_zero_variance_rule(tmp_path: Any, qwen_tokenizer: Any) -> None:
    class Graded(EchoRollouts):
        def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
            out = super().__call__(prompts, trainer)
            out["echo_correct"] = [i % 4 == 0 for i in range(len(prompts))]  # one correct rollout per group of 4
            return out

    cfg = EchoConfig(world_model_coeff=0.5, filters={"min_correct_share": 1.0})
    trainer, _, _ = _run(tmp_path, qwen_tokenizer, cfg, rollouts=Graded(qwen_tokenizer))
    logged = trainer.state.log_history[0]
    assert logged["echo/rollouts/env_kept"] == 1 and logged["echo/filter/kept"] == 1
    assert logged["echo/filter/dropped_correct"] == 3 and logged["echo/filter/empty_groups"] == 0

    class Flat(EchoRollouts):
        def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
            out = super().__call__(prompts, trainer)
            out["env_reward"] = [1.0] * len(prompts)  # identical rewards: a zero-variance group
            return out

    kept, _, _ = _run(tmp_path, qwen_tokenizer, EchoConfig(world_model_coeff=0.5), rollouts=Flat(qwen_tokenizer))
    assert kept.state.log_history[0]["echo/rollouts/env_kept"] == 4  # default: the env term stays (P14)
    assert kept.state.log_history[0]["echo/world_loss"] > 0
    with pytest.warns(UserWarning, match="selects 0 tokens"):  # P26: never train nothing silently
        dropped, _, _ = _run(
            tmp_path,
            qwen_tokenizer,
            EchoConfig(world_model_coeff=0.5, keep_zero_variance_env=False),
            rollouts=Flat(qwen_tokenizer),
        )
    assert dropped.state.log_history[0]["echo/rollouts/env_kept"] == 0


@pytest.mark.trainer
@pytest.mark.parametrize("per_rollout", [False, True])
def test_verifier_free_is_the_pure_env_ce(tmp_path: Any, qwen_tokenizer: Any, per_rollout: bool) -> None:
    class NoVerifier(EchoRollouts):
        def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
            out = super().__call__(prompts, trainer)
            out["echo_verifier_free"] = [True] * len(prompts)
            return out

    lam = 0.5
    if per_rollout:  # every rollout flagged: TRL's policy mask is emptied, only the env term trains
        cfg, rollouts = EchoConfig(world_model_coeff=lam), NoVerifier(qwen_tokenizer)
    else:
        cfg, rollouts = EchoConfig(world_model_coeff=lam, verifier_free=True), EchoRollouts(qwen_tokenizer)
    _, echo, rollouts = _run(tmp_path, qwen_tokenizer, cfg, rollouts=rollouts)
    ref = _reference_env_grads(qwen_tokenizer, rollouts.history[0], lam)
    for name, g in ref.items():
        torch.testing.assert_close(echo.grads[name], g, rtol=2e-4, atol=2e-7)

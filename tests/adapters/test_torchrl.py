"""torchrl adapter: ``EchoGRPOLoss`` through torchrl's own ``GRPOLoss`` with a ``TransformersWrapper`` over a tiny
Qwen2, conversations as torchrl ``History`` rendered with torchrl's template, ragged and left-padded."""

from __future__ import annotations

from typing import Any

import pytest
import tensordict
import torch
from tensordict import TensorDict, lazy_stack
from tensordict.tensorclass import MetaData
from torchrl.data.llm import History
from torchrl.modules.llm import TransformersWrapper
from torchrl.modules.llm.policies.common import ChatHistory, Masks
from torchrl.objectives.llm.grpo import GRPOLoss

from openenv_echo.adapters.torchrl import (
    ROLE_IDS_KEY,
    EchoGRPOLoss,
    global_denominators,
    history_role_ids,
)
from openenv_echo.objective import Denominators, EchoBatch, EchoConfig, echo_loss, token_logps
from openenv_echo.roles import Role
from openenv_echo.testing.recipes import tiny_causal_lm

ROLES = ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
CONVERSATIONS = [
    ["You are a shell.", "list files", "ls", "a.txt b.txt", "cat a.txt", "hello", "done"],
    [
        "You are a shell, be brief.",
        "show me the notes",
        "cat notes.txt",
        "hello there, general kenobi",
        "wc -l notes.txt",
        "1 notes.txt",
        "ok",
    ],
    [
        "Be helpful.",
        "what is in the log?",
        "tail log",
        "ERROR disk full\nWARN retry",
        "df -h",
        "/dev/sda1 100%",
        "disk is full",
    ],
]


@pytest.fixture(autouse=True)
def _list_to_stack():
    with tensordict.set_list_to_stack(True):
        yield


def _sample(tok: Any, contents: list[str], seed: int) -> TensorDict:
    full = History(role=ROLES, content=contents, batch_size=(len(ROLES),)).unsqueeze(0)
    hist = ChatHistory(prompt=full[:, :2], response=full[:, 2:], full=full, batch_size=(1,))
    toks = hist.to_tokens(tok)
    t = toks.get("full", as_padded_tensor=True).shape[-1]
    g = torch.Generator().manual_seed(seed)
    td = TensorDict(
        {
            "advantage": torch.randn(1, t, 1, generator=g),
            "history": hist,
            "tokens": toks,
            "masks": Masks(
                all_attention_mask=torch.ones(1, t, dtype=torch.bool),
                all_assistant_mask=None,
                padded=MetaData(False),
                batch_size=(1,),
            ),
            "log_probs": torch.zeros_like(toks, dtype=torch.float32),
            ROLE_IDS_KEY: history_role_ids(full, tok),
        },
        batch_size=(1,),
    )
    return td[0]


def _batch(tok: Any, rows: list[int] | None = None) -> TensorDict:
    rows = rows if rows is not None else list(range(len(CONVERSATIONS)))
    return lazy_stack([_sample(tok, CONVERSATIONS[i], i) for i in rows])


def _loss_sum(out: Any) -> torch.Tensor:
    total = None
    for k, v in out.items():
        if isinstance(k, str) and k.startswith("loss_") and v is not None:
            total = v if total is None else total + v
    return total


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _run(tok: Any, loss_cls: type, td: TensorDict, strategy: str, **kw: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    model = tiny_causal_lm(tok)
    wrapper = TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True, input_mode="history")
    loss = loss_cls(wrapper, masking_strategy=strategy, **kw)
    out = loss(td)
    _loss_sum(out).backward()
    return out, _grads(model)


def _reference_world_grads(tok: Any, lam: float, temperature: float = 1.0) -> dict[str, torch.Tensor]:
    """λ · token-mean CE over the tool-message bodies, on the init model, straight from HF logits."""
    td = _batch(tok)
    model = tiny_causal_lm(tok)
    ids = td.get(("tokens", "full"), as_padded_tensor=True, padding_side="right", padding_value=0)
    roles = td.get(ROLE_IDS_KEY, as_padded_tensor=True, padding_side="right", padding_value=-1)
    n = int((roles == Role.ENV_OUTPUT.code).sum())
    for i in range(ids.shape[0]):
        keep = roles[i] != -1
        row_ids, row_roles = ids[i][keep][None], roles[i][keep][None]
        lp = token_logps(model(input_ids=row_ids).logits, row_ids, temperature=temperature)
        dens = Denominators(0.0, 0.0, float(n), float(ids.shape[0]))
        cfg = EchoConfig(world_model_coeff=lam)
        zero = torch.zeros(())
        echo_loss(lp, EchoBatch(row_roles), cfg, denominators=dens, policy_loss=zero).world_loss.backward()
    return _grads(model)


@pytest.mark.trainer
@pytest.mark.parametrize("strategy", ["sft", "rlhf", "generic"])
def test_coeff_zero_is_bit_identical_to_grpo_loss(qwen_tokenizer: Any, strategy: str) -> None:
    plain, g_plain = _run(qwen_tokenizer, GRPOLoss, _batch(qwen_tokenizer), strategy)
    echo, g_echo = _run(qwen_tokenizer, EchoGRPOLoss, _batch(qwen_tokenizer), strategy, echo_config=EchoConfig())
    assert echo.loss_world_model is None
    assert echo.world_model_ce.item() > 0 and echo.world_model_tokens.item() > 0  # still reported
    assert torch.equal(_loss_sum(plain), _loss_sum(echo))
    assert g_plain and set(g_plain) == set(g_echo)  # the same parameters got gradients
    for name in g_plain:
        assert torch.equal(g_plain[name], g_echo[name]), name


@pytest.mark.trainer
@pytest.mark.parametrize("strategy", ["sft", "rlhf", "generic"])
def test_env_gradient_is_lambda_times_token_mean_ce(qwen_tokenizer: Any, strategy: str) -> None:
    lam = 0.3
    _, g_plain = _run(qwen_tokenizer, GRPOLoss, _batch(qwen_tokenizer), strategy)
    out, g_echo = _run(
        qwen_tokenizer, EchoGRPOLoss, _batch(qwen_tokenizer), strategy, echo_config=EchoConfig(world_model_coeff=lam)
    )
    ref = _reference_world_grads(qwen_tokenizer, lam)
    for name, g in ref.items():
        torch.testing.assert_close(g_echo[name] - g_plain[name], g, rtol=1e-4, atol=1e-7)
    expected_tokens = sum(len(qwen_tokenizer.encode(c[k])) for c in CONVERSATIONS for k in (3, 5))
    assert out.world_model_tokens.item() == expected_tokens
    assert out.loss_world_model.item() == pytest.approx(lam * out.world_model_ce.item(), rel=1e-5)


@pytest.mark.trainer
def test_micro_batches_with_global_denominators_equal_the_full_batch(qwen_tokenizer: Any) -> None:
    cfg = EchoConfig(world_model_coeff=1.0)

    def world_grads(parts: list[list[int]]) -> dict[str, torch.Tensor]:
        model = tiny_causal_lm(qwen_tokenizer)
        wrapper = TransformersWrapper(
            model, tokenizer=qwen_tokenizer, generate=False, pad_output=True, input_mode="history"
        )
        loss = EchoGRPOLoss(wrapper, echo_config=cfg)
        tds = [_batch(qwen_tokenizer, p) for p in parts]
        loss.echo_denominators = global_denominators(tds, loss)
        for td in tds:
            loss(td).loss_world_model.backward()  # the env term only
        return _grads(model)

    full = world_grads([[0, 1, 2]])
    split = world_grads([[0], [1, 2]])
    assert full and set(full) == set(split)
    for name in full:
        torch.testing.assert_close(full[name], split[name], rtol=1e-5, atol=1e-8)


@pytest.mark.trainer
def test_env_ce_falls_when_training(qwen_tokenizer: Any) -> None:
    model = tiny_causal_lm(qwen_tokenizer)
    wrapper = TransformersWrapper(
        model, tokenizer=qwen_tokenizer, generate=False, pad_output=True, input_mode="history"
    )
    loss = EchoGRPOLoss(wrapper, echo_config=EchoConfig(world_model_coeff=1.0))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    td = _batch(qwen_tokenizer)
    ce = []
    for step in range(8):
        loss.echo_step = step
        out = loss(td)
        ce.append(out.world_model_ce.item())
        opt.zero_grad()
        _loss_sum(out).backward()
        opt.step()
    assert ce[-1] < ce[0] - 1.0, ce


@pytest.mark.trainer
def test_rollout_temperature_scales_only_the_env_logits(qwen_tokenizer: Any) -> None:
    lam = 0.3
    _, g_plain = _run(qwen_tokenizer, GRPOLoss, _batch(qwen_tokenizer), "sft")
    cfg = EchoConfig(world_model_coeff=lam, env_temperature="rollout")
    _, g_echo = _run(
        qwen_tokenizer, EchoGRPOLoss, _batch(qwen_tokenizer), "sft", echo_config=cfg, sampling_temperature=0.5
    )
    ref = _reference_world_grads(qwen_tokenizer, lam, temperature=0.5)
    for name, g in ref.items():
        torch.testing.assert_close(g_echo[name] - g_plain[name], g, rtol=1e-4, atol=1e-7)


@pytest.mark.trainer
def test_verifier_free_is_the_pure_env_ce(qwen_tokenizer: Any) -> None:
    lam = 0.3
    out, g = _run(
        qwen_tokenizer,
        EchoGRPOLoss,
        _batch(qwen_tokenizer),
        "sft",
        echo_config=EchoConfig(world_model_coeff=lam, verifier_free=True),
    )
    assert out.loss_objective.item() == 0.0
    ref = _reference_world_grads(qwen_tokenizer, lam)
    for name, r in ref.items():
        torch.testing.assert_close(g[name], r, rtol=1e-4, atol=1e-7)


def test_history_role_ids_are_body_only(qwen_tokenizer: Any) -> None:
    td = _batch(qwen_tokenizer)
    ids = td.get(("tokens", "full"), as_padded_tensor=True, padding_side="left", padding_value=-100)
    roles = td.get(ROLE_IDS_KEY, as_padded_tensor=True, padding_side="left", padding_value=-1)
    assert ids.shape == roles.shape and ((ids == -100) == (roles == -1)).all()  # same left padding
    for b, conv in enumerate(CONVERSATIONS):
        env = [int(t) for t, r in zip(ids[b], roles[b], strict=True) if r == Role.ENV_OUTPUT.code]
        assert qwen_tokenizer.decode(env) == conv[3] + conv[5]
        assert not set(env) & set(qwen_tokenizer.all_special_ids)
        act = [int(t) for t, r in zip(ids[b], roles[b], strict=True) if r == Role.ACTION.code]
        assert qwen_tokenizer.decode(act) == conv[2] + conv[4] + conv[6]


def test_errors(qwen_tokenizer: Any) -> None:
    from openenv_echo.tokenization.chat_templates import QWEN3_TEMPLATE

    full = History(role=ROLES, content=CONVERSATIONS[0], batch_size=(len(ROLES),)).unsqueeze(0)
    with pytest.raises(ValueError, match="prefix-stable"):
        history_role_ids(full, qwen_tokenizer, chat_template=QWEN3_TEMPLATE)
    model = tiny_causal_lm(qwen_tokenizer)
    wrapper = TransformersWrapper(
        model, tokenizer=qwen_tokenizer, generate=False, pad_output=True, input_mode="history"
    )
    td = _batch(qwen_tokenizer)
    no_roles = td.exclude(ROLE_IDS_KEY)
    with pytest.raises(KeyError, match="no role ids"):
        EchoGRPOLoss(wrapper, echo_config=EchoConfig(world_model_coeff=0.1))(no_roles)
    EchoGRPOLoss(wrapper, echo_config=EchoConfig())(no_roles)  # λ = 0 needs no roles
    bad = _batch(qwen_tokenizer)
    bad.set(ROLE_IDS_KEY, torch.zeros(3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="align"):
        EchoGRPOLoss(wrapper, echo_config=EchoConfig(world_model_coeff=0.1))(bad)
    with pytest.raises(ValueError, match="sampling_temperature"):
        EchoGRPOLoss(wrapper, sampling_temperature=0.0)

"""``EchoEnv`` through verifiers' own machinery (env, agent, interception server, ``TrainClient``, the Qwen3
renderer, the trace graph) against live servers on loopback: a role-tagged openenv-echo server and a plain OpenEnv
one, a tiny real model behind the generate stand-in, a real BPE tokenizer. Checks that each observation keeps its
role segments as separate content, that every token of the trace gets the role of the characters it covers, and
that prime-rl's ``ce`` stream lands on exactly the selected observation tokens."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import verifiers.v1 as vf
from verifiers.v1.tasksets.openenv.taskset import parse_action

from openenv_echo.adapters.prime_rl import CE_STREAM, keep_world_targets, recorded_roles, training_samples
from openenv_echo.client import EnvClient, PlainTextRule
from openenv_echo.roles import Role

from .conftest import run_episodes
from .plain_server import plain_openenv_app

A, C, E, W = Role.ACTION.code, Role.CONTEXT.code, Role.ENV_OUTPUT.code, Role.WARNING.code
LAMBDA = 0.05


def _runs(codes: list[int]) -> list[tuple[int, int, int]]:
    """``(code, start, end)`` of each maximal run of equal codes."""
    out: list[tuple[int, int, int]] = []
    for i, c in enumerate(codes):
        if out and out[-1][0] == c:
            out[-1] = (c, out[-1][1], i + 1)
        else:
            out.append((c, i, i + 1))
    return out


def _server_segments(url: str, trace: Any, rule: PlainTextRule) -> list[list[tuple[Role, str]]]:
    """The episode replayed with our own client: the segments the server sends after reset and after each of the
    trace's replies (the observations the env had to forward), non-empty ones only."""
    replies = [n.message.content.strip() for n in trace.nodes if n.sampled]
    out = []
    with EnvClient(url, segment_rule=rule) as env:
        schema = env.schema()["action"]
        result = env.reset(**trace.task.data.reset)
        out.append([(s.role, s.text) for s in result.segments if s.text])
        for reply in replies:
            if result.done:
                break
            result = env.step(parse_action(reply, schema))
            out.append([(s.role, s.text) for s in result.segments if s.text])
    return out


def _check_trace(trace: Any, url: str, tok: Any, model: Any, lam: dict[int, float], rule: PlainTextRule) -> int:
    """What every live run must satisfy; returns the number of ce tokens."""
    assert trace.ok and len(trace.branches) == 1  # the renderer bridged every turn: one token-in-token-out sample
    sent = _server_segments(url, trace, rule)
    roles = recorded_roles(trace)
    obs_nodes = [i for i, n in enumerate(trace.nodes) if isinstance(n.message, vf.UserMessage)]
    assert sorted(roles) == obs_nodes and len(obs_nodes) <= len(sent)
    first_sampled = next(i for i, n in enumerate(trace.nodes) if n.sampled)
    for idx, segments in zip(obs_nodes, sent):
        node, codes = trace.nodes[idx], roles[idx]
        assert [p.text for p in node.message.content] == [t for _, t in segments]  # one part per segment, in order
        assert len(codes) == len(node.token_ids)
        merged: list[tuple[Role, str]] = []  # adjacent segments of one role read as one run
        for role, text in segments:
            if merged and merged[-1][0] == role:
                merged[-1] = (role, merged[-1][1] + text)
            else:
                merged.append((role, text))
        for code, s, e in _runs(codes):  # every run of one role decodes to text of that role's segments
            if code != C:
                text = tok.decode(node.token_ids[s:e])
                assert any(text in t for r, t in merged if r.code == code), (Role.from_code(code), text, segments)
        for role, text in segments:  # and every segment's characters (but a straddled edge) carry its role
            if role != Role.CONTEXT and len(text) > 8:
                assert any(c == role.code for c in codes)
        stream = (node.loss_weights or {}).get(CE_STREAM)
        if idx < first_sampled:  # the reset observation is the prompt: never a target
            assert stream is None
        else:
            assert (stream or [0.0] * len(codes)) == pytest.approx([lam.get(c, 0.0) for c in codes])
    [sample] = training_samples(trace)
    n = len(sample["token_ids"])
    assert len(sample["mask"]) == len(sample["logprobs"]) == len(sample["role_ids"]) == n
    assert [r == A for r in sample["role_ids"]] == sample["mask"]
    ce = sample["ce_weights"] or [0.0] * n
    assert len(ce) == n and not any(w and m for w, m in zip(ce, sample["mask"]))
    after_first = [t >= sample["mask"].index(True) for t in range(n)]
    assert keep_world_targets(trace) == [[r == E and a for r, a in zip(sample["role_ids"], after_first)]]
    if lam:  # the selection is reported at every λ; at λ > 0 it is exactly the ce stream's support
        assert trace.metrics["echo/selected_tokens"] == sum(1 for w in ce if w)
    # token-in-token-out: the trainer's log-probs of the sampled tokens are the sampler's (importance ratio 1)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([sample["token_ids"]])).logits[0].float()
    ids = torch.tensor(sample["token_ids"])
    lp = torch.log_softmax(logits[:-1], -1).gather(-1, ids[1:].unsqueeze(-1)).squeeze(-1)
    pos = [t for t, m in enumerate(sample["mask"]) if m]
    assert pos and pos[0] > 0
    assert torch.allclose(lp[[t - 1 for t in pos]], torch.tensor([sample["logprobs"][t] for t in pos]), atol=1e-4)
    return sum(1 for w in ce if w)


@pytest.mark.trainer
def test_terminal_env_segments_roles_and_ce_stream(terminal_url: str, engine: Any, renderer_tokenizer: Any) -> None:
    path, tok = renderer_tokenizer
    url, model = engine
    resets = [{"seed": 3, "max_steps": 3}, {"seed": 4, "max_steps": 3}]
    traces = run_episodes(terminal_url, url, path, resets=resets, repeats=2, world_model_coeff=LAMBDA)
    assert len(traces) == 4
    selected = [_check_trace(tr, terminal_url, tok, model, {E: LAMBDA}, PlainTextRule()) for tr in traces]
    assert sum(selected) > 0
    codes = [c for tr in traces for r in recorded_roles(tr).values() for c in r]
    assert W in codes and E in codes  # the terminal env tags echoed commands and harness notes as warnings
    for tr in traces:
        assert tr.metrics["echo/unplaced_nodes"] == 0 and tr.rewards["openenv_reward"].score == 0.0
        print(f"trace {tr.task.data.name}: {tr.num_turns} turns, {tr.metrics}")


@pytest.mark.trainer
def test_per_role_coefficients_and_zero_coefficient(terminal_url: str, engine: Any, renderer_tokenizer: Any) -> None:
    path, tok = renderer_tokenizer
    url, model = engine
    both = run_episodes(
        terminal_url,
        url,
        path,
        resets=[{"seed": 5, "max_steps": 2}],
        repeats=2,
        world_model_coeff=LAMBDA,
        world_loss_target="warning_plus_env",
        role_coeffs={Role.WARNING: 0.5},
    )
    for tr in both:
        _check_trace(tr, terminal_url, tok, model, {E: LAMBDA, W: 0.5 * LAMBDA}, PlainTextRule())
    off = run_episodes(terminal_url, url, path, resets=[{"seed": 5, "max_steps": 2}], world_model_coeff=0.0)
    for tr in off:  # λ = 0: no stream at all (vanilla RL), the roles are still recorded for prime-rl's echo filter
        _check_trace(tr, terminal_url, tok, model, {}, PlainTextRule())
        assert all(n.loss_weights is None for n in tr.nodes)
        assert training_samples(tr)[0]["ce_weights"] is None and any(keep_world_targets(tr)[0])


@pytest.mark.trainer
@pytest.mark.parametrize("role", [Role.ENV_OUTPUT, Role.WARNING])
def test_plain_openenv_server_through_plain_text_rule(
    running_server: Any, engine: Any, renderer_tokenizer: Any, role: Role
) -> None:
    """A server that sends no segments: PlainTextRule makes each observation one segment of the configured role."""
    path, tok = renderer_tokenizer
    url, model = engine
    plain = running_server(plain_openenv_app())
    traces = run_episodes(plain, url, path, resets=[{}], repeats=2, world_model_coeff=LAMBDA, plain_text_role=role)
    rule = PlainTextRule(role=role)
    for tr in traces:
        _check_trace(tr, plain, tok, model, {E: LAMBDA} if role == Role.ENV_OUTPUT else {}, rule)
        assert {c for r in recorded_roles(tr).values() for c in r} <= {C, role.code}
        replies = [n.message.content.strip() for n in tr.nodes if n.sampled]
        assert tr.rewards["openenv_reward"].score == sum(float(len(r) % 3) for r in replies[:2])


@pytest.mark.trainer
def test_an_unparseable_action_ends_the_episode_not_the_run(
    running_server: Any, engine: Any, renderer_tokenizer: Any
) -> None:
    path, _ = renderer_tokenizer
    url, _ = engine
    strict = running_server(plain_openenv_app(required=("message", "lang")))
    [tr] = run_episodes(strict, url, path, resets=[{}], world_model_coeff=LAMBDA)
    assert tr.ok and tr.stop_condition == "refused_action" and tr.metrics["echo/refused_action"] == 1.0
    assert "ValueError" in tr.info["openenv_echo"]["end"] and tr.num_turns == 1

"""Concurrent env rollouts (``openenv_echo.adapters.rollouts``): one world per GRPO group, length limits and the
end-of-completion rule, against a real terminal-env server with a tiny real model and the offline tokenizer."""

from __future__ import annotations

from typing import Any

import pytest

from openenv_echo.adapters.rollouts import (
    HFSampler,
    check_groups,
    end_completion,
    group_reset_options,
    reset_options_of,
    run_rollouts,
)
from openenv_echo.roles import Role
from openenv_echo.testing.recipes import SYSTEM_PROMPT, command_action, tiny_causal_lm

A, C, E, W = Role.ACTION.code, Role.CONTEXT.code, Role.ENV_OUTPUT.code, Role.WARNING.code
EOS = 99


@pytest.fixture(scope="module")
def policy(qwen_tokenizer: Any) -> HFSampler:
    return HFSampler(tiny_causal_lm(qwen_tokenizer, seed=0), qwen_tokenizer)


@pytest.fixture(scope="module")
def terminal_url() -> Any:
    from openenv_echo.providers import LocalProcessProvider

    with LocalProcessProvider("terminal", max_sessions=16, idle_timeout_s=None, log_level="warning") as env:
        yield env.base_url


def _run(url: str, tok: Any, sampler: Any, worlds: list[dict[str, Any]], group: int, **kw: Any) -> list[Any]:
    opts = group_reset_options(worlds, group)
    kw = {"max_turns": 2, "max_completion_length": 512, "max_new_tokens": 8, **kw}
    return run_rollouts(
        url,
        tok,
        sampler,
        opts,
        [[{"role": "system", "content": SYSTEM_PROMPT}]] * len(opts),
        to_action=command_action,
        **kw,
    )


def test_group_members_share_a_world_and_groups_differ(terminal_url: str, qwen_tokenizer: Any, policy: Any) -> None:
    url = terminal_url
    rollouts = _run(url, qwen_tokenizer, policy, [{"seed": 3, "max_steps": 2}, {"seed": 4, "max_steps": 2}], 4)
    assert len(rollouts) == 8
    worlds = [r.reset_text for r in rollouts]
    assert len(set(worlds[:4])) == 1 and len(set(worlds[4:])) == 1  # same world inside a group
    assert worlds[0] != worlds[4]  # another seed, another machine
    assert [r.reset_options["seed"] for r in rollouts] == [3] * 4 + [4] * 4
    # the sampler was stochastic: members of a group acted differently in the same world
    assert len({tuple(r.completion_ids) for r in rollouts[:4]}) > 1


def test_completions_follow_the_roles_limits_and_end_rule(terminal_url: str, qwen_tokenizer: Any, policy: Any) -> None:
    url = terminal_url
    eos = {qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")}
    full = _run(url, qwen_tokenizer, policy, [{"seed": 1, "max_steps": 2}], 4)
    assert len(full) == 4  # one rollout per group member, none dropped
    for r in full:
        assert len(r.completion_ids) == len(r.role_ids) == len(r.logprobs) <= 512
        assert r.role_ids[0] == A and r.end == "done" and r.turns == 2
        assert not r.truncated and r.completion_ids[-1] in eos  # ended on the last observation turn's close
        assert E in r.role_ids and W in r.role_ids
        assert r.obs_count == sum(x in (E, W) for x in r.role_ids)
        assert all(lp < 0 for lp, x in zip(r.logprobs, r.role_ids, strict=True) if x == A)  # real sampler log-probs
        assert all(lp == 0 for lp, x in zip(r.logprobs, r.role_ids, strict=True) if x != A)
        assert [m["role"] for m in r.conversation] == ["system", "tool", "assistant", "tool", "assistant", "tool"]
    short = _run(url, qwen_tokenizer, policy, [{"seed": 1, "max_steps": 2}], 2, max_completion_length=40)
    assert len(short) == 2
    for r in short:
        assert len(r.completion_ids) <= 40 and r.truncated and r.end == "length"
        assert r.completion_ids[-1] not in eos
        assert r.obs_count >= sum(x in (E, W) for x in r.role_ids)


def test_end_completion_rule() -> None:
    # ends on an action that emitted EOS: terminated, trailing scaffold dropped
    assert end_completion([1, 2, EOS, 5], [A, A, A, C], [EOS]) == ([1, 2, EOS], [A, A, A], True)
    # the model was cut off inside its action: not terminated (the closing scaffold is not the model's)
    assert end_completion([1, 2, EOS, 5], [A, A, C, C], [EOS]) == ([1, 2], [A, A], False)
    # ends on an observation: keep that turn's closing end-of-turn token
    ids, roles, done = end_completion([1, EOS, 7, 8, EOS, 5, 6], [A, A, C, E, C, C, C], [EOS])
    assert (ids, roles, done) == ([1, EOS, 7, 8, EOS], [A, A, C, E, C], True)
    assert end_completion([5], [C], [EOS]) == ([], [], False)


def test_group_options_checks() -> None:
    assert group_reset_options([{"seed": 1}, '{"seed": 2}'], 2) == [{"seed": 1}] * 2 + [{"seed": 2}] * 2
    check_groups([{"seed": 1}, '{"seed": 1}', None, None], 2)
    with pytest.raises(ValueError, match="mixes worlds"):
        check_groups([{"seed": 1}, {"seed": 2}], 2)
    with pytest.raises(ValueError, match="groups of 3"):
        check_groups([{}] * 4, 3)
    with pytest.raises(TypeError):
        reset_options_of([1, 2])
    with pytest.raises(ValueError):
        group_reset_options([{}], 0)


def test_a_refused_step_ends_only_that_episode(terminal_url: str, qwen_tokenizer: Any, policy: Any) -> None:
    url = terminal_url
    calls = []

    def to_action(text: str) -> dict[str, Any]:
        calls.append(text)
        return {"command": text} if len(calls) % 2 else {"not_a_field": 1}  # every other action is invalid

    opts = group_reset_options([{"seed": 2, "max_steps": 2}], 2)
    rs = run_rollouts(
        url,
        qwen_tokenizer,
        policy,
        opts,
        [[{"role": "system", "content": "x"}]] * 2,
        to_action=to_action,
        max_turns=2,
        max_completion_length=256,
        max_new_tokens=6,
    )
    assert sorted(r.end.split(":")[0] for r in rs) == ["done", "error"]
    bad = next(r for r in rs if r.end.startswith("error"))
    assert "ActionValidationError" in bad.end and bad.role_ids[-1] == A


def test_the_sessions_keepalive_runs_while_the_sampler_works(
    terminal_url: str, qwen_tokenizer: Any, policy: Any
) -> None:
    """A sampler is synchronous (a local model, a Tinker future's ``result()``); run on the event loop it would stall
    every session's keepalive, and a server closes a connection whose pong is 40 s late (its ping interval and
    timeout): under heavy load a slow sampling phase then cost every episode its session. The event loop must keep
    running while the sampler works."""
    import asyncio
    import time

    from openenv_echo.adapters.rollouts import run_rollouts_async

    ticks: list[int] = []

    def slow_sampler(prompts: Any, max_new_tokens: int) -> Any:
        before = len(ticks)
        time.sleep(0.5)  # stands for a long sampling phase
        assert len(ticks) > before, "the event loop stood still while the sampler worked"
        return policy(prompts, max_new_tokens)

    async def main() -> list[Any]:
        async def tick() -> None:
            while True:
                ticks.append(1)
                await asyncio.sleep(0.02)

        ticker = asyncio.create_task(tick())
        try:
            opts = group_reset_options([{"seed": 3, "max_steps": 2}], 2)
            return await run_rollouts_async(
                terminal_url, qwen_tokenizer, slow_sampler, opts,
                [[{"role": "system", "content": SYSTEM_PROMPT}]] * len(opts),
                to_action=command_action, max_turns=2, max_completion_length=256, max_new_tokens=8,
            )  # fmt: skip
        finally:
            ticker.cancel()

    rollouts = asyncio.run(main())
    assert all(not r.end.startswith("error") for r in rollouts), [r.end for r in rollouts]
    assert all(r.turns == 2 or r.end == "done" for r in rollouts)

"""Step-wise mode (issue #15 item 4): templates that rewrite history (Qwen3-style dropped reasoning) or trim
bodies get one training sequence per assistant turn, each as the template renders it at that step; the probe
reports the mode and why; ``auto`` picks it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from openenv_echo.roles import Role
from openenv_echo.tokenization import (
    StepwiseBuilder,
    fragment_codec,
    template_mode,
    tokenize_sequences,
    tokenize_stepwise,
)
from openenv_echo.tokenization.chat_templates import CHATML_TEMPLATE
from openenv_echo.trajectory import ChatMessage, ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import context, env_output, warning

TRIM_TEMPLATE = CHATML_TEMPLATE.replace("message.content", "(message.content | trim)")
ACTIONS = ["<think>\nfirst look\n</think>\n\nls -la", "<think>\nread it\n</think>\n\ncat a.cfg", "echo done"]
OBS = [[warning("$ ls -la\n"), env_output("a.cfg  b.txt")], [env_output("key=value")], [env_output("done")]]


def _traj(tok: Any, sampled: bool = True) -> Trajectory:
    codec = fragment_codec(tok)
    eot = codec.encode_scaffold("<|im_end|>")
    return Trajectory(
        episode_id="ep",
        messages=[ChatMessage(role="system", content="You are a shell agent.")],
        reset=ObservationRecord(segments=[context("Task:\n"), env_output("find the config")]),
        steps=[
            StepRecord(
                action={},
                action_text=a,
                action_token_ids=codec.encode_action(a) + eot if sampled else None,
                action_logprobs=[-0.5] * (len(codec.encode_action(a)) + 1) if sampled else None,
                observation=ObservationRecord(segments=o),
            )
            for a, o in zip(ACTIONS, OBS, strict=True)
        ],
    )


def test_probe_reports_the_mode_and_why(toks: dict[str, Any], foreign_toks: dict[str, Any]) -> None:
    for tok in (toks["qwen"], toks["llama"], *foreign_toks.values()):
        m = template_mode(tok)
        assert m.mode == "tito" and m.reasons == ()
    m = template_mode(toks["qwen3"])
    assert m.mode == "stepwise" and "prefix-stable" in m.reasons[0] and "qwen3" in m.template_name
    m = template_mode(toks["qwen"], chat_template=TRIM_TEMPLATE)
    assert m.mode == "stepwise" and any("trims" in r and "'tool'" in r for r in m.reasons), m.reasons
    assert m.template_name.endswith("(custom)")


def test_auto_picks_tito_or_stepwise(toks: dict[str, Any]) -> None:
    [one] = tokenize_sequences(_traj(toks["qwen"]), toks["qwen"])
    assert one.method == "tito" and one.turn is None
    seqs = tokenize_sequences(_traj(toks["qwen3"]), toks["qwen3"])
    assert [s.method for s in seqs] == ["stepwise"] * 3 and [s.turn for s in seqs] == [0, 1, 2]
    with pytest.raises(ValueError, match="mode must be"):
        tokenize_sequences(_traj(toks["qwen"]), toks["qwen"], mode="nope")


def test_each_sequence_is_the_template_at_that_step(toks: dict[str, Any]) -> None:
    tok = toks["qwen3"]
    traj = _traj(tok)
    codec = fragment_codec(tok)
    b = StepwiseBuilder(tok)
    prompts = [b.start(traj.messages, reset=traj.reset)]
    for step in traj.steps:
        b.add_action(step.action_token_ids, logprobs=step.action_logprobs)
        prompts.append(b.add_observation(step.observation))
    seqs = b.finish(episode_id="ep", reward=traj.total_reward)
    assert [s.to_dict() for s in seqs] == [s.to_dict() for s in tokenize_stepwise(traj, tok)]
    for k, (seq, step) in enumerate(zip(seqs, traj.steps, strict=True)):
        ids = seq.input_ids.tolist()
        prompt = prompts[k]
        # the prompt the sampler saw at step k is the start of sequence k, and it is the template's own render
        assert ids[: len(prompt)] == prompt
        history = [
            {"role": "system", "content": "You are a shell agent."},
            {"role": "tool", "content": "Task:\nfind the config"},
        ]
        for a, s in zip(ACTIONS[:k], traj.steps[:k], strict=True):
            history += [{"role": "assistant", "content": a}, {"role": "tool", "content": s.observation.text}]
        assert codec.decode(prompt) == tok.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
        # the sampled ids follow verbatim, as the only action tokens; their logprobs sit on them
        a = step.action_token_ids or []
        assert ids[len(prompt) : len(prompt) + len(a)] == a
        assert seq.input_ids[seq.role_ids == Role.ACTION.code].tolist() == a
        assert np.allclose(seq.sampler_logprobs[len(prompt) : len(prompt) + len(a)], -0.5)
        # observation k is this sequence's env target (and the reset body in the first sequence)
        env = seq.role_text(tok, Role.ENV_OUTPUT)
        want = "".join(x.text for x in step.observation.segments if x.role is Role.ENV_OUTPUT)
        assert env == ("find the config" if k == 0 else "") + want
        assert seq.obs_count == _bodies_after_first_action(seq.role_ids)  # |O|
    # earlier reasoning is gone from later prompts (the template dropped it), kept in its own turn's sequence
    assert "first look" in codec.decode(seqs[0].input_ids.tolist())
    assert "first look" not in codec.decode(seqs[1].input_ids.tolist())


def test_trimming_template_bodies_are_what_it_renders(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    traj = Trajectory(
        messages=[ChatMessage(role="system", content="  sys  \n")],
        steps=[
            StepRecord(
                action={}, action_text=" ls \n", observation=ObservationRecord(segments=[env_output("\n out \n")])
            ),
            StepRecord(action={}, action_text="pwd", observation=ObservationRecord(segments=[env_output(" / ")])),
        ],
    )
    seqs = tokenize_sequences(traj, tok, chat_template=TRIM_TEMPLATE)
    assert [s.method for s in seqs] == ["stepwise", "stepwise"]
    assert [s.role_text(tok, Role.ENV_OUTPUT) for s in seqs] == ["out", "/"]
    assert seqs[0].role_text(tok, Role.ACTION) == " ls \n<|im_end|>"  # what the model emitted, verbatim
    text = fragment_codec(tok).decode(seqs[1].input_ids.tolist())
    assert text.startswith("<|im_start|>system\nsys<|im_end|>") and "\nout\n" in text


def test_cut_off_action_gets_a_context_close_and_unknown_order_is_refused(toks: dict[str, Any]) -> None:
    tok = toks["qwen3"]
    codec = fragment_codec(tok)
    b = StepwiseBuilder(tok)
    b.start([{"role": "user", "content": "go"}])
    b.add_action(codec.encode_action("ls"))  # no end-of-turn: the model was cut off
    [seq] = b.finish()
    assert seq.role_text(tok, Role.ACTION) == "ls" and codec.decode(seq.input_ids.tolist()).endswith("<|im_end|>\n")
    with pytest.raises(RuntimeError, match="call order"):
        StepwiseBuilder(tok).add_action([1])
    with pytest.raises(ValueError, match="outside the tokenizer"):
        b2 = StepwiseBuilder(tok)
        b2.start([{"role": "user", "content": "go"}])
        b2.add_action([10**9])


def _bodies_after_first_action(role_ids: np.ndarray) -> int:
    """|O| written out: env_output + warning tokens after the first action token."""
    actions = np.flatnonzero(role_ids == 1)
    return 0 if actions.size == 0 else int(np.isin(role_ids[actions[0] + 1 :], [2, 3]).sum())

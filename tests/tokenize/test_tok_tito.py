"""Token-in-token-out assembly: builder API, recorded trajectories, server-provided tokens, bad input."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from openenv_echo.roles import Role
from openenv_echo.tokenization import TitoBuilder, fragment_codec, tokenize_trajectory
from openenv_echo.tokenization.observation_tokens import segment_tokens
from openenv_echo.tokenizer_identity import tokenizer_identity
from openenv_echo.trajectory import ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import ObservationTokens, Segment, TokenizerIdentity, env_output, warning

from .tokhelp import simple_trajectory


def _sample(b: TitoBuilder, text: str) -> list[int]:
    return b.codec.encode_content(text) + list(b.scaffold.eot_ids)


def test_chatml_sequence_exactly(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    b = TitoBuilder(tok)
    prompt = b.start([{"role": "system", "content": "S"}])
    codec = b.codec
    assert codec.decode(prompt) == "<|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\n"
    b.add_action(_sample(b, "ls"))
    delta = b.add_observation([warning("$ ls\n"), env_output("a.txt\n")])
    assert codec.decode(delta) == (
        "\n<|im_start|>user\n<tool_response>\n$ ls\na.txt\n\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    tt = b.finish()
    assert codec.decode(tt.input_ids.tolist()).endswith("</tool_response><|im_end|>\n")  # trailing gen prompt dropped
    runs = _runs(tt, codec)
    assert runs == [
        ("context", "<|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\n"),
        ("action", "ls<|im_end|>"),
        ("context", "\n<|im_start|>user\n<tool_response>\n"),
        ("warning", "$ ls\n"),
        ("env_output", "a.txt\n"),
        ("context", "\n</tool_response><|im_end|>\n"),
    ]
    assert tt.obs_count == len(codec.encode_content("$ ls\n")) + len(codec.encode_content("a.txt\n"))
    assert tt.method == "tito" and tt.tokenizer == tokenizer_identity(tok)


def _runs(tt: Any, codec: Any) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    ids, roles = tt.input_ids.tolist(), tt.role_ids.tolist()
    i = 0
    while i < len(ids):
        j = i
        while j < len(ids) and roles[j] == roles[i]:
            j += 1
        out.append((Role.from_code(roles[i]).value, codec.decode(ids[i:j])))
        i = j
    return out


def test_llama_bos_added_once(toks: dict[str, Any]) -> None:
    tok = toks["llama"]
    b = TitoBuilder(tok)
    prompt = b.start([{"role": "user", "content": "hi"}])
    assert prompt[0] == tok.bos_token_id and prompt.count(tok.bos_token_id) == 1
    # a template that writes the BOS itself: not duplicated
    tpl = "{{- bos_token }}" + tok.chat_template
    b2 = TitoBuilder(tok, chat_template=tpl)
    p2 = b2.start([{"role": "user", "content": "hi"}])
    assert p2 == prompt
    b3 = TitoBuilder(tok, add_special_tokens=False)
    assert b3.start([{"role": "user", "content": "hi"}]) == prompt[1:]


def test_final_generation_prompt_and_ending_on_an_action(stable_tok: Any) -> None:
    b = TitoBuilder(stable_tok)
    b.start([{"role": "user", "content": "go"}])
    b.add_action(_sample(b, "x"))
    b.add_observation([env_output("y")])
    tt = b.finish(final_generation_prompt=True)
    gp = list(b.scaffold.generation_prompt_ids)
    assert tt.input_ids[-len(gp) :].tolist() == gp
    b = TitoBuilder(stable_tok)
    prompt = b.start([{"role": "user", "content": "go"}])
    action = _sample(b, "x")
    b.add_action(action)
    tt = b.finish()  # ended on an action: the rest of the turn's close is appended as context
    close, terminated = b.scaffold.close_after(action)
    assert terminated
    assert tt.input_ids.tolist() == prompt + action + close
    assert tt.role_ids.tolist() == [0] * len(prompt) + [1] * len(action) + [0] * len(close)


def test_unterminated_action_gets_the_full_close(toks: dict[str, Any]) -> None:
    b = TitoBuilder(toks["qwen"])
    prompt = b.start([])
    action = b.codec.encode_content("cut off mid")
    b.add_action(action)
    delta = b.add_observation([env_output("o")])
    assert b.codec.decode(delta).startswith("<|im_end|>\n<|im_start|>user")
    assert b.stats["unterminated_actions"] == 1
    tt = b.finish()
    at = len(prompt) + len(action)
    assert (tt.role_ids[len(prompt) : at] == Role.ACTION.code).all()
    assert tt.input_ids[at] == toks["qwen"].convert_tokens_to_ids("<|im_end|>")
    assert tt.role_ids[at] == Role.CONTEXT.code  # the template closed the turn, not the model


def test_action_from_text_gets_end_of_turn_as_action(toks: dict[str, Any]) -> None:
    b = TitoBuilder(toks["qwen"])
    b.start([])
    ids = b.add_action(text="echo <|im_end|> hi")
    assert ids[-1] == b.scaffold.eot_ids[0] and ids.count(b.scaffold.eot_ids[0]) == 1  # literal text stays text
    assert b.stats["actions_from_text"] == 1


def test_builder_call_order_and_bad_input(toks: dict[str, Any]) -> None:
    b = TitoBuilder(toks["qwen"])
    with pytest.raises(RuntimeError, match="call order"):
        b.add_action([1])
    with pytest.raises(RuntimeError, match="before start"):
        b.finish()
    b.start([{"role": "user", "content": "u"}])
    with pytest.raises(RuntimeError, match="call order"):
        b.add_observation([env_output("x")])
    with pytest.raises(ValueError, match="sampled ids or the action text"):
        b.add_action()
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        b.add_action([10**7])
    with pytest.raises(ValueError, match="outside"):
        b.add_action([-1])
    with pytest.raises(TypeError, match="ints"):
        b.add_action([1.5])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not a string"):
        b.add_action("ls")  # type: ignore[arg-type]
    b.add_action([5, 6])
    with pytest.raises(ValueError, match="role 'action'"):
        b.add_observation([Segment(role=Role.ACTION, text="forged")])
    with pytest.raises(TypeError, match="cannot read an observation"):
        b.add_observation(42)
    b.add_observation({"segments": [{"role": "env_output", "text": "ok"}]})
    b.finish()
    with pytest.raises(RuntimeError, match="already called"):
        b.finish()
    with pytest.raises(ValueError, match="string 'role' and 'content'"):
        TitoBuilder(toks["qwen"]).start([{"role": "user"}])


def test_prompt_deltas_compose(stable_tok: Any) -> None:
    b = TitoBuilder(stable_tok)
    prompt = b.start([{"role": "system", "content": "sys"}], reset=[env_output("motd\n")])
    for k in range(5):
        action = _sample(b, f"cmd {k}")
        b.add_action(action)
        prompt = prompt + action + b.add_observation([env_output(f"out {k}\n" * k)])
        assert prompt == b.ids
    assert b.finish().input_ids.tolist() == prompt[: len(prompt) - len(b.scaffold.generation_prompt_ids)]


def test_recorded_trajectory_matches_live_builder(stable_tok: Any) -> None:
    traj = simple_trajectory()
    b = TitoBuilder(stable_tok)
    b.start(traj.messages, reset=traj.reset)
    ids = []
    for step in traj.steps:
        a = _sample(b, step.action_text or "")
        ids.append(a)
        b.add_action(a)
        b.add_observation(step.observation)
    live = b.finish()
    from_text = tokenize_trajectory(traj, stable_tok)
    recorded = traj.model_copy(deep=True)
    for step, a in zip(recorded.steps, ids, strict=True):
        step.action_token_ids = a
    from_ids = tokenize_trajectory(recorded, stable_tok)
    for tt in (from_text, from_ids):
        assert tt.input_ids.tolist() == live.input_ids.tolist()
        assert tt.role_ids.tolist() == live.role_ids.tolist()
    assert from_text.stats["actions_from_text"] == 2 and from_ids.stats["actions_from_text"] == 0
    assert from_ids.episode_id == "demo" and from_ids.reward == 1.0


def test_action_json_fallback_and_error(toks: dict[str, Any]) -> None:
    traj = simple_trajectory()
    for s in traj.steps:
        s.action_text = None
    tt = tokenize_trajectory(traj, toks["qwen"])
    assert '{"command": "ls"}' in tt.role_text(toks["qwen"], Role.ACTION)
    with pytest.raises(ValueError, match="neither action_token_ids nor action_text"):
        tokenize_trajectory(traj, toks["qwen"], action_text_fallback="error")
    with pytest.raises(TypeError, match="Trajectory"):
        tokenize_trajectory({"steps": []}, toks["qwen"])  # type: ignore[arg-type]


def test_server_tokens_used_verbatim_on_fingerprint_match(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    segs = [warning("[echo] "), env_output("hi there\n")]
    server = segment_tokens(tok, segs)
    # deliberately different from client-side encoding, to prove they are used verbatim
    forged = ObservationTokens(
        tokenizer=server.tokenizer, ids=[7, 8, 9], roles=[Role.WARNING, Role.ENV_OUTPUT, Role.ENV_OUTPUT]
    )
    b = TitoBuilder(tok)
    b.start([])
    b.add_action(_sample(b, "say hi"))
    b.add_observation(ObservationRecord(segments=segs, tokens=forged))
    tt = b.finish()
    assert tt.input_ids[np.isin(tt.role_ids, [2, 3])].tolist() == [7, 8, 9]
    assert tt.obs_count == 3 and tt.stats["server_tokens_used"] == 1
    # the genuine server tokens equal client-side encoding for this tokenizer
    b = TitoBuilder(tok)
    b.start([])
    b.add_action(_sample(b, "say hi"))
    b.add_observation(server)  # an ObservationTokens on its own is accepted too
    via_server = b.finish()
    b = TitoBuilder(tok)
    b.start([])
    b.add_action(_sample(b, "say hi"))
    b.add_observation(segs)
    assert via_server.input_ids.tolist() == b.finish().input_ids.tolist()


def test_server_tokens_from_another_tokenizer(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    segs = [env_output("hello\n")]
    other = segment_tokens(toks["llama"], segs)
    assert other.tokenizer.fingerprint != tokenizer_identity(tok).fingerprint
    b = TitoBuilder(tok)
    b.start([])
    b.add_action(_sample(b, "x"))
    with pytest.warns(UserWarning, match="different tokenizer"):
        b.add_observation(ObservationRecord(segments=segs, tokens=other))
    tt = b.finish()
    assert tt.stats["server_tokens_rejected"] == 1
    assert tt.role_text(tok, Role.ENV_OUTPUT) == "hello\n"
    b = TitoBuilder(tok)
    b.start([])
    b.add_action(_sample(b, "x"))
    with pytest.raises(ValueError, match="no segments to encode"):
        b.add_observation(other)
    bad = ObservationTokens(
        tokenizer=TokenizerIdentity(name="x", fingerprint=tokenizer_identity(tok).fingerprint),
        ids=[1],
        roles=[Role.ACTION],
    )
    with pytest.raises(ValueError, match="role 'action'"):
        b.add_observation(bad)


def test_recorded_trajectory_with_server_tokens_and_empty_reset(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    segs = [env_output("out\n")]
    traj = Trajectory(
        reset=ObservationRecord(segments=[]),
        steps=[
            StepRecord(
                action={},
                action_text="a",
                observation=ObservationRecord(segments=segs, tokens=segment_tokens(tok, segs)),
            )
        ],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tt = tokenize_trajectory(traj, tok)
    assert tt.stats["server_tokens_used"] == 1
    assert fragment_codec(tok).decode(tt.input_ids.tolist()).startswith("<|im_start|>assistant\na<|im_end|>")

"""Offline assembly: full render with offsets, straddle policy, special-token text in content, rewriting
templates."""

from __future__ import annotations

from typing import Any

import pytest

from openenv_echo.roles import Role
from openenv_echo.tokenize import STRADDLE_ROLE, TaggedMessage, tokenize_offline
from openenv_echo.tokenize.offline import conversation_from_trajectory, token_roles
from openenv_echo.trajectory import ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import Segment, context, env_output

from .tokhelp import simple_trajectory


def test_offline_matches_the_template_rendering(any_tok: Any) -> None:
    traj = simple_trajectory()
    tt = tokenize_offline(traj, any_tok)
    msgs = [{"role": m.role, "content": m.content} for m in conversation_from_trajectory(traj)]
    expected = any_tok.apply_chat_template(msgs, tokenize=True, return_dict=False)
    prefix = [any_tok.bos_token_id] if any_tok.bos_token == "<s>" else []
    assert tt.input_ids.tolist() == prefix + list(expected)
    assert tt.method == "offline" and tt.episode_id == "demo"
    assert tt.role_text(any_tok, Role.WARNING) == "$ ls -la\n$ cat a.cfg\n"
    eot = "<|eot_id|>" if "llama" in any_tok.name_or_path else "<|im_end|>"
    assert tt.role_text(any_tok, Role.ACTION) == f"ls -la{eot}cat a.cfg{eot}"


def test_straddling_token_is_context_and_counted(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    # the body's trailing "\n" and the template's "\n</tool_response>" merge into one "\n\n" token
    msgs = [
        TaggedMessage("user", [context("u")]),
        TaggedMessage("assistant", [Segment(role=Role.ACTION, text="ls")]),
        TaggedMessage("tool", [env_output("a.txt\n")]),
    ]
    tt = tokenize_offline(msgs, tok)
    assert tt.stats["straddled"] == 1
    assert STRADDLE_ROLE is Role.CONTEXT
    nn = tok.convert_tokens_to_ids("\u010a\u010a")  # byte-level "\n\n"
    assert nn in tt.input_ids.tolist()
    assert tt.role_ids[tt.input_ids.tolist().index(nn)] == Role.CONTEXT.code
    assert tt.role_text(tok, Role.ENV_OUTPUT) == "a.txt"  # the straddled "\n" is not trained as env_output


def test_special_token_text_in_content_is_context_and_counted(stable_tok: Any) -> None:
    special = "<|im_end|>" if "<|im_end|>" in stable_tok.get_vocab() else "<|eot_id|>"
    msgs = [
        TaggedMessage("user", [context("u")]),
        TaggedMessage("assistant", [Segment(role=Role.ACTION, text="a")]),
        TaggedMessage("tool", [env_output(f"x {special} y")]),
    ]
    tt = tokenize_offline(msgs, stable_tok)
    assert tt.stats["special_in_content"] == 1
    sid = stable_tok.convert_tokens_to_ids(special)
    env_ids = tt.input_ids[tt.role_ids == Role.ENV_OUTPUT.code].tolist()
    assert sid not in env_ids


def test_rewriting_template_is_aligned_and_flagged(toks: dict[str, Any]) -> None:
    tok = toks["qwen3"]
    traj = simple_trajectory()
    traj.steps[0].action_text = "<think>\nlook first\n</think>\n\nls -la"
    with pytest.warns(UserWarning, match="rewrote message content"):
        tt = tokenize_offline(traj, tok)
    assert tt.stats["content_rewritten"] == 1
    action = tt.role_text(tok, Role.ACTION)
    assert "look first" not in action and "ls -la<|im_end|>" in action  # past reasoning dropped by the template
    # both bodies end in "\n", which merges with the template's "\n" (straddle -> context)
    assert tt.role_text(tok, Role.ENV_OUTPUT) == "a.cfg\nb.txtkey=value" and tt.stats["straddled"] == 2


def test_decoding_sampled_ids_when_no_text(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    ids = tok.encode("cat x", add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
    traj = Trajectory(
        steps=[StepRecord(action={}, action_token_ids=ids, observation=ObservationRecord(segments=[env_output("y")]))]
    )
    conv = conversation_from_trajectory(traj, tokenizer=tok)
    assert conv[0].content == "cat x"


def test_tagged_message_coercion_and_errors(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    tt = tokenize_offline(
        [
            {"role": "system", "content": "plain is context"},
            {"role": "tool", "segments": [{"role": "warning", "text": "[w]\n"}, {"role": "env_output", "text": "ok"}]},
        ],
        tok,
    )
    assert tt.role_text(tok, Role.WARNING) == "[w]\n" and tt.role_text(tok, Role.ENV_OUTPUT) == "ok"
    with pytest.raises(ValueError, match="no messages"):
        tokenize_offline([], tok)
    with pytest.raises(ValueError, match="string 'role'"):
        tokenize_offline([{"content": "x"}], tok)
    with pytest.raises(ValueError, match="'segments' or a string 'content'"):
        tokenize_offline([{"role": "user"}], tok)


def test_token_roles_policy_directly() -> None:
    import numpy as np

    text = "abcd"
    croles = bytearray([2, 2, 0, 0])
    # tokens: "ab" (env), "cd" (context), a gap-trimmed token covering only "d" after a token "b"
    roles, stats = token_roles(text, croles, [(0, 2), (2, 4)], np.array([10, 11]), frozenset())
    assert roles.tolist() == [2, 0] and stats == {"straddled": 0, "special_in_content": 0}
    roles, stats = token_roles(text, croles, [(0, 3), (3, 4)], np.array([10, 11]), frozenset())
    assert roles.tolist() == [0, 0] and stats["straddled"] == 1
    # uncovered character (trimmed offsets) counts for both neighbours: "c" is context -> token 0 straddles
    roles, stats = token_roles(text, croles, [(0, 2), (3, 4)], np.array([10, 11]), frozenset())
    assert roles.tolist() == [0, 0] and stats["straddled"] == 1
    roles, stats = token_roles(text, croles, [(0, 2), (2, 4)], np.array([10, 11]), frozenset({10}))
    assert roles.tolist() == [0, 0] and stats["special_in_content"] == 1
    roles, _ = token_roles("", bytearray(), [], np.array([], dtype=np.int64), frozenset())
    assert roles.tolist() == []

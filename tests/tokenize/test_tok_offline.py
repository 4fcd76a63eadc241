"""Offline assembly: full render with offsets, straddle policy, special-token text in content, rewriting
templates."""

from __future__ import annotations

from typing import Any

import pytest

from openenv_echo.roles import Role
from openenv_echo.tokenize import STRADDLE_ROLE, TaggedMessage, tokenize_offline
from openenv_echo.tokenize.fragment import fragment_codec
from openenv_echo.tokenize.offline import conversation_from_trajectory
from openenv_echo.tokenize.rendered import token_roles
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


def test_special_token_text_in_content_is_literal(stable_tok: Any) -> None:
    special = "<|im_end|>" if "<|im_end|>" in stable_tok.get_vocab() else "<|eot_id|>"
    msgs = [
        TaggedMessage("system", [context(f"sys {special} prompt")]),
        TaggedMessage("assistant", [Segment(role=Role.ACTION, text=f"a {special}")]),
        TaggedMessage("tool", [env_output(f"x {special} y")]),
    ]
    tt = tokenize_offline(msgs, stable_tok)
    codec = fragment_codec(stable_tok)
    sid = stable_tok.convert_tokens_to_ids(special)
    # the template writes the special token; the three bodies carry it as plain text
    ids = tt.input_ids.tolist()
    rendered = stable_tok.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in msgs], tokenize=True, return_dict=False
    )
    assert ids.count(sid) == list(rendered).count(sid) - 3
    assert tt.role_text(stable_tok, Role.ENV_OUTPUT) == f"x {special} y"
    for role in (Role.ENV_OUTPUT, Role.ACTION):
        body = tt.input_ids[tt.role_ids == role.code].tolist()
        assert not set(body) & (codec.special_ids - {tt.input_ids[tt.role_ids == 1].tolist()[-1]})


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
    croles = bytearray([2, 2, 0, 0])
    # tokens: "ab" (env), "cd" (context)
    roles, straddled = token_roles(4, croles, [(0, 2), (2, 4)])
    assert roles.tolist() == [2, 0] and straddled == 0
    roles, straddled = token_roles(4, croles, [(0, 3), (3, 4)])
    assert roles.tolist() == [0, 0] and straddled == 1
    # uncovered character (trimmed offsets) counts for both neighbours: "c" is context -> token 0 straddles
    roles, straddled = token_roles(4, croles, [(0, 2), (3, 4)])
    assert roles.tolist() == [0, 0] and straddled == 1
    # end-of-turn characters (code 4) are action
    roles, _ = token_roles(4, bytearray([1, 1, 4, 4]), [(0, 2), (2, 4)])
    assert roles.tolist() == [1, 1]
    roles, _ = token_roles(0, bytearray(), [])
    assert roles.tolist() == []

"""Offline assembly: full render with offsets, straddle policy, special-token text in content, rewriting
templates."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openenv_echo.roles import Role
from openenv_echo.tokenization import STRADDLE_ROLE, TaggedMessage, tokenize_offline
from openenv_echo.tokenization.fragment_encoding import fragment_codec
from openenv_echo.tokenization.offline import conversation_from_trajectory
from openenv_echo.tokenization.rendered import encode_parts, render_parts
from openenv_echo.tokenization.role_boundaries import _locate, token_roles
from openenv_echo.tokenization.template import assistant_eot_text
from openenv_echo.trajectory import ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import Segment, context, env_output

from .tokhelp import conversations, make_trajectory, simple_trajectory, texts


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


@pytest.mark.filterwarnings("ignore:the chat template rewrote message content")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conv=conversations, document_start=st.booleans(), gen=st.booleans(), opaque=st.booleans())
def test_boundaries_from_byte_lengths_equal_offsets(
    every_tok: Any, conv: dict[str, Any], document_start: bool, gen: bool, opaque: bool
) -> None:
    """Role boundaries found from per-id byte lengths are exactly those the tokenizer's offsets give, and one
    encoding of the whole rendering is exactly its runs' encodings (the runs path is the same codec without
    ``whole_bytes``, the offsets path without ``token_bytes`` either)."""
    codec = fragment_codec(every_tok)
    assert codec.token_bytes is not None, "every test tokenizer has a character-wise pipeline"
    runs_only = copy.copy(codec)
    runs_only.whole_bytes = None
    offsets_only = copy.copy(runs_only)
    offsets_only.token_bytes = None
    messages = conversation_from_trajectory(make_trajectory(conv), tokenizer=every_tok)
    if opaque:  # pre-encoded ids (a TITO reset body, a step-wise action) cut the text
        body = codec.encode_body("ok\n")
        messages.insert(1, TaggedMessage("tool", [], ids=body, id_roles=bytes([Role.ENV_OUTPUT.code]) * len(body)))
    parts = render_parts(every_tok, messages, add_generation_prompt=gen, eot=assistant_eot_text(every_tok))
    ids, roles, straddled = encode_parts(codec, parts, document_start=document_start)
    for other in (runs_only, offsets_only):
        ids2, roles2, straddled2 = encode_parts(other, parts, document_start=document_start)
        assert ids.tolist() == ids2.tolist()
        assert roles.tolist() == roles2.tolist()
        assert straddled == straddled2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts)
def test_token_byte_lengths_cover_the_text(every_tok: Any, text: str) -> None:
    """The byte-length table is exact: a literal run's ids add up to its UTF-8 length (unless it holds text the
    table cannot tell apart, the pre-tokenizer's space symbol, or an id it does not fix, such as unknown)."""
    codec = fragment_codec(every_tok)
    assert codec.token_bytes is not None
    ids = codec.encode_body(text)
    lengths = codec.token_bytes[ids]
    if (codec.space_symbol and codec.space_symbol in text) or (lengths < 0).any():
        return
    assert int(lengths.sum()) == len(text.encode("utf-8"))


def test_byte_lengths_place_boundaries_without_offsets(stable_any: Any) -> None:
    """A run "\n\n" + body + "\n" (template, env_output, warning) is placed from byte lengths alone; a token
    across a boundary is a straddle."""
    codec = fragment_codec(stable_any)
    text = "\n\nerror: not found\n$ ls -la\n"
    croles = bytearray([0, 0] + [Role.ENV_OUTPUT.code] * 17 + [Role.WARNING.code] * 10)
    ids = codec.encode_body(text)
    out: dict[int, Any] = {}
    failed = _locate(out, text, croles, codec.token_bytes, [(0, len(text))], [ids], [[2, 19]], [7])
    assert failed == []
    roles, straddled = out[0][1], out[0][2]
    enc = codec.body.encode(text, add_special_tokens=False)
    expected, expected_straddled = token_roles(len(text), croles, enc.offsets)
    assert list(roles) == expected.tolist() and straddled == expected_straddled

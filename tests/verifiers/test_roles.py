"""Roles of the renderer's tokens (``node_roles``, ``token_offsets``) with the real Qwen3 renderer and the offline
byte-level BPE tokenizer: multi-byte text, a token across a role boundary, a body the template also spells, a body
that is not there."""

from __future__ import annotations

from typing import Any

from renderers import create_renderer
from renderers.configs import Qwen3RendererConfig

from openenv_echo.adapters.prime_rl import node_roles, token_offsets
from openenv_echo.roles import Role

C, E, W = Role.CONTEXT.code, Role.ENV_OUTPUT.code, Role.WARNING.code


def _node(tok: Any, parts: list[str]) -> tuple[list[int], list[bool]]:
    """The token ids (and ``is_content``) the renderer gives the last user message of a short conversation, from
    the end of the assistant turn before it, as verifiers' trace graph stores an observation node."""
    renderer = create_renderer(tok, Qwen3RendererConfig(enable_thinking=False))
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "ls"},
        {"role": "user", "content": [{"type": "text", "text": p} for p in parts]},
    ]
    out = renderer.render(msgs)
    start, end = out.message_token_spans()[2][1], out.message_token_spans()[3][1]
    return out.token_ids[start:end], out.is_content[start:end]


def _text_of(tok: Any, ids: list[int], codes: list[int], code: int) -> str:
    return "".join(tok.decode([i]) for i, c in zip(ids, codes) if c == code)


def test_offsets_tile_the_text_with_multibyte_characters(renderer_tokenizer: tuple[str, Any]) -> None:
    _, tok = renderer_tokenizer
    ids, _ = _node(tok, ["naïve — 日本語 ✓\n"])
    text, offsets = token_offsets(tok, ids)
    assert text == tok.decode(ids, skip_special_tokens=False)
    assert [s for s, _ in offsets] == [0, *(e for _, e in offsets[:-1])] and offsets[-1][1] == len(text)
    assert any(s == e for s, e in offsets)  # a byte of a character split over tokens: zero-width, the next covers it


def test_segment_roles_land_on_their_tokens(renderer_tokenizer: tuple[str, Any]) -> None:
    """A token inside one segment's characters has that segment's role; every template token is context."""
    _, tok = renderer_tokenizer
    segments = [
        (Role.WARNING, "$ cat naïve.txt\n"),
        (Role.ENV_OUTPUT, "日本語 — ok: 42 files\n"),
        (Role.WARNING, "[exit 0]"),
    ]
    ids, is_content = _node(tok, [t for _, t in segments])
    codes = node_roles(tok, ids, is_content, segments)
    assert codes is not None and len(codes) == len(ids) and set(codes) == {C, E, W}
    text, offsets = token_offsets(tok, ids)
    spans, pos = [], text.index("".join(t for _, t in segments))
    for role, seg in segments:
        spans.append((pos, pos + len(seg), role.code))
        pos += len(seg)
    for (s, e), code in zip(offsets, codes):
        if e <= spans[0][0] or s >= spans[-1][1]:
            assert code == C, text[s:e]  # template: <|im_end|>, <|im_start|>user, separators
        for a, b, role in spans:
            if a <= s and e <= b and e > s:
                assert code == role, (text[s:e], role)
    assert "日本語" in _text_of(tok, ids, codes, E) and "[exit 0]" in _text_of(tok, ids, codes, W)


def test_a_token_across_a_role_boundary_is_context(renderer_tokenizer: tuple[str, Any]) -> None:
    _, tok = renderer_tokenizer
    body = "available memory"
    ids, is_content = _node(tok, [body])
    text, offsets = token_offsets(tok, ids)
    start = text.index(body)
    k, (s, _) = next((k, o) for k, o in enumerate(offsets) if o[0] >= start and o[1] - o[0] >= 3)
    cut = s - start + 1  # a role boundary one character into a multi-character token
    segments = [(Role.WARNING, body[:cut]), (Role.ENV_OUTPUT, body[cut:])]
    codes = node_roles(tok, ids, is_content, segments)
    assert codes is not None and codes[k] == C  # it holds characters of both roles: no target
    assert codes[k + 1 :].count(E) >= 1


def test_an_ambiguous_body_needs_is_content_and_a_missing_body_is_none(renderer_tokenizer: tuple[str, Any]) -> None:
    _, tok = renderer_tokenizer
    segments = [(Role.ENV_OUTPUT, "user")]  # the template writes "user" too
    ids, is_content = _node(tok, ["user"])
    codes = node_roles(tok, ids, is_content, segments)
    assert codes is not None and _text_of(tok, ids, codes, E) == "user"
    assert tok.decode([i for i, c in zip(ids, codes) if c == C]).count("user") == 1  # the header's stays context
    assert node_roles(tok, ids, [], segments) is None  # no attribution to pick an occurrence: unplaced, not guessed
    assert node_roles(tok, ids, is_content, [(Role.ENV_OUTPUT, "absent")]) is None
    assert node_roles(tok, ids, is_content, []) == [C] * len(ids)

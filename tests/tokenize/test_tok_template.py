"""The template probe: scaffolding per family, and loud failures for templates TITO cannot follow."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from openenv_echo.tokenize import TemplateError, TemplateNotPrefixStable, TitoBuilder, probe_template
from openenv_echo.tokenize.template import assistant_eot_text


def test_chatml_scaffold(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    sc = probe_template(tok, "tool")
    assert sc.generation_prompt == "<|im_start|>assistant\n"
    assert sc.assistant_close == "<|im_end|>\n"
    assert sc.obs_open == "<|im_start|>user\n<tool_response>\n"
    assert sc.obs_close == "\n</tool_response><|im_end|>\n"
    assert sc.eot_ids == (tok.convert_tokens_to_ids("<|im_end|>"),)
    assert "local:qwen" in sc.template_name
    user = probe_template(tok, "user")
    assert (user.obs_open, user.obs_close) == ("<|im_start|>user\n", "<|im_end|>\n")
    assert probe_template(tok, "tool") is sc  # cached


def test_llama_scaffold(toks: dict[str, Any]) -> None:
    tok = toks["llama"]
    sc = probe_template(tok, "tool")
    assert sc.obs_open == "<|start_header_id|>ipython<|end_header_id|>\n\n"
    assert sc.obs_close == "<|eot_id|>" and sc.assistant_close == "<|eot_id|>"
    assert sc.generation_prompt == "<|start_header_id|>assistant<|end_header_id|>\n\n"
    assert sc.eot_ids == (tok.convert_tokens_to_ids("<|eot_id|>"),)
    assert assistant_eot_text(tok) == "<|eot_id|>"


def test_close_after_action(toks: dict[str, Any]) -> None:
    sc = probe_template(toks["qwen"], "tool")
    eot = sc.eot_ids[0]
    assert sc.close_after([5, 6, eot]) == ([sc.assistant_close_ids[1]], True)  # only the "\n" remains
    assert sc.close_after([5, 6]) == (list(sc.assistant_close_ids), False)  # cut off: whole close
    assert sc.close_after([]) == (list(sc.assistant_close_ids), False)


def test_qwen3_style_template_fails_loudly_naming_it(toks: dict[str, Any]) -> None:
    tok = toks["qwen3"]
    for role in ("tool", "user"):
        with pytest.raises(TemplateNotPrefixStable, match=r"local:qwen3 chat template sha256:[0-9a-f]{12}") as e:
            probe_template(tok, role)
        assert "not prefix-stable" in str(e.value) and "<think>" in str(e.value)
    with pytest.raises(TemplateNotPrefixStable):
        TitoBuilder(tok)


def test_template_dropping_only_reasoning_is_caught_by_thinking_probe(toks: dict[str, Any]) -> None:
    # renders plain content stably, but strips <think> blocks from earlier assistant turns
    tpl = (
        "{%- for m in messages %}{%- set c = m.content %}"
        "{%- if m.role == 'assistant' and not loop.last and '</think>' in c %}{%- set c = c.split('</think>')[-1] %}"
        "{%- endif %}{{- '<|im_start|>' + m.role + '\\n' + c + '<|im_end|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    tok = toks["qwen"]
    probe_template(tok, "tool", chat_template=tpl, check_thinking=False)  # plain content: fine
    with pytest.raises(TemplateNotPrefixStable, match="custom"):
        probe_template(tok, "tool", chat_template=tpl)


def test_turn_dependent_scaffolding_fails(toks: dict[str, Any]) -> None:
    tpl = (
        "{%- for m in messages %}{{- '<|im_start|>' + m.role + ' ' + loop.index|string + '\\n' + m.content"
        " + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
        "{{- '<|im_start|>assistant ' + (messages|length + 1)|string + '\\n' }}{%- endif %}"
    )
    with pytest.raises(TemplateNotPrefixStable, match="second turn"):
        probe_template(toks["qwen"], "tool", chat_template=tpl)


def test_generation_prompt_must_match_assistant_rendering(toks: dict[str, Any]) -> None:
    tpl = (
        "{%- for m in messages %}{{- '<|im_start|>' + m.role + ':\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    with pytest.raises(TemplateNotPrefixStable, match="generation prompt"):
        probe_template(toks["qwen"], "tool", chat_template=tpl)


def test_template_that_cannot_render_the_observation_role(toks: dict[str, Any]) -> None:
    tpl = (
        "{%- for m in messages %}{%- if m.role not in ['system', 'user', 'assistant'] %}"
        "{{- raise_exception('Unsupported role: ' + m.role) }}{%- endif %}"
        "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    with pytest.raises(TemplateError, match="Unsupported role: tool"):
        probe_template(toks["qwen"], "tool", chat_template=tpl)
    assert probe_template(toks["qwen"], "user", chat_template=tpl).obs_open == "<|im_start|>user\n"


def test_missing_template_and_bad_role(toks: dict[str, Any]) -> None:
    tok = copy.deepcopy(toks["qwen"])
    tok.chat_template = None
    with pytest.raises(TemplateError, match="no chat template"):
        probe_template(tok)
    with pytest.raises(ValueError, match="observation_role"):
        probe_template(toks["qwen"], "")

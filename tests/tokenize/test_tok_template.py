"""The template probe: scaffolding per family, and loud failures for templates TITO cannot follow."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openenv_echo.tokenization import TemplateError, TemplateNotPrefixStable, TitoBuilder, probe_template, template
from openenv_echo.tokenization.template import assistant_eot_text

from .tokhelp import texts


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


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=st.lists(texts, min_size=1, max_size=5), gen=st.booleans())
def test_direct_render_is_apply_chat_template(every_tok: Any, contents: list[str], gen: bool) -> None:
    """Plain messages are rendered by the compiled template directly: the same text as apply_chat_template."""
    roles = ["system", "user", "assistant", "tool", "assistant"]
    msgs = [{"role": r, "content": c} for r, c in zip(roles, contents)]
    assert template._direct(every_tok, msgs, None) is not None
    want = every_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
    assert template.render(every_tok, msgs, add_generation_prompt=gen) == want


def test_direct_render_only_for_plain_messages(toks: dict[str, Any]) -> None:
    """Extra keys, non-str values or template kwargs go through apply_chat_template; a renderer whose first
    render differs from apply_chat_template is never used again for that tokenizer and template."""
    tok = copy.copy(toks["qwen"])
    assert template._direct(tok, [{"role": "user", "content": "x", "name": "n"}], None) is None
    assert template._direct(tok, [{"role": "user", "content": None}], None) is None
    tok.chat_template = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
    msgs = [{"role": "user", "content": "hi"}]
    direct = template._direct(tok, msgs, None)
    assert direct is not None and direct(msgs, False) == tok.apply_chat_template(msgs, tokenize=False)
    key = (id(tok), template._sha(tok.chat_template))
    template._DIRECT[key] = (template._DIRECT[key][0], False)  # as if the first render had differed
    assert template._direct(tok, msgs, None) is None
    assert template.render(tok, msgs, add_generation_prompt=False) == tok.apply_chat_template(msgs, tokenize=False)

"""``verbatim.content_verbatim``: which chat templates provably write message contents verbatim (then offline
assembly skips the second render), and that skipping it changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openenv_echo.roles import Role
from openenv_echo.tokenization import rendered
from openenv_echo.tokenization.offline import conversation_from_trajectory
from openenv_echo.tokenization.rendered import TaggedMessage
from openenv_echo.tokenization.template import _template_text, assistant_eot_text
from openenv_echo.tokenization.verbatim import content_guards, content_verbatim
from openenv_echo.wire import Segment

from .tokhelp import conversations, make_trajectory

LOOP = "{% for message in messages %}{{ BODY }}{% endfor %}"
VERBATIM = [
    LOOP.replace("BODY", "'<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n'"),
    LOOP.replace("BODY", "message['role'] ~ ': ' ~ message['content']"),
    "{% for m in messages %}{% if loop.first and m.role == 'system' %}S{% endif %}{{ m.content }}{% endfor %}",
    "{% for m in messages %}{% if messages[loop.index0 - 1].role != 'tool' %}<u>{% endif %}{{ m.content }}"
    "{% endfor %}{{ messages|length }}",
    "{% for m in messages %}{% set c = m.content %}{{ c }}{% endfor %}",
]
NOT_VERBATIM = {
    "trim": LOOP.replace("BODY", "message.content | trim"),
    "length": LOOP.replace("BODY", "message.content | length"),
    "test": "{% for m in messages %}{% if m.content.startswith('<') %}x{% endif %}{{ m.content }}{% endfor %}",
    "guard not in": "{% for m in messages %}{% if 'x' not in m.content %}x{% endif %}{{ m.content }}{% endfor %}",
    "guard outside": "{% for m in messages %}{% set c = m.content %}{% if 'x' in c %}{% endif %}{{ c|trim }}"
    "{% endfor %}",
    "alias reassigned": "{% for m in messages %}{% set c = m.content %}{% set c = 'y' %}{{ c }}{% endfor %}",
    "condition": "{% for m in messages %}{% if m.content %}{{ m.content }}{% endif %}{% endfor %}",
    "conditional output": "{% for m in messages %}{{ m.content if m.role else '' }}{% endfor %}",
    "whole message": LOOP.replace("BODY", "message | tojson"),
    "method": "{% for m in messages %}{% for k, v in m.items() %}{{ v }}{% endfor %}{% endfor %}",
    "get": "{% for m in messages %}{{ m.get('content') }}{% endfor %}",
    "slice": "{% for m in messages[1:] %}{{ m.content }}{% endfor %}",
    "filter on messages": "{% for m in messages | reverse %}{{ m.content }}{% endfor %}",
    "map": "{{ messages | map(attribute='content') | join }}",
    "previtem": "{% for m in messages %}{{ loop.previtem }}{% endfor %}",
    "alias": "{% set ms = messages %}{% for m in ms %}{{ m.content }}{% endfor %}",
    "store": "{% for m in messages %}{% set m = 'x' %}{{ m }}{% endfor %}",
    "autoescape block": "{% autoescape true %}{% for m in messages %}{{ m.content }}{% endfor %}{% endautoescape %}",
    "macro": "{% macro f(m) %}{{ m.content|trim }}{% endmacro %}{% for m in messages %}{{ f(m) }}{% endfor %}",
    "namespace": "{% set ns = namespace(m=none) %}{% for m in messages %}{% set ns.m = m %}{% endfor %}{{ ns.m }}",
}


@pytest.mark.parametrize("template", VERBATIM)
def test_verbatim_templates(template: str) -> None:
    assert content_verbatim(template)


@pytest.mark.parametrize("name", sorted(NOT_VERBATIM))
def test_templates_that_may_rewrite_or_read_contents(name: str) -> None:
    assert not content_verbatim(NOT_VERBATIM[name])


def test_guarded_templates() -> None:
    """A content read only to test for a constant (its branch unread) is verbatim without that constant."""
    qwen3_like = (
        "{% for m in messages %}{% set content = m.content %}{% if '</think>' in content %}"
        "{% set content = content.split('</think>')[-1] | trim %}{% endif %}{{ '<a>' + content }}{% endfor %}"
    )
    assert content_guards(qwen3_like) == frozenset({"</think>"})
    two = "{% for m in messages %}{% if 'a' in m.content %}A{% elif 'b' in m['content'] %}B{% endif %}{% endfor %}"
    assert content_guards(two) == frozenset({"a", "b"})
    assert content_guards(VERBATIM[0]) == frozenset()
    assert content_guards("{% for m in messages %}{{ m.content | trim }}{% endfor %}") is None


def test_family_templates(toks: dict[str, Any], foreign_toks: dict[str, Any]) -> None:
    """The shipped ChatML and Llama-3 templates and the foreign ones qualify; Qwen3's (drops reasoning) only for
    contents without ``</think>``."""
    got = {name: content_guards(_template_text(tok, None)) for name, tok in {**toks, **foreign_toks}.items()}
    assert got == {
        "qwen": frozenset(),
        "llama": frozenset(),
        "qwen3": frozenset({"</think>"}),
        "unigram": frozenset(),
        "bytebpe": frozenset(),
    }


@pytest.mark.filterwarnings("ignore:the chat template rewrote message content")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conv=conversations, think=st.booleans())
def test_skipping_the_second_render_changes_nothing(
    every_tok: Any, conv: dict[str, Any], think: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = conversation_from_trajectory(make_trajectory(conv), tokenizer=every_tok)
    if think:  # Qwen3 drops earlier reasoning: contents with the guard's constant are rendered
        messages.append(TaggedMessage("assistant", [Segment(role=Role.ACTION, text="<think>r</think>\n\nok")]))
    eot = assistant_eot_text(every_tok)
    for gen in (False, True):
        fast = rendered.render_parts(every_tok, messages, add_generation_prompt=gen, eot=eot)
        with monkeypatch.context() as m:
            m.setattr(rendered, "content_guards", lambda _t: None)
            slow = rendered.render_parts(every_tok, messages, add_generation_prompt=gen, eot=eot)
        assert (fast.text, fast.roles, fast.kinds, fast.rewritten) == (
            slow.text,
            slow.roles,
            slow.kinds,
            slow.rewritten,
        )
        assert fast.text == every_tok.apply_chat_template(
            [{"role": x.role, "content": x.content} for x in messages], tokenize=False, add_generation_prompt=gen
        )

"""Probe a chat template once with sentinel messages: its scaffolding, and whether it is prefix-stable.

Token-in-token-out assembly never re-renders the conversation; it appends, per turn, the template's
*scaffolding* (role headers, separators, closing tags) around message bodies. That is only equivalent to the
template when the template is **prefix-stable**: rendering ``messages + [m]`` must extend the rendering of
``messages`` without changing it, the generation prompt must be exactly the text that precedes an assistant
message's content, and the scaffolding must be the same for every turn. ``probe_template`` renders a
two-round sentinel conversation (system, user, then assistant/observation twice; once with plain assistant
content and once with ``<think>`` reasoning) and checks all of that, raising ``TemplateNotPrefixStable``
naming the template and showing where the text diverges. Qwen3-style templates that drop earlier ``<think>``
blocks fail here, as they must.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .fragment_encoding import backend_of, fragment_codec

_PUA = "\ue000"
_LOCK = threading.Lock()
_CACHE: dict[tuple[Any, ...], tuple[weakref.ref[Any], Scaffold]] = {}
_EOT_CACHE: dict[tuple[Any, ...], tuple[weakref.ref[Any], str]] = {}


class TemplateError(ValueError):
    """The chat template cannot be used for role-mask assembly."""


class TemplateNotPrefixStable(TemplateError):
    """Appending a message changes text the template rendered before it (or turn scaffolding varies)."""


@dataclass(frozen=True)
class Scaffold:
    """The template's text around messages, as text and as ids (encoded once, mid-sequence).

    Per agent turn TITO appends: ``action ids`` (sampled, ends with ``eot_ids`` when the model stopped), the
    rest of ``assistant_close`` after the end-of-turn token, ``obs_open``, the body, ``obs_close`` and
    ``generation_prompt``; everything but the action and the body is ``context``.
    """

    template_name: str
    observation_role: str
    generation_prompt: str
    assistant_close: str
    obs_open: str
    obs_close: str
    eot_ids: tuple[int, ...]
    assistant_close_ids: tuple[int, ...]
    obs_open_ids: tuple[int, ...]
    obs_close_ids: tuple[int, ...]
    generation_prompt_ids: tuple[int, ...]
    special_ids: frozenset[int]

    def close_after(self, action_ids: Sequence[int]) -> tuple[list[int], bool]:
        """Scaffolding ids to append after ``action_ids`` to close the assistant turn, and whether the action
        ended with an end-of-turn token of the template.

        If the action's last token is a special token that occurs in ``assistant_close``, only what follows it
        is appended (template text before it, which the model did not emit, is not inserted: sampled ids are
        verbatim). Otherwise the model was cut off and the whole ``assistant_close`` is appended as context.
        """
        close = self.assistant_close_ids
        if action_ids:
            last = action_ids[-1]
            for j, tid in enumerate(close):
                if tid == last and tid in self.special_ids:
                    return list(close[j + 1 :]), True
        return list(close), False


@functools.lru_cache(maxsize=256)
def _sha(text: str) -> str:
    """sha256 of a template's text (memoized: every assembly looks its template up by it)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def unused_marker(texts: Sequence[str]) -> str:
    """A run of U+E000 one longer than the longest such run in ``texts``: it occurs in none of them."""
    longest = 0
    for t in texts:
        if _PUA in t:
            longest = max(longest, max(len(r) for r in re.findall(f"{_PUA}+", t)))
    return _PUA * (longest + 1)


def template_name(tokenizer: Any, chat_template: str | None = None) -> str:
    """``"<name_or_path> chat template sha256:<12 hex>"``: names the template in errors and caches."""
    text = _template_text(tokenizer, chat_template)
    sha = _sha(text)[:12]
    who = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    return f"{who!s} chat template sha256:{sha}" + (" (custom)" if chat_template else "")


def _template_text(tokenizer: Any, chat_template: str | None) -> str:
    tpl = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    if tpl is None:
        raise TemplateError(
            f"{getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__} has no chat template; set "
            "tokenizer.chat_template or pass chat_template="
        )
    if isinstance(tpl, Mapping):  # named templates: the default one
        tpl = tpl.get("default") or next(iter(tpl.values()))
    return str(tpl)


def render(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool,
    chat_template: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The template's text for ``messages`` (``apply_chat_template(tokenize=False)``), errors named.

    Messages of plain strings (``role`` and ``content`` only, no template kwargs) are rendered with the same
    compiled template directly (``_direct``): ``apply_chat_template`` spends about half its time copying
    them into plain data, which they already are."""
    direct = _direct(tokenizer, messages, chat_template) if not template_kwargs else None
    if direct is not None:
        out = direct(messages, add_generation_prompt)
        if out is not None:
            return out
    try:
        out = tokenizer.apply_chat_template(
            list(messages),
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            chat_template=chat_template,
            **dict(template_kwargs or {}),
        )
    except Exception as e:  # jinja raises TemplateError / TypeError / custom raise_exception
        roles = [m.get("role") for m in messages]
        raise TemplateError(
            f"the {template_name(tokenizer, chat_template)} cannot render messages with roles {roles}: "
            f"{type(e).__name__}: {e}"
        ) from e
    if not isinstance(out, str):
        raise TemplateError(f"apply_chat_template returned {type(out).__name__}, expected str")
    return out


_DIRECT: dict[tuple[int, str], tuple[weakref.ref[Any], bool]] = {}


def _direct(
    tokenizer: Any, messages: Sequence[Mapping[str, Any]], chat_template: str | None
) -> Callable[[Sequence[Mapping[str, Any]], bool], str | None] | None:
    """A renderer calling the compiled template as ``apply_chat_template`` does (same compiled template, the
    tokenizer's special tokens as variables), for messages it would pass through unchanged: dicts whose only
    keys are ``role`` and ``content``, both of type ``str``. None when that does not apply, or when the first
    such render of this tokenizer and template differed from ``apply_chat_template`` (then it never applies)."""
    for m in messages:
        if type(m) is not dict or len(m) != 2 or type(m.get("role")) is not str or type(m.get("content")) is not str:
            return None
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template, _plain_template_data
    except ImportError:  # another transformers: its apply_chat_template does the work
        return None
    get = getattr(tokenizer, "get_chat_template", None)
    tpl = get(chat_template, None) if get is not None else None
    if not isinstance(tpl, str):
        return None
    key = (id(tokenizer), _sha(tpl))
    hit = _DIRECT.get(key)
    if hit is not None and hit[0]() is tokenizer and not hit[1]:
        return None
    checked = hit is not None and hit[0]() is tokenizer

    def direct(msgs: Sequence[Mapping[str, Any]], gen: bool) -> str | None:
        variables = _plain_template_data(dict(tokenizer.special_tokens_map))
        try:
            out = _compile_jinja_template(tpl).render(
                messages=list(msgs), tools=None, documents=None, add_generation_prompt=gen, **variables
            )
        except Exception:  # let apply_chat_template raise it, named
            return None
        if not checked:
            same = out == tokenizer.apply_chat_template(
                list(msgs), tokenize=False, add_generation_prompt=gen, chat_template=chat_template
            )
            with contextlib.suppress(TypeError), _LOCK:  # TypeError: not weak-referenceable, checked every time
                if len(_DIRECT) >= 256:
                    _DIRECT.clear()
                _DIRECT[key] = (weakref.ref(tokenizer), same)
            if not same:
                return None
        return str(out)

    return direct


def _divergence(a: str, b: str) -> str:
    i = 0
    n = min(len(a), len(b))
    while i < n and a[i] == b[i]:
        i += 1
    lo = max(0, i - 40)
    return f"at char {i}: before {a[lo : i + 40]!r}, after {b[lo : i + 40]!r}"


def _split_once(text: str, sentinel: str, what: str, name: str) -> tuple[str, str]:
    if text.count(sentinel) != 1:
        raise TemplateNotPrefixStable(
            f"the {name} renders the {what} content {text.count(sentinel)} times (expected once): {text!r}"
        )
    pre, _, post = text.partition(sentinel)
    return pre, post


def probe_template(
    tokenizer: Any,
    observation_role: str = "tool",
    *,
    chat_template: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    check_thinking: bool = True,
) -> Scaffold:
    """Probe the template (cached per tokenizer object, template, role and kwargs); see the module docstring.

    ``observation_role`` is the chat role observations are rendered as (``"tool"`` or ``"user"``; SKY probes
    both). ``check_thinking`` also probes assistant content carrying a ``<think>`` block.
    """
    if not isinstance(observation_role, str) or not observation_role:
        raise ValueError(f"observation_role must be a non-empty string, got {observation_role!r}")
    tpl_text = _template_text(tokenizer, chat_template)
    key = (
        id(tokenizer),
        _sha(tpl_text),
        observation_role,
        _kwargs_key(template_kwargs),
        check_thinking,
    )
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0]() is tokenizer:
            return hit[1]
    scaffold = _probe(tokenizer, observation_role, chat_template, template_kwargs, check_thinking)
    try:
        ref = weakref.ref(tokenizer)
    except TypeError:
        return scaffold
    with _LOCK:
        _CACHE[key] = (ref, scaffold)
    return scaffold


def _probe(
    tokenizer: Any,
    obs_role: str,
    chat_template: str | None,
    template_kwargs: Mapping[str, Any] | None,
    check_thinking: bool,
) -> Scaffold:
    name = template_name(tokenizer, chat_template)
    sentinel = unused_marker([_template_text(tokenizer, chat_template)])

    def r(msgs: list[dict[str, str]], gen: bool) -> str:
        return render(
            tokenizer, msgs, add_generation_prompt=gen, chat_template=chat_template, template_kwargs=template_kwargs
        )

    variants: list[Callable[[str], str]] = [lambda s: s]
    if check_thinking:
        variants.append(lambda s: f"<think>\nreasoning {s}\n</think>\n\n{s}")
    found: dict[str, str] | None = None
    for variant in variants:
        s = {k: f"{sentinel}{k}{sentinel}" for k in ("S", "U", "A1", "O1", "A2", "O2")}
        conv = [
            {"role": "system", "content": s["S"]},
            {"role": "user", "content": s["U"]},
            {"role": "assistant", "content": variant(s["A1"])},
            {"role": obs_role, "content": s["O1"]},
            {"role": "assistant", "content": variant(s["A2"])},
            {"role": obs_role, "content": s["O2"]},
        ]
        plain = {k: r(conv[:k], False) for k in range(2, 7)}
        gen = {k: r(conv[:k], True) for k in (2, 4, 6)}
        for k in range(2, 6):
            if not plain[k + 1].startswith(plain[k]):
                raise TemplateNotPrefixStable(
                    f"the {name} is not prefix-stable: appending a {conv[k]['role']!r} message after "
                    f"{[m['role'] for m in conv[:k]]} changes earlier text {_divergence(plain[k], plain[k + 1])}. "
                    "Token-in-token-out assembly needs a template whose rendering only grows (templates that "
                    "drop earlier <think> blocks do not); use a prefix-stable template (chat_template=) or "
                    "offline assembly (tokenize_offline)."
                )
        for k in (2, 4):
            if not plain[k + 1].startswith(gen[k]):
                raise TemplateNotPrefixStable(
                    f"the {name} is not prefix-stable: its generation prompt is not how it renders the start of "
                    f"an assistant message {_divergence(gen[k], plain[k + 1])}"
                )
            content = conv[k]["content"]
            after = plain[k + 1][len(gen[k]) :]
            if not after.startswith(content):
                raise TemplateNotPrefixStable(
                    f"the {name} is not prefix-stable: it inserts text between the generation prompt and the "
                    f"assistant content ({after[:60]!r}), so sampled ids would not match its rendering"
                )
        g4, g6 = gen[4][len(plain[4]) :], gen[6][len(plain[6]) :]
        close1 = plain[3][len(gen[2]) + len(conv[2]["content"]) :]
        close2 = plain[5][len(gen[4]) + len(conv[4]["content"]) :]
        o1_open, o1_close = _split_once(plain[4][len(plain[3]) :], s["O1"], "observation", name)
        o2_open, o2_close = _split_once(plain[6][len(plain[5]) :], s["O2"], "observation", name)
        if (g4, close1, o1_open, o1_close) != (g6, close2, o2_open, o2_close):
            raise TemplateNotPrefixStable(
                f"the {name} renders turn scaffolding differently in the second turn: "
                f"{(g4, close1, o1_open, o1_close)!r} vs {(g6, close2, o2_open, o2_close)!r}"
            )
        this = {"gen": g4, "close": close1, "open": o1_open, "oclose": o1_close}
        if found is None:
            found = this
        elif found != this:
            raise TemplateNotPrefixStable(
                f"the {name} renders scaffolding differently when assistant content has a <think> block: "
                f"{found!r} vs {this!r}"
            )
    assert found is not None
    codec = fragment_codec(tokenizer)
    close_ids = codec.encode_scaffold(found["close"])
    eot: list[int] = []
    for tid in close_ids:
        if tid not in codec.special_ids:
            break
        eot.append(tid)
    scaffold = Scaffold(
        template_name=name,
        observation_role=obs_role,
        generation_prompt=found["gen"],
        assistant_close=found["close"],
        obs_open=found["open"],
        obs_close=found["oclose"],
        eot_ids=tuple(eot),
        assistant_close_ids=tuple(close_ids),
        obs_open_ids=tuple(codec.encode_scaffold(found["open"])),
        obs_close_ids=tuple(codec.encode_scaffold(found["oclose"])),
        generation_prompt_ids=tuple(codec.encode_scaffold(found["gen"])),
        special_ids=codec.special_ids,
    )
    backend_of(tokenizer)  # fail early on slow tokenizers
    return scaffold


def assistant_eot_text(
    tokenizer: Any,
    *,
    chat_template: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The special-token text a template puts right after assistant content (e.g. ``<|im_end|>``), found
    without requiring prefix stability; offline assembly marks it ``action`` (the model emits it). Cached per
    tokenizer object, template and kwargs."""
    tpl = _template_text(tokenizer, chat_template)
    key = (id(tokenizer), _sha(tpl), _kwargs_key(template_kwargs))
    with _LOCK:
        eot_hit = _EOT_CACHE.get(key)
        if eot_hit is not None and eot_hit[0]() is tokenizer:
            return eot_hit[1]
    out = _assistant_eot_text(tokenizer, chat_template, template_kwargs)
    try:
        ref = weakref.ref(tokenizer)
    except TypeError:
        return out
    with _LOCK:
        _EOT_CACHE[key] = (ref, out)
    return out


def _kwargs_key(template_kwargs: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(template_kwargs), sort_keys=True, default=str) if template_kwargs else "{}"


def _assistant_eot_text(tokenizer: Any, chat_template: str | None, template_kwargs: Mapping[str, Any] | None) -> str:
    sentinel = unused_marker([_template_text(tokenizer, chat_template)])
    s = f"{sentinel}A{sentinel}"
    text = render(
        tokenizer,
        [{"role": "user", "content": f"{sentinel}U{sentinel}"}, {"role": "assistant", "content": s}],
        add_generation_prompt=False,
        chat_template=chat_template,
        template_kwargs=template_kwargs,
    )
    if text.count(s) != 1:
        return ""
    close = text.split(s, 1)[1]
    codec = fragment_codec(tokenizer)
    backend = backend_of(tokenizer)
    out = ""
    for tid in codec.encode_scaffold(close):
        if tid not in codec.special_ids:
            break
        out += backend.id_to_token(tid)
    return out if close.startswith(out) else ""


@dataclass(frozen=True)
class TemplateMode:
    """Which assembly a chat template needs, and why.

    ``"tito"``: the template is prefix-stable and keeps bodies verbatim, so one sequence per episode, built by
    appending (``TitoBuilder``), is exactly what the template renders. ``"stepwise"``: the template rewrites
    history (drops earlier reasoning) or cuts bodies (``trim``), so only a per-turn rendering is faithful: one
    training sequence per assistant turn (``StepwiseBuilder``); ``reasons`` says what the probe saw.
    """

    mode: str
    reasons: tuple[str, ...]
    template_name: str


def template_mode(
    tokenizer: Any,
    observation_role: str = "tool",
    *,
    chat_template: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> TemplateMode:
    """Probe the template (``probe_template`` plus a whitespace check of every body) and report the mode it
    needs; ``mode="auto"`` in ``tokenize_sequences`` uses this."""
    name = template_name(tokenizer, chat_template)
    reasons: list[str] = []
    try:
        probe_template(tokenizer, observation_role, chat_template=chat_template, template_kwargs=template_kwargs)
    except TemplateNotPrefixStable as e:
        reasons.append(f"not prefix-stable: {e}")
    mark = unused_marker([_template_text(tokenizer, chat_template)])
    pad = {r: f" \n{mark}{r}{mark} \n" for r in ("system", "user", "assistant", observation_role)}
    conv = [{"role": r, "content": c} for r, c in pad.items()]
    text = render(
        tokenizer, conv, add_generation_prompt=False, chat_template=chat_template, template_kwargs=template_kwargs
    )
    for role, content in pad.items():
        if content not in text:
            reasons.append(
                f"it trims or rewrites {role!r} message bodies ({content!r} does not appear verbatim): "
                "appended bodies would not match its rendering"
            )
    return TemplateMode("stepwise" if reasons else "tito", tuple(reasons), name)

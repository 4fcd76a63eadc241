"""Byte pieces get roles by the one rule of RFC 0003 §7.3 (issue 34): a token stands for UTF-8 bytes of the text,
a byte has the role of the character it belongs to, a token whose bytes carry two roles is ``context`` and counted
once in ``stats["straddled"]``. The k-th byte piece of an unknown span stands for the span's k-th byte.

Checked against an oracle that spells every id back into bytes (independent of offsets and of the byte-length
table), on byte-fallback tokenizers built here (a Unigram model with byte fallback, the byte-level BPE of
``foreign.py``, the ``llama`` family's BPE with byte fallback), with unknown spans across every pair of roles, in
every assembly mode."""

from __future__ import annotations

import copy
import functools
import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openenv_echo.roles import Role
from openenv_echo.tokenization import fragment_codec, tokenize_offline, tokenize_stepwise, tokenize_trajectory
from openenv_echo.tokenization.rendered import TaggedMessage, encode_parts, render_parts
from openenv_echo.tokenization.template import assistant_eot_text
from openenv_echo.trajectory import ChatMessage, ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import Segment

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@functools.cache
def repro_tokenizer() -> Any:
    """The issue's minimal reproduction: a Unigram model of six pieces plus the 256 byte pieces, byte fallback."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    pieces = ["<unk>", "<|im_start|>", "<|im_end|>", "a", "\n", "tool"]
    vocab = [[p, 0.0 if i < 3 else -1.0] for i, p in enumerate(pieces)]
    vocab += [[f"<0x{b:02X}>", -5.0] for b in range(256)]
    added = [
        {"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
        | {"special": True}
        for i, p in enumerate(pieces[:3])
    ]
    data = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "ByteFallback"},
        "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": True},
    }
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(data)),
        unk_token="<unk>",
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
    )
    tok.chat_template = CHATML
    tok.name_or_path = "test:repro-unigram"
    return tok


def _variants(codec: Any) -> list[Any]:
    """The codec, then the same codec encoding run by run (no ``whole_bytes``), then without its byte-length
    table either: every run with a role boundary goes through offsets. All three must agree."""
    runs = copy.copy(codec)
    runs.whole_bytes = None
    offsets = copy.copy(runs)
    offsets.token_bytes = None
    return [codec, runs, offsets]


def test_minimal_unigram_repro_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's reproduction: ``warning "é"`` then ``env_output "ü"`` in one ``tool`` message. Before the
    fix: roles ``[0, 0, 0, 0, 2, 2, 2, 0]``, straddled 1."""
    tok = repro_tokenizer()
    msg = [
        {"role": "tool", "segments": [Segment(role=Role.WARNING, text="é"), Segment(role=Role.ENV_OUTPUT, text="ü")]}
    ]
    tt = tokenize_offline(msg, tok)
    assert tt.input_ids.tolist() == [1, 5, 4, 201, 175, 201, 194, 2]
    assert tt.role_ids.tolist() == [0, 0, 0, 3, 3, 2, 2, 0]
    assert tt.stats["straddled"] == 0
    # the offsets path (no byte-length table) applies the same rule
    monkeypatch.setattr(fragment_codec(tok), "whole_bytes", None)
    monkeypatch.setattr(fragment_codec(tok), "token_bytes", None)
    tt2 = tokenize_offline(msg, tok)
    assert tt2.input_ids.tolist() == tt.input_ids.tolist()
    assert tt2.role_ids.tolist() == tt.role_ids.tolist() and tt2.stats["straddled"] == 0


def _repro_trajectory(with_ids: bool) -> Trajectory:
    tok = repro_tokenizer()
    codec = fragment_codec(tok)
    return Trajectory(
        messages=[ChatMessage(role="user", content="a")],
        steps=[
            StepRecord(
                action={"a": "a"},
                action_text="aé",
                action_token_ids=codec.encode_action("aé") + [2] if with_ids else None,
                observation=ObservationRecord(
                    segments=[Segment(role=Role.WARNING, text="é"), Segment(role=Role.ENV_OUTPUT, text="ü")]
                ),
            )
        ],
    )


@pytest.mark.parametrize("mode", ["tito", "stepwise", "stepwise-offsets"])
def test_minimal_unigram_repro_every_mode(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same body in TITO (per-segment encoding) and step-wise mode (whole runs, both paths): the byte pieces
    of ``é`` are ``warning``, those of ``ü`` ``env_output``, nothing straddles."""
    tok = repro_tokenizer()
    if mode == "stepwise-offsets":
        monkeypatch.setattr(fragment_codec(tok), "whole_bytes", None)
        monkeypatch.setattr(fragment_codec(tok), "token_bytes", None)
    if mode == "tito":
        tt = tokenize_trajectory(_repro_trajectory(True), tok)
    else:
        (tt,) = tokenize_stepwise(_repro_trajectory(False), tok)
        assert tt.stats["straddled"] == 0
    ids, roles = tt.input_ids.tolist(), tt.role_ids.tolist()
    body = ids.index(5) + 2  # after "<|im_start|>tool\n"
    assert ids[body : body + 5] == [201, 175, 201, 194, 2]
    assert roles[body : body + 5] == [3, 3, 2, 2, 0]
    # the action's own byte pieces ("é" after "a") are action, with the end of turn the model emitted
    act = roles.index(Role.ACTION.code)
    assert ids[act : act + 4] == [3, 201, 175, 2] and roles[act : act + 4] == [1, 1, 1, 1]


# -- the oracle: spell every id back into bytes -------------------------------------------------------------------


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-to-symbol map, inverted (ByteLevel tokens are strings of these symbols)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Speller:
    """Bytes of text each id of ``tok`` spells, from its vocabulary alone."""

    def __init__(self, tok: Any) -> None:
        backend = tok.backend_tokenizer
        data = json.loads(backend.to_str())
        pre = json.dumps(data.get("pre_tokenizer"))
        self.bytelevel = '"ByteLevel"' in pre
        self.space = "\u2581" if '"Metaspace"' in pre else ""
        self.byte_fallback = bool(data["model"].get("byte_fallback"))
        self.added = {i: t.content for i, t in backend.get_added_tokens_decoder().items()}
        self.backend = backend
        self.bdec = _byte_decoder()

    def __call__(self, tid: int) -> bytes:
        if tid in self.added:
            return self.added[tid].encode()
        piece = self.backend.id_to_token(tid)
        if self.byte_fallback and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            return bytes([int(piece[3:5], 16)])
        if self.bytelevel:
            return bytes(self.bdec[c] for c in piece)
        return (piece.replace(self.space, " ") if self.space else piece).encode()


def expected_roles(speller: Speller, text: str, croles: bytes, ids: list[int]) -> tuple[list[int], int]:
    """The rule, stated directly: each token's bytes (spelled in order), each byte's role its character's."""
    byte_roles = bytearray()
    for ch, code in zip(text, croles):
        byte_roles += bytes((code,)) * len(ch.encode())
    spelled = [speller(i) for i in ids]
    assert b"".join(spelled) == text.encode(), "the ids spell the rendered text"
    out: list[int] = []
    straddled = 0
    pos = 0
    for sp in spelled:
        codes = set(byte_roles[pos : pos + len(sp)])
        pos += len(sp)
        if len(codes) > 1:
            out.append(Role.CONTEXT.code)
            straddled += 1
        else:
            code = codes.pop()
            out.append(Role.ACTION.code if code == 4 else code)
    return out, straddled


# -- byte-fallback tokenizers --------------------------------------------------------------------------------------


@functools.cache
def unigram_byte_fallback() -> Any:
    """A SentencePiece-style Unigram model trained here, with the 256 byte pieces and byte fallback."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from .foreign import _corpus

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    specials = ["<unk>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.UnigramTrainer(vocab_size=800, special_tokens=specials, unk_token="<unk>", show_progress=False)
    tok.train_from_iterator([d.encode("ascii", "ignore").decode() for d in _corpus()], trainer=trainer)
    data = json.loads(tok.to_str())
    have = {p for p, _ in data["model"]["vocab"]}
    data["model"]["vocab"] += [[f"<0x{b:02X}>", -20.0] for b in range(256) if f"<0x{b:02X}>" not in have]
    data["model"]["byte_fallback"] = True
    backend = Tokenizer.from_str(json.dumps(data))
    backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<|im_start|>", eos_token="<|im_end|>"
    )
    hf.chat_template = CHATML
    hf.name_or_path = "test:unigram-byte-fallback"
    return hf


@pytest.fixture(scope="module", params=["unigram-bf", "bytebpe", "llama"])
def bf_tok(request: pytest.FixtureRequest, toks: dict[str, Any], foreign_toks: dict[str, Any]) -> Any:
    if request.param == "unigram-bf":
        return unigram_byte_fallback()
    return {**toks, **foreign_toks}[request.param]


def bare_template(tok: Any) -> str:
    """Message contents back to back after one special token: bodies of any two roles meet in one run."""
    start = sorted(fragment_codec(tok).special_ids)[0]
    first = tok.backend_tokenizer.id_to_token(start)
    return "{{ '" + first + "' }}{% for m in messages %}{{ m.content }}{% endfor %}"


UNKNOWN = ["é", "ü", "ß", "日", "本", "🚀", "ꙮ", "₪", "ǅ", "Ω"]
ROLES = [Role.CONTEXT, Role.ACTION, Role.ENV_OUTPUT, Role.WARNING]


def _messages(pairs: list[tuple[Role, str]]) -> list[TaggedMessage]:
    """Consecutive segments as messages: context -> a system message, action -> an assistant message,
    observation roles -> one tool message (consecutive observation segments share it)."""
    out: list[TaggedMessage] = []
    for role, text in pairs:
        chat = {Role.CONTEXT: "system", Role.ACTION: "assistant"}.get(role, "tool")
        if chat == "tool" and out and out[-1].role == "tool":
            out[-1].segments.append(Segment(role=role, text=text))
        else:
            out.append(TaggedMessage(chat, [Segment(role=role, text=text)]))
    return out


def _check(tok: Any, messages: list[TaggedMessage], chat_template: str | None) -> dict[str, int]:
    """Offline assembly (whole text, runs with the byte-length table, runs with offsets, ``tokenize_offline``)
    equals the oracle."""
    eot = assistant_eot_text(tok, chat_template=chat_template)
    parts = render_parts(tok, messages, add_generation_prompt=False, chat_template=chat_template, eot=eot)
    assert not parts.rewritten
    codec = fragment_codec(tok)
    results = []
    for c in _variants(codec):
        ids, roles, straddled = encode_parts(c, parts, document_start=True)
        want, want_straddled = expected_roles(Speller(tok), parts.text, bytes(parts.roles), ids.tolist())
        assert roles.tolist() == want
        assert straddled == want_straddled
        results.append(ids.tolist())
    assert results[0] == results[1] == results[2]
    tt = tokenize_offline(messages, tok, chat_template=chat_template, add_special_tokens=False)
    assert tt.input_ids.tolist() == results[0] and tt.role_ids.tolist() == want
    assert tt.stats["straddled"] == want_straddled
    return {"straddled": want_straddled}


@pytest.mark.parametrize(("left", "right"), [p for p in itertools.product(ROLES, ROLES) if p[0] is not p[1]])
def test_unknown_span_across_every_pair_of_roles(bf_tok: Any, left: Role, right: Role) -> None:
    """An unknown span ``é|ü`` (and ``日|🚀``) with its characters on both sides of a boundary between two roles:
    every byte piece takes its own character's role."""
    for a, b in (("é", "ü"), ("日", "🚀")):
        _check(bf_tok, _messages([(Role.CONTEXT, "ok"), (left, "x " + a), (right, b + " y")]), bare_template(bf_tok))


segment_text = st.lists(st.sampled_from([*UNKNOWN, "a", "ok", " ", "\n", "日本"]), min_size=1, max_size=5).map("".join)
segments = st.lists(st.tuples(st.sampled_from(ROLES), segment_text), min_size=1, max_size=8)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=segments, own_template=st.booleans())
def test_byte_pieces_follow_the_rule(bf_tok: Any, pairs: list[tuple[Role, str]], own_template: bool) -> None:
    """Random conversations of unknown-heavy text in the tokenizer's own template and in the bare one."""
    _check(bf_tok, _messages(pairs), None if own_template else bare_template(bf_tok))

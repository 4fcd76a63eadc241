"""The readings of RFC 0003 that the text left open (issue 34), each pinned as the RFC now decides it:
§6.4 EOS unless already present, §4 ``<unk>`` text in a body and runs of unknown characters, §7.2 a document's
first run when the template writes BOS first, §8 whole runs in step-wise mode. (§7.3, byte pieces:
``test_tok_byte_pieces.py``.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from openenv_echo.roles import Role
from openenv_echo.tokenization import (
    TitoBuilder,
    fragment_codec,
    tokenize_offline,
    tokenize_stepwise,
    tokenize_trajectory,
)
from openenv_echo.trajectory import ChatMessage, ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import Segment, env_output

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CHATML_NL = CHATML.replace("'<|im_end|>'", "'<|im_end|>\\n'")


def _char_tokenizer(model: dict[str, Any], post_processor: Any = None) -> Any:
    """A tiny tokenizer: specials ``<unk>`` 0, ``<|im_start|>`` 1, ``<|im_end|>`` 2, then ``model``."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    added = [
        {"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
        | {"special": True}
        for i, p in enumerate(["<unk>", "<|im_start|>", "<|im_end|>"])
    ]
    data = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": post_processor,
        "decoder": None,
        "model": model,
    }
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(data)),
        unk_token="<unk>",
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
    )
    tok.chat_template = CHATML
    return tok


CHARS = "abcdefghijklmnopqrstuvwxyz \n<>"


def _bpe(fuse_unk: bool, post_processor: Any = None) -> Any:
    vocab = {"<unk>": 0, "<|im_start|>": 1, "<|im_end|>": 2} | {c: 3 + i for i, c in enumerate(CHARS)}
    model = {"type": "BPE", "vocab": vocab, "merges": [], "unk_token": "<unk>", "fuse_unk": fuse_unk}
    return _char_tokenizer(model, post_processor)


def _eos_post_processor() -> dict[str, Any]:
    return {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|im_end|>": {"id": "<|im_end|>", "ids": [2], "tokens": ["<|im_end|>"]}},
    }


def _episode(codec: Any) -> Trajectory:
    return Trajectory(
        messages=[ChatMessage(role="user", content="go")],
        steps=[
            StepRecord(
                action={"c": "ls"},
                action_text="ls",
                action_token_ids=codec.encode_action("ls") + [2],
                observation=ObservationRecord(segments=[env_output("ok")]),
            )
        ],
    )


# -- §6.4: EOS is appended unless the ids already end with it -------------------------------------------------------


@pytest.mark.parametrize("template", ["ends-with-eos", "ends-with-newline"])
def test_eos_appended_unless_already_present(template: str) -> None:
    tok = _bpe(False, _eos_post_processor())
    codec = fragment_codec(tok)
    assert codec.suffix_ids == [2]
    tpl = CHATML if template == "ends-with-eos" else CHATML_NL
    traj = _episode(codec)
    results = [
        tokenize_offline(traj, tok, chat_template=tpl),
        tokenize_trajectory(traj, tok, chat_template=tpl),
        *tokenize_stepwise(traj, tok, chat_template=tpl),
    ]
    for tt in results:
        ids = tt.input_ids.tolist()
        assert ids[-1] == 2 and tt.role_ids[-1] == Role.CONTEXT.code
        if template == "ends-with-eos":  # the template's own <|im_end|> ends the text: not doubled
            assert ids[-2] != 2
        else:  # the text ends with "\n": the post-processor's EOS is appended
            assert ids[-2] == 3 + CHARS.index("\n")
    without = tokenize_offline(traj, tok, chat_template=CHATML_NL, add_special_tokens=False)
    assert without.input_ids.tolist()[-1] != 2


# -- §4: "<unk>" text in a body is plain text; unknown characters are what the model makes of them ----------------


@pytest.mark.parametrize("family", ["llama", "unigram"])
def test_unk_text_in_a_body_is_plain_text(family: str, toks: dict[str, Any], foreign_toks: dict[str, Any]) -> None:
    tok = {**toks, **foreign_toks}[family]
    codec = fragment_codec(tok)
    assert codec.unk_id is not None
    ids = codec.encode_body("a<unk>b")
    assert codec.unk_id not in ids and codec.decode(ids) == "a<unk>b"
    tt = tokenize_offline([{"role": "tool", "segments": [env_output("<unk>")]}], tok)
    assert tt.role_text(tok, Role.ENV_OUTPUT) == "<unk>"
    assert codec.unk_id not in tt.input_ids.tolist()


def test_unknown_characters_one_unk_each_without_fusing(foreign_toks: dict[str, Any]) -> None:
    """The Unigram model (no byte fallback) gives one ``unk`` per unknown character: each keeps its role."""
    tok = foreign_toks["unigram"]
    unk = fragment_codec(tok).unk_id
    segs = [{"role": "warning", "text": "xꙮ"}, {"role": "env_output", "text": "ꙮy"}]
    tt = tokenize_offline([{"role": "tool", "segments": segs}], tok)
    at = [i for i, t in enumerate(tt.input_ids.tolist()) if t == unk]
    assert len(at) == 2
    assert [int(tt.role_ids[i]) for i in at] == [Role.WARNING.code, Role.ENV_OUTPUT.code]
    assert tt.stats["straddled"] == 0


def test_fused_unk_across_a_role_boundary_straddles() -> None:
    """A BPE with ``fuse_unk`` gives one ``unk`` for a run of unknown characters: across a role boundary (offline,
    step-wise) it is ``context`` and counted once; TITO encodes each segment alone (one ``unk`` each)."""
    tok = _bpe(True)
    segs = [Segment(role=Role.WARNING, text="xé"), Segment(role=Role.ENV_OUTPUT, text="üy")]
    tt = tokenize_offline([{"role": "tool", "segments": segs}], tok)
    ids = tt.input_ids.tolist()
    assert ids.count(0) == 1 and int(tt.role_ids[ids.index(0)]) == Role.CONTEXT.code
    assert tt.stats["straddled"] == 1
    assert tt.role_text(tok, Role.WARNING) == "x" and tt.role_text(tok, Role.ENV_OUTPUT) == "y"
    codec = fragment_codec(tok)
    traj = _episode(codec)
    traj.steps[0].observation = ObservationRecord(segments=segs)
    (sw,) = tokenize_stepwise(traj, tok)
    assert sw.stats["straddled"] == 1
    tito = tokenize_trajectory(traj, tok)
    unks = [i for i, t in enumerate(tito.input_ids.tolist()) if t == 0]
    assert [int(tito.role_ids[i]) for i in unks] == [Role.WARNING.code, Role.ENV_OUTPUT.code]


# -- §7.2: a document's first run starts at the rendering's first character ----------------------------------------


def test_first_run_when_the_template_writes_bos_first(foreign_toks: dict[str, Any]) -> None:
    """Metaspace ``prepend_scheme="first"`` (the Unigram tokenizer): a template that writes ``<bos>`` first leaves
    no run at the document's start, so no dummy ``▁`` is added, as the tokenizer itself does; without it, the
    first run gets one. Either way BOS is not doubled."""
    tok = foreign_toks["unigram"]
    backend = tok.backend_tokenizer
    msgs = [{"role": "user", "content": "hello world"}]
    for tpl, dummy in (
        ("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}", False),
        ("{% for m in messages %}{{ m.content }}{% endfor %}", True),
    ):
        tt = tokenize_offline(msgs, tok, chat_template=tpl)
        pieces = [backend.id_to_token(i) for i in tt.input_ids.tolist()]
        assert pieces[0] == "<bos>" and pieces.count("<bos>") == 1
        assert (pieces[1] == "\u2581") is dummy or pieces[1].startswith("\u2581") is dummy
        text = tok.apply_chat_template(msgs, tokenize=False, chat_template=tpl)
        full = tok(text, add_special_tokens=dummy).input_ids  # the template's <bos> is not doubled (tok would)
        assert tt.input_ids.tolist() == full


# -- §8: step-wise mode encodes whole runs (as the template renders them), TITO per segment --------------------------


def test_stepwise_encodes_whole_runs(toks: dict[str, Any]) -> None:
    """A body's trailing newline merges with the template's newline in step-wise mode (one straddling token, as
    in offline assembly and in the prompt the sampler is given next) and stays the body's own token in TITO."""
    tok = toks["qwen"]
    codec = fragment_codec(tok)
    traj = _episode(codec)
    traj.steps[0].observation = ObservationRecord(segments=[env_output("a.txt\n")])
    (sw,) = tokenize_stepwise(traj, tok)
    assert sw.role_text(tok, Role.ENV_OUTPUT) == "a.txt" and sw.stats["straddled"] == 1
    tito = tokenize_trajectory(traj, tok)
    assert tito.role_text(tok, Role.ENV_OUTPUT) == "a.txt\n"
    # the observation's tokens in sequence 0 are those of the next prompt at the same place
    b = TitoBuilder(tok)  # only for the scaffold's generation prompt
    from openenv_echo.tokenization.stepwise import StepwiseBuilder

    sb = StepwiseBuilder(tok)
    sb.start(traj.messages)
    sb.add_action(traj.steps[0].action_token_ids)
    nxt = sb.add_observation(traj.steps[0].observation)
    gp = list(b.scaffold.generation_prompt_ids)
    assert nxt[: len(sw.input_ids)] == sw.input_ids.tolist() and nxt[len(sw.input_ids) :] == gp

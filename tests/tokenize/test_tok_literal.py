"""Literal bodies everywhere (issue #15 items 1-3): special and added-token strings inside any body are plain
text in TITO, offline and server-side assembly, on every tokenizer (local families and foreign ones); only the
chat template's structure yields control ids; the caller's tokenizer state is neither read nor changed; threads
can share a tokenizer; no placeholder can be broken by input."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openenv_echo.roles import Role
from openenv_echo.tokenization import (
    TitoBuilder,
    fragment_codec,
    segment_tokens,
    tokenize_offline,
    tokenize_trajectory,
)
from openenv_echo.tokenizer_identity import tokenizer_fingerprint
from openenv_echo.trajectory import ChatMessage, ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import Segment

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FILLER = ["", "x", " a ", "\n", "ok\n", "日本", "\ue000", "\ue000\ue000\ue0011\ue001", "OEEsentinel", "  "]


def _added_strings(tok: Any) -> list[str]:
    return sorted(t.content for t in tok.backend_tokenizer.get_added_tokens_decoder().values())


def _bodies(tok: Any) -> st.SearchStrategy[str]:
    """Random text that embeds the tokenizer's special/added-token strings, alone, glued or repeated."""
    piece = st.sampled_from(_added_strings(tok)) | st.sampled_from(FILLER) | st.text(max_size=6)
    return st.lists(piece, min_size=1, max_size=5).map("".join)


def _conversation(tok: Any) -> st.SearchStrategy[dict[str, Any]]:
    body = _bodies(tok)
    seg = st.tuples(st.sampled_from([Role.ENV_OUTPUT, Role.WARNING, Role.CONTEXT]), body).map(
        lambda t: Segment(role=t[0], text=t[1])
    )
    return st.fixed_dictionaries(
        {
            "system": body,
            "reset": st.lists(seg, max_size=2),
            "steps": st.lists(st.tuples(body, st.lists(seg, min_size=1, max_size=3)), min_size=1, max_size=3),
        }
    )


def _trajectory(conv: dict[str, Any], neutral: bool = False) -> Trajectory:
    def t(text: str) -> str:
        return "x" if neutral else text

    def segs(ss: list[Segment]) -> list[Segment]:
        return [Segment(role=s.role, text=t(s.text)) for s in ss]

    return Trajectory(
        messages=[ChatMessage(role="system", content=t(conv["system"]))],
        reset=ObservationRecord(segments=segs(conv["reset"])),
        steps=[
            StepRecord(action={}, action_text=t(a), observation=ObservationRecord(segments=segs(o)))
            for a, o in conv["steps"]
        ],
    )


def _check_literal(tok: Any, tt: Any, neutral: Any) -> None:
    codec = fragment_codec(tok)
    ids, roles = tt.input_ids, tt.role_ids
    control = codec.added_ids - {codec.unk_id}
    special = codec.special_ids - {codec.unk_id}
    # observation bodies never hold an added token (special or not; unknown text is the model's unk)
    for role in (Role.ENV_OUTPUT, Role.WARNING):
        assert not set(ids[roles == role.code].tolist()) & control
    # a special token is context, except the end-of-turn that closes an action (the model emits it)
    for t in np.flatnonzero(np.isin(ids, list(special))):
        if roles[t] != Role.CONTEXT.code:
            assert roles[t] == Role.ACTION.code and (t + 1 == len(ids) or roles[t + 1] != Role.ACTION.code), t
    # only the template's structure yields special ids: the same conversation with neutral bodies has the same
    assert [i for i in ids.tolist() if i in special] == [i for i in neutral.input_ids.tolist() if i in special]


@SETTINGS
@given(data=st.data())
def test_tito_bodies_are_literal(stable_any: Any, data: st.DataObject) -> None:
    tok = stable_any
    conv = data.draw(_conversation(tok))
    tt = tokenize_trajectory(_trajectory(conv), tok)
    _check_literal(tok, tt, tokenize_trajectory(_trajectory(conv, neutral=True), tok))
    codec = fragment_codec(tok)
    lossless = codec.unk_id not in tt.input_ids  # a vocabulary without byte fallback maps unknown text to unk
    for role in (Role.ENV_OUTPUT, Role.WARNING) if lossless else ():  # bodies decode to exactly their text
        want = "".join(s.text for ss in [conv["reset"], *[o for _, o in conv["steps"]]] for s in ss if s.role is role)
        assert tt.role_text(tok, role) == want
    # server-side token ids are the same literal encodings
    for _, obs in conv["steps"]:
        server = segment_tokens(tok, obs)
        assert server.ids == [i for s in obs for i in codec.encode_body(s.text)]
        assert not set(server.ids) & (codec.added_ids - {codec.unk_id})


@pytest.mark.filterwarnings("ignore:the chat template rewrote message content")
@SETTINGS
@given(data=st.data())
def test_offline_bodies_are_literal(every_tok: Any, data: st.DataObject) -> None:
    tok = every_tok
    conv = data.draw(_conversation(tok))
    tt = tokenize_offline(_trajectory(conv), tok)
    _check_literal(tok, tt, tokenize_offline(_trajectory(conv, neutral=True), tok))
    assert tt.obs_count == _bodies_after_first_action(tt.role_ids)  # |O|


def test_unigram_vocabulary_cannot_spell_a_control_piece(foreign_toks: dict[str, Any]) -> None:
    tok = foreign_toks["unigram"]
    codec = fragment_codec(tok)
    added = _added_strings(tok)
    assert added  # the vocabulary has control pieces to try
    respelled = 0
    for s in added:
        plain = codec.body.encode(s, add_special_tokens=False)  # the model alone, specials disabled
        ids = codec.encode_body(s)
        assert not set(ids) & (codec.added_ids - {codec.unk_id}) and codec.decode(ids) == s
        if set(plain.ids) & codec.added_ids:  # the Unigram model does pick the control piece: re-spelled
            assert ids != plain.ids
            respelled += 1
    assert respelled  # the hazard is real for this vocabulary, so the re-spelling above was exercised


def test_action_text_keeps_model_added_tokens_but_not_specials(foreign_toks: dict[str, Any]) -> None:
    tok = foreign_toks["bytebpe"]
    codec = fragment_codec(tok)
    out = tok.convert_tokens_to_ids("[OUT]")
    end = tok.convert_tokens_to_ids("<|end|>")
    assert out in codec.encode_action("[OUT] <|end|>") and end not in codec.encode_action("[OUT] <|end|>")
    assert out not in codec.encode_body("[OUT]") and end not in codec.encode_body("<|end|>")


# -- caller's tokenizer state (item 2) -----------------------------------------------------------------------


def _state_sample(tok: Any) -> tuple[list[int], list[int], list[int], str]:
    traj = Trajectory(
        messages=[ChatMessage(role="system", content="sys <|im_end|> <|eot_id|> <end_of_turn> " * 8)],
        steps=[
            StepRecord(
                action={},
                action_text="ls <|end|>",
                observation=ObservationRecord(segments=[Segment(role=Role.ENV_OUTPUT, text="out </s> " * 40)]),
            )
        ],
    )
    a = tokenize_trajectory(traj, tok)
    b = tokenize_offline(traj, tok)
    server = segment_tokens(tok, traj.steps[0].observation.segments)
    return a.input_ids.tolist() + a.role_ids.tolist(), b.input_ids.tolist(), server.ids, tokenizer_fingerprint(tok)


def test_ids_do_not_depend_on_the_callers_tokenizer_settings(stable_any: Any) -> None:
    tok = stable_any
    before = _state_sample(tok)
    backend = tok.backend_tokenizer
    saved = (tok.padding_side, tok.truncation_side, backend.encode_special_tokens)
    try:
        tok.padding_side, tok.truncation_side = "left", "left"
        tok.split_special_tokens = True
        backend.encode_special_tokens = True
        backend.enable_truncation(max_length=5)
        backend.enable_padding(length=4096, pad_id=0)
        assert _state_sample(tok) == before
    finally:
        tok.padding_side, tok.truncation_side, backend.encode_special_tokens = saved
        tok.split_special_tokens = False
        backend.no_truncation()
        backend.no_padding()
    assert _state_sample(tok) == before


def test_the_callers_tokenizer_is_not_changed(toks: dict[str, Any]) -> None:
    from openenv_echo.tokenization.local_tokenizers import _load_saved

    tok = toks["qwen"]
    fresh = _load_saved(__import__("pathlib").Path(tok.init_kwargs.get("name_or_path") or tok.name_or_path))
    snapshot = (dict(vars(fresh)), fresh.backend_tokenizer.to_str(), fresh.backend_tokenizer.encode_special_tokens)
    _state_sample(fresh)
    assert (dict(vars(fresh)), fresh.backend_tokenizer.to_str(), fresh.backend_tokenizer.encode_special_tokens) == (
        snapshot
    )


def test_threads_sharing_a_tokenizer_get_the_same_ids(stable_any: Any) -> None:
    tok = stable_any
    want = _state_sample(tok)
    got: list[Any] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                got.append(_state_sample(tok))
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == 30 and all(g == want for g in got)


# -- placeholders (item 3) -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["\ue000", "\ue000" * 5 + "0\ue001", "OEEsentinel", "OEEsentinelS", "\ue0010\ue001"])
def test_no_input_can_break_a_placeholder(stable_any: Any, text: str) -> None:
    tok = stable_any
    traj = Trajectory(
        messages=[ChatMessage(role="system", content=text), ChatMessage(role="user", content=text * 2)],
        reset=ObservationRecord(segments=[Segment(role=Role.ENV_OUTPUT, text=text)]),
        steps=[
            StepRecord(
                action={},
                action_text=text,
                observation=ObservationRecord(segments=[Segment(role=Role.ENV_OUTPUT, text=text)]),
            )
        ],
    )
    body = fragment_codec(tok).encode_body(text)
    tt = tokenize_trajectory(traj, tok)
    assert tt.input_ids[tt.role_ids == Role.ENV_OUTPUT.code].tolist() == body * 2
    off = tokenize_offline(traj, tok)
    env = off.input_ids[off.role_ids == Role.ENV_OUTPUT.code].tolist()
    assert 0 < len(env) <= 2 * len(body) and off.stats["content_rewritten"] == 0
    b = TitoBuilder(tok)
    b.start([{"role": "system", "content": text}], reset=[Segment(role=Role.ENV_OUTPUT, text=text)])


def _bodies_after_first_action(role_ids: np.ndarray) -> int:
    """|O| written out: env_output + warning tokens after the first action token."""
    actions = np.flatnonzero(role_ids == 1)
    return 0 if actions.size == 0 else int(np.isin(role_ids[actions[0] + 1 :], [2, 3]).sum())

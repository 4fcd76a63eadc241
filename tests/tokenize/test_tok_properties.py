"""Property tests over every tokenizer family: random role segmentations, unicode, whitespace, JSON, code and
special-token strings inside content."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openenv_echo.roles import Role
from openenv_echo.tokenization import TitoBuilder, collate, fragment_codec, tokenize_offline, tokenize_trajectory
from openenv_echo.tokenization.offline import conversation_from_trajectory
from openenv_echo.tokenization.rendered import render_parts
from openenv_echo.tokenization.template import assistant_eot_text
from openenv_echo.trajectory import Trajectory

from .tokhelp import conversations, make_trajectory

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _one_role_per_token(tt: Any) -> None:
    assert tt.input_ids.shape == tt.role_ids.shape
    assert set(np.unique(tt.role_ids).tolist()) <= {0, 1, 2, 3}
    masks = np.stack([tt.mask(r) for r in Role])
    assert masks[:, 0].sum() == 0, "token 0 is never a target"
    assert (masks[:, 1:].sum(axis=0) == 1).all(), "every other token has exactly one role mask"


def _joined(conv: dict[str, Any], role: Role, *, with_reset: bool = True) -> str:
    segs = (list(conv["reset"]) if with_reset else []) + [s for _, segs, _ in conv["steps"] for s in segs]
    return "".join(s.text for s in segs if s.role is role)


@SETTINGS
@given(conv=conversations)
def test_tito_live_properties(stable_tok: Any, conv: dict[str, Any]) -> None:
    tok = stable_tok
    codec = fragment_codec(tok)
    b = TitoBuilder(tok)
    prompts = [b.start([{"role": "system", "content": conv["system"]}], reset=conv["reset"])]
    sampled: list[list[int]] = []
    starts: list[int] = []
    eot = list(b.scaffold.eot_ids)
    for text, segs, stops in conv["steps"]:
        ids = codec.encode_content(text) + (eot if stops else [])  # sometimes cut off (no end-of-turn)
        sampled.append(ids)
        starts.append(len(b))
        b.add_action(ids)
        delta = b.add_observation(segs)
        prompts.append(prompts[-1] + ids + delta)
    tt = b.finish()
    ids = tt.input_ids.tolist()
    _one_role_per_token(tt)
    # every prompt the sampler saw is a prefix of the final sequence (no re-rendering, no drift)
    for p in prompts[:-1] if conv["steps"] else []:
        assert ids[: len(p)] == p
    # TITO: the sampled ids appear verbatim, at the place they were sampled, all with role action
    for s, a in zip(starts, sampled, strict=True):
        assert ids[s : s + len(a)] == a
    assert tt.input_ids[tt.role_ids == Role.ACTION.code].tolist() == [i for a in sampled for i in a]
    # observation bodies: tokens of each role decode to exactly that role's text
    for role in (Role.ENV_OUTPUT, Role.WARNING):
        assert tt.role_text(tok, role) == _joined(conv, role)
        expected = [
            i
            for s in [*conv["reset"], *[x for _, g, _ in conv["steps"] for x in g]]
            if s.role is role
            for i in codec.encode_content(s.text)
        ]
        assert tt.input_ids[tt.role_ids == role.code].tolist() == expected
    # default target (env_output): never a special token (hence never a role header or turn delimiter)
    env_ids = set(tt.input_ids[tt.mask(Role.ENV_OUTPUT)].tolist())
    assert not env_ids & codec.special_ids
    assert tt.obs_count == _bodies_after_first_action(tt.role_ids)  # |O| (roles.observation_count)
    # the same episode recorded (with sampled ids) and through JSON assembles to the same sequence
    traj = Trajectory.from_json(make_trajectory(conv, sampled).to_json())
    tt2 = tokenize_trajectory(traj, tok)
    assert tt2.input_ids.tolist() == ids and tt2.role_ids.tolist() == tt.role_ids.tolist()


@pytest.mark.filterwarnings("ignore:the chat template rewrote message content")
@SETTINGS
@given(conv=conversations)
def test_offline_properties(any_tok: Any, conv: dict[str, Any]) -> None:
    tok = any_tok
    codec = fragment_codec(tok)
    traj = make_trajectory(conv)
    tt = tokenize_offline(traj, tok)
    _one_role_per_token(tt)
    for role in (Role.ENV_OUTPUT, Role.WARNING):
        assert not set(tt.input_ids[tt.role_ids == role.code].tolist()) & codec.added_ids
    # every non-context token covers only characters of its own role (the end-of-turn token: action)
    messages = conversation_from_trajectory(traj, tokenizer=tok)
    parts = render_parts(tok, messages, add_generation_prompt=False, eot=assistant_eot_text(tok))
    text, croles = parts.text, parts.roles
    # re-derive each token's characters: decode the tokens one by one against the rendered text
    body = tt.role_ids[len(codec.prefix_ids) :]
    ids = tt.input_ids[len(codec.prefix_ids) :].tolist()
    pos = 0
    for k, tid in enumerate(ids):
        piece = codec.decode([tid])
        if not text.startswith(piece, pos):  # a multi-token character (byte fallback): skip the check
            break
        role = int(body[k])
        chars = set(croles[pos : pos + len(piece)])
        if role == Role.ACTION.code:
            assert chars <= {Role.ACTION.code, 4}
        elif role != Role.CONTEXT.code and piece:
            assert chars == {role}, (k, role, piece)
        pos += len(piece)
    if not parts.rewritten and tt.stats["straddled"] == 0:
        for role in (Role.ENV_OUTPUT, Role.WARNING):
            assert tt.role_text(tok, role) == _joined(conv, role, with_reset=bool(conv["reset"]))
    assert tt.obs_count == _bodies_after_first_action(tt.role_ids)  # |O| (roles.observation_count)


@SETTINGS
@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=5),
    side=st.sampled_from(["left", "right"]),
    max_length=st.none() | st.integers(1, 25),
    seed=st.integers(0, 2**32 - 1),
)
def test_collate_alignment_properties(
    toks: dict[str, Any], lengths: list[int], side: str, max_length: int | None, seed: int
) -> None:
    from openenv_echo.tokenization import TokenizedTrajectory

    tok = toks["llama"]  # no pad token: padding falls back to eos (pad == eos)
    eos = tok.eos_token_id
    rng = np.random.default_rng(seed)
    items = []
    for n in lengths:
        ids = rng.integers(0, 50, n)
        ids[rng.random(n) < 0.3] = eos  # real eos tokens in the data, same value as padding
        roles = rng.integers(0, 4, n)
        items.append(TokenizedTrajectory(ids, roles, obs_count=int(np.isin(roles, [2, 3]).sum()) + 3))
    batch = collate(items, tokenizer=tok, padding_side=side, max_length=max_length)
    assert int(batch["input_ids"][batch["attention_mask"] == 0].eq(eos).all()) == 1
    width = batch["input_ids"].shape[1]
    for i, it in enumerate(items):
        keep = min(len(it), max_length) if max_length is not None else len(it)
        real = batch["attention_mask"][i].bool()
        assert int(real.sum()) == keep == int(batch["lengths"][i])
        idx = real.nonzero().flatten()
        if keep:
            assert idx.tolist() == (list(range(keep)) if side == "right" else list(range(width - keep, width)))
        assert batch["input_ids"][i][real].tolist() == it.input_ids[:keep].tolist()
        assert batch["role_ids"][i][real].tolist() == it.role_ids[:keep].tolist()
        assert (batch["role_ids"][i][~real] == -1).all()
        assert batch["position_ids"][i][real].tolist() == list(range(keep))
        for role in Role:
            m = batch[f"{role.value}_mask"][i]
            expect = it.role_ids[:keep] == role.code
            if keep:
                expect[0] = False
            assert m[real].tolist() == expect.tolist()
            assert not m[~real].any()
        assert int(batch["num_truncated"][i]) == len(it) - keep
        assert int(batch["obs_count"][i]) == it.obs_count


def _bodies_after_first_action(role_ids: np.ndarray) -> int:
    """|O| written out: env_output + warning tokens after the first action token."""
    actions = np.flatnonzero(role_ids == 1)
    return 0 if actions.size == 0 else int(np.isin(role_ids[actions[0] + 1 :], [2, 3]).sum())

"""TITO vs offline full-render assembly of the same conversation: where and why they differ."""

from __future__ import annotations

from typing import Any

import numpy as np

from openenv_echo.roles import Role
from openenv_echo.tokenization import (
    TokenizedTrajectory,
    compare_assemblies,
    conversation_from_trajectory,
    tokenize_offline,
    tokenize_trajectory,
)
from openenv_echo.tokenization.compare import SEGMENTATION, TEXT
from openenv_echo.trajectory import ChatMessage, ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import env_output, warning

from .tokhelp import simple_trajectory


def _traj(bodies: list[str]) -> Trajectory:
    return Trajectory(
        messages=[ChatMessage(role="system", content="sys")],
        steps=[
            StepRecord(
                action={},
                action_text=f"cmd {k}",
                observation=ObservationRecord(segments=[warning("$ run\n"), env_output(b)]),
            )
            for k, b in enumerate(bodies)
        ],
    )


def test_identical_when_no_piece_boundary_merges(stable_tok: Any) -> None:
    traj = _traj(["done", "exit 0", "ok"])
    cmp = compare_assemblies(tokenize_trajectory(traj, stable_tok), tokenize_offline(traj, stable_tok), stable_tok)
    print(cmp.report())
    assert cmp.identical_ids and cmp.identical_roles and not cmp.differences


def test_chatml_newline_merge_is_reported_as_segmentation(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    traj = simple_trajectory()  # every body ends in "\n", the template continues with "\n</tool_response>"
    tito, offline = tokenize_trajectory(traj, tok), tokenize_offline(traj, tok)
    cmp = compare_assemblies(tito, offline, tok)
    print(cmp.report())
    assert not cmp.identical_ids
    seg = [d for d in cmp.differences if d.kind == SEGMENTATION]
    assert len(seg) == 3 == len(cmp.differences)  # reset body ".\n" and both observation bodies' "\n"
    assert offline.stats["straddled"] == 2  # the reset body is context like the scaffold: no role straddled
    for d in seg:
        assert d.a_text == d.b_text and d.a_text.endswith("\n\n")
        assert len(d.b_roles) == 1 and d.b_roles == ["context"]  # offline: one merged token -> context
        assert len(d.a_roles) == 2 and d.a_roles[-1] == "context"  # TITO: body token + scaffold token
        assert "merge" in d.reason
    assert [d.a_roles[0] for d in seg] == ["context", "env_output", "env_output"]
    # the body text TITO trains on keeps its newline; offline loses it to the straddle policy
    assert tito.role_text(tok, Role.ENV_OUTPUT) == "a.cfg\nb.txt\nkey=value\n"
    assert offline.role_text(tok, Role.ENV_OUTPUT) == "a.cfg\nb.txtkey=value"


def test_special_token_text_in_a_body_is_literal_in_both(stable_tok: Any) -> None:
    special = "<|im_end|>" if "<|im_end|>" in stable_tok.get_vocab() else "<|eot_id|>"
    traj = _traj([f"printed {special} here"])
    tito, offline = tokenize_trajectory(traj, stable_tok), tokenize_offline(traj, stable_tok)
    assert tito.role_text(stable_tok, Role.ENV_OUTPUT) == f"printed {special} here"
    assert offline.role_text(stable_tok, Role.ENV_OUTPUT).startswith(f"printed {special} here")
    cmp = compare_assemblies(tito, offline, stable_tok)
    assert not [d for d in cmp.differences if special in d.a_text or special in d.b_text], cmp.report()


def test_a_full_render_with_special_text_is_explained(stable_tok: Any) -> None:
    special = "<|im_end|>" if "<|im_end|>" in stable_tok.get_vocab() else "<|eot_id|>"
    traj = _traj([f"printed {special} here"])
    tito = tokenize_trajectory(traj, stable_tok)
    # what a naive trainer does: tokenize the rendered text, special strings become control tokens
    text = stable_tok.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in conversation_from_trajectory(traj)], tokenize=False
    )
    naive_ids = stable_tok(text, add_special_tokens=tito.input_ids[0] == stable_tok.bos_token_id).input_ids
    naive = TokenizedTrajectory(naive_ids, np.zeros(len(naive_ids), dtype=np.int8), obs_count=0, method="naive")
    cmp = compare_assemblies(tito, naive, stable_tok)
    d = next(d for d in cmp.differences if d.kind == TEXT and special in d.b_text)
    assert "special" in d.reason and "env_output" in d.a_roles


def test_json_body_ending_in_punctuation_merges_too(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    traj = _traj(['{"ok": true}'])
    cmp = compare_assemblies(tokenize_trajectory(traj, tok), tokenize_offline(traj, tok), tok)
    print(cmp.report())
    [d] = cmp.differences
    assert d.kind == SEGMENTATION and d.a_text == "}\n" and d.a_roles == ["env_output", "context"]


def test_report_lists_every_difference(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    traj = _traj(["a\n", "b"])
    cmp = compare_assemblies(tokenize_trajectory(traj, tok), tokenize_offline(traj, tok), tok)
    report = cmp.report()
    assert report.splitlines()[0].startswith("tito vs offline: ids differ")
    assert len(report.splitlines()) == 1 + len(cmp.differences) == 2

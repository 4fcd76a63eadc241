"""RFC 010 interoperability (issue #13 item 5): our trajectories and tokenized records to and from RFC 010's flat
``Trajectory(segments, reward, task_prompt)`` and its boolean ``action_mask``/``obs_mask``/``warning_mask``,
with RFC 010's ``world_loss_target`` meanings (``env_only``; ``all`` = env_output + warning)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from openenv_echo.roles import Role
from openenv_echo.tokenization import tokenize_trajectory
from openenv_echo.tokenization.fragment_encoding import fragment_codec
from openenv_echo.tokenization.rfc010 import (
    Rfc010Trajectory,
    from_rfc010_masks,
    from_rfc010_trajectory,
    to_rfc010_masks,
    to_rfc010_trajectory,
)

from .tokhelp import simple_trajectory


def test_trajectory_round_trip() -> None:
    traj = simple_trajectory()
    rfc = to_rfc010_trajectory(traj)
    assert rfc.task_prompt == "You are a careful shell agent."
    assert [s.role for s in rfc.segments] == [
        "context",
        "context",
        "action",
        "warning",
        "env_output",
        "action",
        "warning",
        "env_output",
    ]
    assert rfc.reward == traj.total_reward == 1.0
    back = from_rfc010_trajectory(rfc)
    assert [m.content for m in back.messages] == ["You are a careful shell agent."]
    assert back.reset is not None and back.reset.segments == traj.reset.segments
    assert [s.action_text for s in back.steps] == [s.action_text for s in traj.steps]
    assert [s.observation.segments for s in back.steps] == [s.observation.segments for s in traj.steps]
    assert back.total_reward == 1.0 and back.done
    # and RFC 010's structure as plain dicts (JSON) converts the same way
    again = to_rfc010_trajectory(from_rfc010_trajectory(rfc.to_dict()))
    assert again.to_dict()["segments"] == rfc.to_dict()["segments"] and again.reward == rfc.reward


def test_rfc010_trajectory_without_task_or_actions() -> None:
    rfc = {"segments": [{"role": "env_output", "text": "boot\n"}], "reward": 0.0, "task_prompt": ""}
    t = from_rfc010_trajectory(rfc)
    assert t.messages == [] and t.steps == [] and t.reset is not None and t.reset.text == "boot\n"
    with pytest.raises(ValueError, match="segments"):
        from_rfc010_trajectory({"reward": 1.0})
    with pytest.raises(ValueError):
        from_rfc010_trajectory(Rfc010Trajectory([]).to_dict() | {"segments": [{"role": "narrator", "text": "x"}]})


@pytest.mark.parametrize("target", ["env_only", "all"])
def test_masks_both_ways(stable_tok: Any, target: str) -> None:
    tok = stable_tok
    tt = tokenize_trajectory(simple_trajectory(), tok)
    m = to_rfc010_masks(tt, world_loss_target=target)
    assert set(m) == {"input_ids", "action_mask", "obs_mask", "warning_mask"}
    assert all(v.dtype == torch.bool for k, v in m.items() if k != "input_ids") and m["input_ids"].dtype == torch.int64
    codec = fragment_codec(tok)
    env_only = m["obs_mask"] & ~m["warning_mask"]
    assert codec.decode(m["input_ids"][env_only].tolist()) == "a.cfg\nb.txt\nkey=value\n"
    assert codec.decode(m["input_ids"][m["warning_mask"]].tolist()) == "$ ls -la\n$ cat a.cfg\n"
    assert bool((m["obs_mask"] & m["warning_mask"]).any()) == (target == "all")  # RFC 010: all = env + warning
    assert not (m["action_mask"] & m["obs_mask"]).any()
    back = from_rfc010_masks(
        m["input_ids"], m["action_mask"], m["obs_mask"], m["warning_mask"], world_loss_target=target
    )
    assert np.array_equal(back.input_ids, tt.input_ids) and np.array_equal(back.role_ids, tt.role_ids)
    assert back.obs_count == tt.obs_count


def test_bad_masks_are_refused() -> None:
    ids = [1, 2, 3]
    with pytest.raises(ValueError, match="one role"):
        from_rfc010_masks(ids, [1, 0, 0], [1, 0, 0], [0, 0, 0])
    with pytest.raises(ValueError, match="env_only"):
        from_rfc010_masks(ids, [0, 0, 0], [0, 1, 0], [0, 1, 0])
    with pytest.raises(ValueError, match="length"):
        from_rfc010_masks(ids, [0, 0], [0, 0, 0], [0, 0, 0])
    with pytest.raises(ValueError, match="world_loss_target"):
        from_rfc010_masks(ids, [0, 0, 0], [0, 0, 0], [0, 0, 0], world_loss_target="full_observation")
    tt = from_rfc010_masks(ids, [0, 0, 1], [0, 1, 0], [0, 1, 0], world_loss_target="all")
    assert [Role.from_code(int(c)) for c in tt.role_ids] == [Role.CONTEXT, Role.WARNING, Role.ACTION]

"""Converters to and from OpenEnv RFC 010's ECHO formats (``rfcs/0003-token-masks.md`` §11 maps the fields).

RFC 010 (OpenEnv's draft for ECHO) has two shapes:

* a flat trajectory ``Trajectory(segments=[Segment(role, text)], reward, task_prompt)``: the rollout's text in
  order, each piece with one of our four roles, no chat template;
* per-token boolean masks aligned with ``input_ids``: ``action_mask``, ``obs_mask``, ``warning_mask``, where
  ``obs_mask`` depends on ``world_loss_target``: ``"env_only"`` = ``env_output`` tokens, ``"all"`` =
  ``env_output`` + ``warning`` tokens. Its masks give each token's own role (its loss shifts them itself), so
  unlike ours they are not target-shifted and may be True at position 0.

``to_rfc010_trajectory`` / ``from_rfc010_trajectory`` convert our recorded ``Trajectory``; ``to_rfc010_masks`` /
``from_rfc010_masks`` convert a ``TokenizedTrajectory``. The input side accepts RFC 010's own dataclasses or the
same structure as dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..roles import Role, observation_count
from ..trajectory import ChatMessage, ObservationRecord, StepRecord, Trajectory
from ..wire import Segment
from .tokenized import TokenizedTrajectory

if TYPE_CHECKING:
    import torch

WORLD_LOSS_TARGETS = ("env_only", "all")
"""RFC 010's words: ``env_only`` = env_output tokens; ``all`` = env_output + warning tokens."""


@dataclass
class Rfc010Segment:
    """RFC 010 ``Segment``: a contiguous run of text with one role."""

    role: str
    text: str


@dataclass
class Rfc010Trajectory:
    """RFC 010 ``Trajectory``: one rollout, segmented by role, plus its terminal reward."""

    segments: list[Rfc010Segment]
    reward: float = 0.0
    task_prompt: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "segments": [{"role": s.role, "text": s.text} for s in self.segments],
            "reward": self.reward,
            "task_prompt": self.task_prompt,
            "meta": dict(self.meta),
        }


def _get(obj: Any, key: str, default: Any = None) -> Any:
    return obj.get(key, default) if isinstance(obj, Mapping) else getattr(obj, key, default)


def to_rfc010_trajectory(traj: Trajectory, *, fallback_action_text: str = "json") -> Rfc010Trajectory:
    """Our trajectory as RFC 010's: the initial messages' text is ``task_prompt`` and the first ``context``
    segment(s); then the reset observation's segments; then per step the action text (``action``) and the
    observation's segments. ``reward`` is the episode's total reward. Chat roles and the template are not part
    of RFC 010's flat trajectory; ``meta`` keeps the episode id and env name."""
    from .tito import action_text

    segs: list[Rfc010Segment] = [Rfc010Segment(Role.CONTEXT.value, m.content) for m in traj.messages if m.content]
    if traj.reset is not None:
        segs += [Rfc010Segment(s.role.value, s.text) for s in traj.reset.segments if s.text]
    for step in traj.steps:
        segs.append(Rfc010Segment(Role.ACTION.value, action_text(step, fallback_action_text)))
        segs += [Rfc010Segment(s.role.value, s.text) for s in step.observation.segments if s.text]
    return Rfc010Trajectory(
        segments=segs,
        reward=traj.total_reward,
        task_prompt="\n".join(m.content for m in traj.messages),
        meta={"episode_id": traj.episode_id, "env_name": traj.env_name},
    )


def from_rfc010_trajectory(rfc: Any, *, task_role: str = "user") -> Trajectory:
    """RFC 010's trajectory (its dataclass or a dict) as ours: ``task_prompt`` becomes one initial message (chat
    role ``task_role``) unless the segments already start with it as ``context``; segments before the first
    action form the reset observation; each ``action`` segment is a step whose observation is the segments up to
    the next action; the reward goes to the last step."""
    raw = _get(rfc, "segments")
    if raw is None:
        raise ValueError("not an RFC 010 trajectory: no 'segments'")
    segs = [Segment(role=Role(_get(s, "role")), text=str(_get(s, "text"))) for s in raw]
    task = str(_get(rfc, "task_prompt", "") or "")
    if task and segs and segs[0].role is Role.CONTEXT and segs[0].text == task:
        segs = segs[1:]
    messages = [ChatMessage(role=task_role, content=task)] if task else []
    before: list[Segment] = []
    steps: list[StepRecord] = []
    for s in segs:
        if s.role is Role.ACTION:
            steps.append(StepRecord(action={"text": s.text}, action_text=s.text, observation=ObservationRecord()))
        elif steps:
            steps[-1].observation.segments.append(s)
        else:
            before.append(s)
    reward = _get(rfc, "reward")
    if steps and reward is not None:
        steps[-1].observation.reward = float(reward)
        steps[-1].observation.done = True
    meta = dict(_get(rfc, "meta", None) or {})
    return Trajectory(
        episode_id=meta.get("episode_id"),
        env_name=meta.get("env_name"),
        messages=messages,
        reset=ObservationRecord(segments=before) if before else None,
        steps=steps,
    )


def _target(world_loss_target: str) -> str:
    if world_loss_target not in WORLD_LOSS_TARGETS:
        raise ValueError(f"world_loss_target must be one of {WORLD_LOSS_TARGETS} (RFC 010), got {world_loss_target!r}")
    return world_loss_target


def to_rfc010_masks(tt: TokenizedTrajectory, *, world_loss_target: str = "env_only") -> dict[str, torch.Tensor]:
    """RFC 010's ``tokenize_trajectory`` output for one sequence: 1-D ``input_ids`` (int64) and boolean
    ``action_mask``, ``obs_mask``, ``warning_mask`` giving each token's own role (not shifted)."""
    import torch

    roles = tt.role_ids
    obs_codes = [Role.ENV_OUTPUT.code] + ([Role.WARNING.code] if _target(world_loss_target) == "all" else [])
    return {
        "input_ids": torch.from_numpy(tt.input_ids.copy()),
        "action_mask": torch.from_numpy(roles == Role.ACTION.code),
        "obs_mask": torch.from_numpy(np.isin(roles, obs_codes)),
        "warning_mask": torch.from_numpy(roles == Role.WARNING.code),
    }


def from_rfc010_masks(
    input_ids: Sequence[int] | Any,
    action_mask: Sequence[bool] | Any,
    obs_mask: Sequence[bool] | Any,
    warning_mask: Sequence[bool] | Any,
    *,
    world_loss_target: str = "env_only",
    method: str = "rfc010",
) -> TokenizedTrajectory:
    """A ``TokenizedTrajectory`` from RFC 010's per-token masks (tensors, arrays or lists). ``action`` where
    ``action_mask``, ``warning`` where ``warning_mask``, ``env_output`` where ``obs_mask`` and not a warning,
    else ``context``. Overlapping masks that RFC 010 keeps disjoint are refused."""
    ids = np.asarray(_numpy(input_ids), dtype=np.int64).reshape(-1)
    a, o, w = (np.asarray(_numpy(m), dtype=bool).reshape(-1) for m in (action_mask, obs_mask, warning_mask))
    if not (len(a) == len(o) == len(w) == len(ids)):
        raise ValueError(f"masks and input_ids differ in length: {len(ids)}, {len(a)}, {len(o)}, {len(w)}")
    if (a & (o | w)).any():
        raise ValueError("action_mask overlaps obs_mask/warning_mask: a token has one role")
    if _target(world_loss_target) == "env_only" and (o & w).any():
        raise ValueError("with world_loss_target='env_only' obs_mask must not cover warning tokens")
    roles = np.full(len(ids), Role.CONTEXT.code, dtype=np.int8)
    roles[o & ~w] = Role.ENV_OUTPUT.code
    roles[w] = Role.WARNING.code
    roles[a] = Role.ACTION.code
    obs = int(observation_count(roles))
    return TokenizedTrajectory(input_ids=ids, role_ids=roles, obs_count=obs, method=method)


def _numpy(x: Any) -> Any:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else x

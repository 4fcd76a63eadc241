"""Shared builders and hypothesis strategies for the tokenization tests."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from openenv_echo.roles import Role
from openenv_echo.trajectory import ChatMessage, ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import Segment, context, env_output, warning

SPECIAL_STRINGS = [
    "<|im_end|>",
    "<|im_start|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<s>",
    "</s>",
    "<think>",
    "</think>",
    "<tool_response>",
    "\ue000",
]
CODE = [
    "def f(x):\n    return x + 1\n",
    "for i in range(10):\n\tprint(i)\n",
    "if (a && b) { x++; }",
    "SELECT * FROM t WHERE id = 3;",
    "$ ls -la /tmp\n",
    "total 0\n",
    '  File "x.py", line 3\n',
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
piece = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=24),
    st.from_regex(r"[ \t\n\r]{1,8}", fullmatch=True),
    json_values.map(lambda v: json.dumps(v, ensure_ascii=False)),
    st.sampled_from(CODE),
    st.sampled_from(SPECIAL_STRINGS),
    st.sampled_from(["hello", " world", "\n", "\n\n", "ls", "a.txt\nb.txt\n", "error: not found", "日本語", "🚀"]),
)
texts = st.lists(piece, max_size=4).map("".join)
obs_segments = st.lists(
    st.tuples(st.sampled_from([Role.ENV_OUTPUT, Role.ENV_OUTPUT, Role.WARNING, Role.CONTEXT]), texts).map(
        lambda t: Segment(role=t[0], text=t[1])
    ),
    max_size=4,
)
conversations = st.fixed_dictionaries(
    {
        "system": texts,
        "reset": obs_segments,
        "steps": st.lists(st.tuples(texts, obs_segments, st.booleans()), max_size=4),
    }
)


def make_trajectory(conv: dict[str, Any], action_ids: list[list[int]] | None = None) -> Trajectory:
    steps = []
    for k, (text, segs, _) in enumerate(conv["steps"]):
        steps.append(
            StepRecord(
                action={"message": text},
                action_text=text,
                action_token_ids=None if action_ids is None else action_ids[k],
                observation=ObservationRecord(segments=segs, reward=0.5),
            )
        )
    return Trajectory(
        episode_id="ep",
        messages=[ChatMessage(role="system", content=conv["system"])],
        reset=ObservationRecord(segments=conv["reset"]),
        steps=steps,
    )


def simple_trajectory() -> Trajectory:
    """A small terminal-like episode used by example-based tests."""
    return Trajectory(
        episode_id="demo",
        messages=[ChatMessage(role="system", content="You are a careful shell agent.")],
        reset=ObservationRecord(segments=[context("Task: find the config file.\n")]),
        steps=[
            StepRecord(
                action={"command": "ls"},
                action_text="ls -la",
                observation=ObservationRecord(
                    segments=[warning("$ ls -la\n"), env_output("a.cfg\nb.txt\n")], reward=0.0
                ),
            ),
            StepRecord(
                action={"command": "cat a.cfg"},
                action_text="cat a.cfg",
                observation=ObservationRecord(
                    segments=[warning("$ cat a.cfg\n"), env_output("key=value\n")], reward=1.0, done=True
                ),
            ),
        ],
    )

"""Trajectory JSONL: lossless round trip, and crash safety of the writer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openenv_echo import (
    ChatMessage,
    ObservationRecord,
    ObservationTokens,
    Role,
    Segment,
    StepRecord,
    TokenizerIdentity,
    Trajectory,
    TrajectoryWriter,
    read_trajectories,
)

text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)  # any unicode but lone surrogates
json_leaf = (
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | text
)
json_value = st.recursive(
    json_leaf, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text, kids, max_size=3), max_leaves=8
)
segments = st.lists(st.builds(Segment, role=st.sampled_from(list(Role)), text=text), max_size=5)
reward = st.none() | st.floats(allow_nan=False, allow_infinity=False, width=64)


@st.composite
def observation_records(draw) -> ObservationRecord:
    segs = draw(segments)
    tokens = None
    if draw(st.booleans()):
        n = draw(st.integers(0, 6))
        tokens = ObservationTokens(
            tokenizer=TokenizerIdentity(name=draw(text), fingerprint="ab" * 32),
            ids=draw(st.lists(st.integers(0, 2**31), min_size=n, max_size=n)),
            roles=draw(st.lists(st.sampled_from(list(Role)), min_size=n, max_size=n)),
        )
    return ObservationRecord(
        segments=segs,
        tokens=tokens,
        reward=draw(reward),
        done=draw(st.booleans()),
        metadata=draw(st.dictionaries(text, json_value, max_size=3)),
        fields=draw(st.dictionaries(text, json_value, max_size=3)),
    )


trajectories = st.builds(
    Trajectory,
    episode_id=st.none() | text,
    env_name=st.none() | text,
    messages=st.lists(st.builds(ChatMessage, role=st.sampled_from(["system", "user"]), content=text), max_size=2),
    reset=st.none() | observation_records(),
    steps=st.lists(
        st.builds(
            StepRecord,
            action=st.dictionaries(text, json_value, max_size=3),
            action_text=st.none() | text,
            action_token_ids=st.none() | st.lists(st.integers(0, 2**31), max_size=8),
            observation=observation_records(),
        ),
        max_size=4,
    ),
    metadata=st.dictionaries(text, json_value, max_size=3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trajectories)
def test_json_round_trip_is_lossless(traj: Trajectory) -> None:
    again = Trajectory.from_json(traj.to_json())
    assert again == traj
    assert again.to_json() == traj.to_json()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(trajectories, min_size=1, max_size=4))
def test_jsonl_file_round_trip(tmp_path: Path, trajs: list[Trajectory]) -> None:
    path = tmp_path / f"t{os.getpid()}_{id(trajs)}.jsonl"
    with TrajectoryWriter(path, fsync=False) as w:
        w.write_all(trajs)
    assert read_trajectories(path) == trajs
    path.unlink()


def test_torn_last_line_is_skipped_and_next_write_stays_readable(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = Trajectory(episode_id="a", steps=[])
    with TrajectoryWriter(path) as w:
        w.write(good)
    with open(path, "ab") as f:
        f.write(good.to_json().encode()[:25])  # a crash mid-line
    with pytest.warns(UserWarning, match="torn"):
        assert read_trajectories(path) == [good]
    with TrajectoryWriter(path) as w:  # a new writer starts a fresh line
        w.write(Trajectory(episode_id="b"))
    with pytest.warns(UserWarning, match="torn"):
        assert [t.episode_id for t in read_trajectories(path)] == ["a", "b"]


def test_a_corrupt_complete_line_is_an_error_not_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"not": "a trajectory"}\n')
    with pytest.raises(ValueError, match="not a valid trajectory"):
        read_trajectories(path)


WRITER = textwrap.dedent(
    """
    import sys
    from openenv_echo import Trajectory, TrajectoryWriter, StepRecord, ObservationRecord, env_output
    w = TrajectoryWriter(sys.argv[1])
    i = 0
    while True:
        obs = ObservationRecord(segments=[env_output("x" * 20000 + str(i))], reward=1.0)
        w.write(Trajectory(episode_id=f"ep{i}", steps=[StepRecord(action={"i": i}, observation=obs)] * 3))
        print(i, flush=True)
        i += 1
    """
)


def test_writer_killed_mid_episode_leaves_readable_file(tmp_path: Path) -> None:
    """SIGKILL a writer at random points, repeatedly: every episode it reported written is read back."""
    path = tmp_path / "killed.jsonl"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    acknowledged = 0
    for round_ in range(5):
        proc = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for _ in range(3 + round_):
            proc.stdout.readline()
            acknowledged += 1
        time.sleep(0.003 * round_)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        rest = proc.stdout.read().split()
        acknowledged += len(rest)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = read_trajectories(path)
        assert len(got) >= acknowledged
        assert all(len(t.steps) == 3 for t in got)

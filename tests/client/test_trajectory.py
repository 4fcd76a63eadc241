"""Trajectory JSONL: lossless round trip, and crash safety of the writer."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
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
    env_output,
    read_trajectories,
)
from openenv_echo.trajectory import EpisodeError

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


episode_errors = st.none() | st.builds(EpisodeError, type=text, message=text, code=st.none() | text)
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
    status=st.sampled_from(["done", "truncated", "cut", "abandoned"]),
    error=episode_errors,
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


def _step(i: int, size: int = 30) -> StepRecord:
    return StepRecord(
        action={"i": i}, action_text=f"a{i}", observation=ObservationRecord(segments=[env_output("x" * size + str(i))])
    )


def _journal_with_offsets(path: Path) -> tuple[list[Trajectory], list[tuple[int, str, int | str]]]:
    """Three interleaved episodes journalled the way a client does; returns them and, per record, the file size
    once it was written with what it was: (size, key, step index or "begin"/"end")."""
    trajs = [Trajectory(episode_id=f"e{k}", messages=[ChatMessage(role="system", content="s")]) for k in range(3)]
    finals: list[Trajectory] = [t.model_copy(deep=True) for t in trajs]
    for t, n in zip(finals, (2, 3, 1), strict=True):
        t.steps = [_step(i) for i in range(n)]
    finals[0].status, finals[1].status = "done", "cut"
    finals[1].error = EpisodeError(type="ConnectionLostError", message="gone")
    offsets: list[tuple[int, str, int | str]] = []
    with TrajectoryWriter(path, fsync="never") as w:
        keys = []
        for t in trajs:
            keys.append(w.begin(t))
            offsets.append((path.stat().st_size, t.episode_id or "", "begin"))
        for i in range(3):
            for k, t in enumerate(finals):
                if i < len(t.steps):
                    w.step(keys[k], i, t.steps[i])
                    offsets.append((path.stat().st_size, t.episode_id or "", i))
        for k in (0, 1):
            w.end(keys[k], finals[k])
            offsets.append((path.stat().st_size, finals[k].episode_id or "", "end"))
    return finals, offsets


def test_a_journal_cut_at_any_byte_reads_back_exactly(tmp_path: Path) -> None:
    """Every prefix of a journal rebuilds exactly the steps whose records are whole in it, never more or less."""
    path = tmp_path / "j.jsonl"
    finals, offsets = _journal_with_offsets(path)
    data = path.read_bytes()
    cut_path = tmp_path / "cut.jsonl"
    for size in range(len(data) + 1):
        cut_path.write_bytes(data[:size])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = {t.episode_id: t for t in read_trajectories(cut_path, open_episodes=True)}
            ended = {t.episode_id for t in read_trajectories(cut_path)}
        written = [(key, what) for end, key, what in offsets if end <= size]
        assert set(got) == {key for key, what in written if what == "begin"}, size
        assert ended == {key for key, what in written if what == "end"}, size
        for t in finals:
            if t.episode_id not in got:
                continue
            steps = [what for key, what in written if key == t.episode_id and isinstance(what, int)]
            rebuilt = got[t.episode_id]
            assert rebuilt.steps == t.steps[: len(steps)], size
            if t.episode_id in ended:
                assert rebuilt == t
            else:
                assert rebuilt.status == "cut" and rebuilt.error is not None and rebuilt.error.type == "JournalEnded"


def test_torn_last_record_is_ignored_and_next_writer_stays_readable(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = Trajectory(episode_id="a", steps=[_step(0)], status="done")
    with TrajectoryWriter(path) as w:
        w.write(good)
    with open(path, "ab") as f:
        f.write(b'{"kind": "begin", "key": "zz", "traj')  # a crash mid-record
    with pytest.warns(UserWarning, match="torn"):
        assert read_trajectories(path) == [good]
    with TrajectoryWriter(path) as w:  # a new writer starts a fresh line
        w.write(Trajectory(episode_id="b", status="truncated"))
    with pytest.warns(UserWarning, match="torn"):
        assert [(t.episode_id, t.status) for t in read_trajectories(path)] == [("a", "done"), ("b", "truncated")]


def test_whole_trajectory_lines_still_read(tmp_path: Path) -> None:
    """Files of one whole trajectory per line (the earlier format) read, with the status their ending implies."""
    done = Trajectory(episode_id="d", steps=[_step(0).model_copy(update={"observation": ObservationRecord(done=True)})])
    cut_short = Trajectory(episode_id="c", steps=[_step(0)])
    path = tmp_path / "old.jsonl"
    path.write_text("".join(t.model_dump_json(exclude={"status", "error"}) + "\n" for t in (done, cut_short)))
    assert [(t.episode_id, t.status) for t in read_trajectories(path)] == [("d", "done"), ("c", "abandoned")]


@pytest.mark.parametrize(
    "record, match",
    [
        ('{"not": "a trajectory"}', "not a valid journal record"),
        ('{"kind": "step", "key": "k", "index": 0, "step": {}}', "not begun"),
        ('{"kind": "hello", "key": "k"}', "not begun"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_a_corrupt_complete_record_is_an_error_not_skipped(tmp_path: Path, record: str, match: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(record + "\n")
    with pytest.raises(ValueError, match=match):
        read_trajectories(path)


def test_records_out_of_order_or_short_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        key = w.begin(Trajectory(episode_id="a"))
        w.step(key, 1, _step(1))  # step 0 missing
    with pytest.raises(ValueError, match="follows step"):
        read_trajectories(path)
    path.unlink()
    with TrajectoryWriter(path) as w:
        key = w.begin(Trajectory(episode_id="a"))
        w.end(key, Trajectory(episode_id="a", steps=[_step(0)], status="done"))  # claims a step never journalled
    with pytest.raises(ValueError, match="on disk"):
        read_trajectories(path)
    with pytest.raises(ValueError, match="has not ended"):
        TrajectoryWriter(tmp_path / "x.jsonl").end("k", Trajectory())
    with pytest.raises(ValueError, match="fsync"):
        TrajectoryWriter(tmp_path / "y.jsonl", fsync="sometimes")  # type: ignore[arg-type]


WRITER = textwrap.dedent(
    """
    import sys
    from openenv_echo import Trajectory, TrajectoryWriter, StepRecord, ObservationRecord, env_output
    w = TrajectoryWriter(sys.argv[1], fsync=sys.argv[2])
    run = sys.argv[3]
    for e in range(10**9):
        traj = Trajectory(episode_id=f"{run}-{e}")
        key = w.begin(traj)
        for i in range(e % 7):
            obs = ObservationRecord(segments=[env_output("x" * (e * 997 % 20000) + str(i))], reward=float(i))
            step = StepRecord(action={"e": e, "i": i}, observation=obs)
            w.step(key, i, step)
            traj.steps.append(step)
            print(f"{run}-{e}", i, flush=True)  # acknowledged: the step is journalled
        traj.status = "done" if e % 2 else "truncated"
        w.end(key, traj)
    """
)


def test_writer_killed_at_random_points_loses_no_completed_step(tmp_path: Path) -> None:
    """SIGKILL a journalling process at random points, 12 times into one file: every step it acknowledged reads
    back exactly; nothing else is corrupt; only the episode in flight at each kill is open (read as cut)."""
    rng = random.Random(1234)
    path = tmp_path / "killed.jsonl"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    acknowledged: dict[str, int] = {}
    for run in range(12):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(path), "episode", f"r{run}"], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        for _ in range(rng.randint(1, 40)):
            episode, step = proc.stdout.readline().split()
            acknowledged[episode] = int(step) + 1
        time.sleep(rng.random() * 0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for line in proc.stdout.read().split("\n")[:-1]:  # a line cut by the kill acknowledges nothing
            episode, step = line.split()
            acknowledged[episode] = int(step) + 1
        proc.stdout.close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = {t.episode_id: t for t in read_trajectories(path, open_episodes=True)}
        for episode, n in acknowledged.items():
            assert episode in got and len(got[episode].steps) >= n, (episode, n)
        for episode, t in got.items():
            e = int(episode.split("-")[1])
            assert [s.action for s in t.steps] == [{"e": e, "i": i} for i in range(len(t.steps))]
            assert all(s.observation.text.startswith("x" * (e * 997 % 20000)) for s in t.steps)
            if t.status == "cut":
                assert t.error is not None and t.error.type == "JournalEnded"
            else:
                assert t.status == ("done" if e % 2 else "truncated") and len(t.steps) == e % 7
        open_ = [t for t in got.values() if t.status == "cut"]
        assert len(open_) <= run + 1  # at most one in flight per killed process

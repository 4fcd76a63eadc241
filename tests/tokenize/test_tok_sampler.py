"""Sampler metadata (issue #15 item 5): per-token logprobs and the temperature of sampled actions survive the
trajectory's JSON, token-in-token-out assembly, JSONL/Parquet export and collation, aligned with the tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from openenv_echo.roles import Role
from openenv_echo.tokenization import collate, read_jsonl, read_parquet, tokenize_trajectory, write_jsonl, write_parquet
from openenv_echo.tokenization.fragment_encoding import fragment_codec
from openenv_echo.tokenization.template import probe_template
from openenv_echo.trajectory import ObservationRecord, StepRecord, Trajectory
from openenv_echo.wire import env_output


def _traj(tok: Any) -> tuple[Trajectory, list[list[float]]]:
    codec = fragment_codec(tok)
    eot = list(probe_template(tok).eot_ids)
    steps, logps = [], []
    for k, cmd in enumerate(["ls -la", "cat a.txt"]):
        ids = codec.encode_action(cmd) + eot
        lp = [-0.125 * (k + 1) - 0.01 * j for j in range(len(ids))]
        logps.append(lp)
        steps.append(
            StepRecord(
                action={"command": cmd},
                action_token_ids=ids,
                action_logprobs=lp,
                sampling_temperature=0.7,
                observation=ObservationRecord(segments=[env_output(f"out {k}\n")]),
            )
        )
    steps.append(  # a step without sampler data (e.g. a scripted action)
        StepRecord(action={}, action_text="pwd", observation=ObservationRecord(segments=[env_output("/\n")]))
    )
    return Trajectory(episode_id="e", steps=steps), logps


def test_logprobs_reach_the_tokens_they_belong_to(stable_tok: Any, tmp_path: Path) -> None:
    traj, logps = _traj(stable_tok)
    traj = Trajectory.from_json(traj.to_json())  # survive the trajectory's JSON
    tt = tokenize_trajectory(traj, stable_tok)
    assert tt.sampling_temperature == pytest.approx(0.7)
    assert tt.sampler_logprobs is not None and tt.sampler_logprobs.shape == tt.input_ids.shape
    have = ~np.isnan(tt.sampler_logprobs)
    flat = [v for lp in logps for v in lp]
    assert tt.sampler_logprobs[have].tolist() == pytest.approx(flat)
    assert (tt.role_ids[have] == Role.ACTION.code).all()
    sampled = [i for s in traj.steps[:2] for i in s.action_token_ids or []]
    assert tt.input_ids[have].tolist() == sampled  # the logprob of token t sits at token t
    # export and back
    for write, read, name in ((write_jsonl, read_jsonl, "x.jsonl"), (write_parquet, read_parquet, "x.parquet")):
        write([tt], tmp_path / name)
        [back] = read(tmp_path / name)
        assert back.sampling_temperature == pytest.approx(0.7)
        assert np.allclose(back.sampler_logprobs, tt.sampler_logprobs, equal_nan=True)
    # collate: aligned with the masks, on both padding sides
    short = tt.truncate(5)
    for side in ("left", "right"):
        batch = collate([tt, short], tokenizer=stable_tok, padding_side=side)
        m = batch["sampler_logprobs_mask"][0]
        assert batch["input_ids"][0][m].tolist() == sampled
        assert batch["sampler_logprobs"][0][m].tolist() == pytest.approx(flat)
        assert (batch["action_mask"][0] | ~m).all()  # every sampled token is an action target
        assert int(batch["sampler_logprobs_mask"][1].sum()) == int((~np.isnan(short.sampler_logprobs)).sum())
        assert batch["sampling_temperature"].tolist() == pytest.approx([0.7, 0.7])


def test_no_sampler_data_means_no_mask_and_nan_temperature(stable_tok: Any) -> None:
    traj, _ = _traj(stable_tok)
    for s in traj.steps:
        s.action_logprobs, s.sampling_temperature = None, None
    tt = tokenize_trajectory(traj, stable_tok)
    assert tt.sampler_logprobs is None and tt.sampling_temperature is None
    batch = collate([tt], tokenizer=stable_tok)
    assert not batch["sampler_logprobs_mask"].any() and batch["sampling_temperature"].isnan().all()


def test_bad_sampler_data_is_refused(stable_tok: Any) -> None:
    with pytest.raises(ValidationError, match="same length"):
        StepRecord(action={}, action_token_ids=[1, 2], action_logprobs=[-1.0], observation=ObservationRecord())
    with pytest.raises(ValidationError, match="same length"):
        StepRecord(action={}, action_logprobs=[-1.0], observation=ObservationRecord())
    traj, _ = _traj(stable_tok)
    traj.steps[1].sampling_temperature = 1.0
    with pytest.raises(ValueError, match="two temperatures"):
        tokenize_trajectory(traj, stable_tok)

"""TokenizedTrajectory, batch collation, truncation, JSONL/Parquet export (read by HF datasets) and show."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rich.console import Console

from openenv_echo.roles import Role
from openenv_echo.tokenization import (
    TokenizedTrajectory,
    collate,
    read_jsonl,
    read_parquet,
    show,
    tokenize_trajectory,
    write_jsonl,
    write_parquet,
)
from openenv_echo.trajectory import TrajectoryWriter

from .tokhelp import simple_trajectory


def _tt(ids: list[int], roles: list[int], obs_count: int | None = None) -> TokenizedTrajectory:
    return TokenizedTrajectory(
        np.array(ids), np.array(roles), obs_count=sum(r in (2, 3) for r in roles) if obs_count is None else obs_count
    )


def test_masks_follow_the_target_convention() -> None:
    tt = _tt([5, 6, 7, 8], [2, 1, 2, 0])
    assert tt.mask(Role.ENV_OUTPUT).tolist() == [False, False, True, False]  # token 0 is never a target
    assert tt.mask("action").tolist() == [False, True, False, False]
    assert tt.target_mask([Role.ENV_OUTPUT, Role.WARNING]).tolist() == [False, False, True, False]
    assert tt.role_counts() == {Role.CONTEXT: 1, Role.ACTION: 1, Role.ENV_OUTPUT: 2, Role.WARNING: 0}
    assert tt.roles == [Role.ENV_OUTPUT, Role.ACTION, Role.ENV_OUTPUT, Role.CONTEXT]


def test_truncation_keeps_alignment_and_counts_the_tail() -> None:
    tt = _tt([1, 2, 3, 4, 5], [0, 1, 2, 2, 3])
    cut = tt.truncate(3)
    assert cut.input_ids.tolist() == [1, 2, 3] and cut.role_ids.tolist() == [0, 1, 2]
    assert cut.num_truncated == 2 and cut.obs_count == 3  # |O| is the pre-truncation count
    assert cut.truncate(2).num_truncated == 3
    assert tt.truncate(10) is tt
    with pytest.raises(ValueError, match="max_length"):
        tt.truncate(0)


def test_invalid_tokenized_trajectories_are_rejected() -> None:
    with pytest.raises(ValueError, match="role_ids has"):
        _tt([1, 2], [0])
    with pytest.raises(ValueError, match="Role codes"):
        _tt([1], [7])
    with pytest.raises(ValueError, match="Role codes"):
        _tt([1], [-1])
    with pytest.raises(ValueError, match="non-negative"):
        _tt([-3], [0])
    with pytest.raises(ValueError, match="obs_count"):
        _tt([1, 2, 3], [1, 2, 2], obs_count=1)  # 2 body tokens after the first action
    with pytest.raises(ValueError, match="missing"):
        TokenizedTrajectory.from_dict({"input_ids": []})


def test_collate_left_padding_pad_equals_eos(toks: dict[str, Any]) -> None:
    tok = toks["llama"]  # no pad token: pad falls back to eos <|eot_id|>
    eos = tok.eos_token_id
    a = _tt([1, 9, eos], [0, 1, 1])  # the action ends with a real eos
    b = _tt([1, 9, 10, 11, eos], [0, 1, 1, 2, 0])
    batch = collate([a, b], tokenizer=tok, padding_side="left")
    assert batch["input_ids"].tolist() == [[eos, eos, 1, 9, eos], [1, 9, 10, 11, eos]]
    assert batch["attention_mask"].tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert batch["role_ids"].tolist() == [[-1, -1, 0, 1, 1], [0, 1, 1, 2, 0]]
    assert batch["action_mask"].tolist() == [[False, False, False, True, True], [False, True, True, False, False]]
    assert batch["position_ids"].tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    assert batch["env_output_mask"].dtype == torch.bool and batch["input_ids"].dtype == torch.int64
    # a real eos as first token after left padding is never a target
    c = _tt([9, 10], [1, 1])
    batch = collate([c, b], pad_token_id=9, padding_side="left")
    assert batch["action_mask"][0].tolist() == [False, False, False, False, True]


def test_collate_options_and_errors() -> None:
    a, b = _tt([1, 2, 3], [0, 2, 2]), _tt([4], [0])
    batch = collate([a, b], pad_to_multiple_of=8, max_length=2)
    assert batch["input_ids"].shape == (2, 8)
    assert batch["num_truncated"].tolist() == [1, 0] and batch["obs_count"].tolist() == [2, 0]
    assert batch["lengths"].tolist() == [2, 1]
    assert collate([a])["input_ids"].tolist() == [[1, 2, 3]]
    for kwargs, match in [
        ({"padding_side": "middle"}, "padding_side"),
        ({"max_length": 0}, "max_length"),
        ({"pad_token_id": -1}, "pad_token_id"),
        ({"pad_token_id": True}, "pad_token_id"),
        ({"pad_to_multiple_of": 0}, "pad_to_multiple_of"),
    ]:
        with pytest.raises(ValueError, match=match):
            collate([a, b], **kwargs)
    with pytest.raises(ValueError, match="empty batch"):
        collate([])
    with pytest.raises(TypeError, match="TokenizedTrajectory"):
        collate([{"input_ids": [1]}])  # type: ignore[list-item]


def test_jsonl_and_parquet_round_trip_and_datasets(toks: dict[str, Any], tmp_path: Path) -> None:
    import datasets

    tok = toks["qwen"]
    items = [tokenize_trajectory(simple_trajectory(), tok), tokenize_trajectory(simple_trajectory(), tok).truncate(20)]
    for path, write, read in [
        (tmp_path / "t.jsonl", write_jsonl, read_jsonl),
        (tmp_path / "t.parquet", write_parquet, read_parquet),
    ]:
        assert write(items, path) == 2
        back = read(path)
        for x, y in zip(items, back, strict=True):
            assert x.to_dict() == y.to_dict()
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "t.parquet"), split="train")
    assert len(ds) == 2
    row = ds[0]
    assert row["input_ids"] == items[0].input_ids.tolist()
    assert row["env_output_mask"] == items[0].mask(Role.ENV_OUTPUT).tolist()
    assert row["obs_count"] == items[0].obs_count and ds[1]["num_truncated"] == len(items[0]) - 20
    assert row["tokenizer_fingerprint"] == items[0].tokenizer.fingerprint
    ds_json = datasets.load_dataset("json", data_files=str(tmp_path / "t.jsonl"), split="train")
    assert ds_json[1]["role_ids"] == items[1].role_ids.tolist()
    assert write_parquet([], tmp_path / "empty.parquet") == 0 and read_parquet(tmp_path / "empty.parquet") == []
    (tmp_path / "bad.jsonl").write_text(json.dumps({"x": 1}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        read_jsonl(tmp_path / "bad.jsonl")


def test_show_tokenized_export_terminal_and_html(toks: dict[str, Any], tmp_path: Path) -> None:
    tok = toks["qwen"]
    tt = tokenize_trajectory(simple_trajectory(), tok)
    write_parquet([tt, tt], tmp_path / "t.parquet")
    console = Console(record=True, width=100, force_terminal=False)
    shown = show(tmp_path / "t.parquet", tmp_path / "out.html", console=console, limit=1)
    assert len(shown) == 1
    out = console.export_text()
    assert "a.cfg" in out and "tokens per role" in out and "env_output" in out
    counts = tt.role_counts()
    for role in Role:
        assert re.search(rf"{role.value}\s*│\s*{counts[role]}\s*│", out), role
    assert "1 more" in out
    html = (tmp_path / "out.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "key=value" in html and "tokens per role" in html
    assert "color" in html  # role colors as inline styles


def test_show_trajectory_jsonl_with_a_tokenizer(toks: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "traj.jsonl"
    with TrajectoryWriter(path, fsync=False) as w:
        w.write(simple_trajectory())
    console = Console(record=True, width=100)
    [tt] = show(path, tokenizer="local:qwen", console=console)
    assert tt.method == "tito" and "ls -la" in console.export_text()
    [tt3] = show(path, tokenizer=toks["qwen3"], console=Console(record=True))  # not prefix-stable: offline
    assert tt3.method == "offline"
    with pytest.raises(ValueError, match="pass tokenizer="):
        show(path)
    with pytest.raises(FileNotFoundError):
        show(tmp_path / "missing.jsonl")
    with pytest.raises(IndexError):
        show(path, tokenizer=toks["qwen"], index=5, console=Console(record=True))


def test_show_refuses_a_mismatched_tokenizer(toks: dict[str, Any], tmp_path: Path) -> None:
    write_jsonl([tokenize_trajectory(simple_trajectory(), toks["qwen"])], tmp_path / "t.jsonl")
    with pytest.raises(ValueError, match="fingerprint"):
        show(tmp_path / "t.jsonl", tokenizer=toks["llama"], console=Console(record=True))
